"""The server's own SM2 key (signs audit checkpoints), created on first start if absent.

Stored as PKCS#8 PEM with mode 0600 in a 0700 directory, encrypted (PBES2, SM4-CBC) when a
password is given; the public key sits beside it (``<name>.pub.pem``) for auditors, who should
pin its key id out of band. An existing key file that its group or others can access is refused
(``InsecureFileError``) unless ``allow_insecure``.
"""

from __future__ import annotations

import os
from pathlib import Path

from trust.key_files import check_private_file
from trust.sm2 import Sm2PrivateKey


def public_key_path(key_path: str | os.PathLike[str]) -> Path:
    """Where the public half of the server key at ``key_path`` is written: ``<name>.pub.pem``
    beside it (``server-sm2.pem`` → ``server-sm2.pub.pem``)."""
    path = Path(key_path)
    return path.with_name(path.name.removesuffix(".pem") + ".pub.pem")


def ensure_server_key(
    path: str | os.PathLike[str], password: bytes | None = None, *, allow_insecure: bool = False
) -> Sm2PrivateKey:
    """Load the SM2 private key at ``path``, creating it (and ``.pub.pem`` beside it) if missing.

    ``password`` decrypts an encrypted key (and encrypts a new one).

    Raises:
        KeyFormatError: the file exists but is not an SM2 PKCS#8 key, or the password is wrong
            or missing (or given for an unencrypted key).
        InsecureFileError: the key file is accessible to its group or others.
        OSError: the directory cannot be created or written.
    """
    key_path = Path(path)
    if key_path.exists():
        check_private_file(key_path, "the server key", allow_insecure=allow_insecure)
        return Sm2PrivateKey.from_pem(key_path.read_bytes(), password=password)
    key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Sm2PrivateKey.generate()
    try:
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # created concurrently: use that one
        return Sm2PrivateKey.from_pem(key_path.read_bytes(), password=password)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.to_pem(password=password))
    public_key_path(key_path).write_bytes(key.public_key().to_pem())
    return key
