"""The server's own SM2 key (signs audit checkpoints), created on first start if absent.

Stored as unencrypted PKCS#8 PEM with mode 0600 in a 0700 directory; the public key sits
beside it (``<name>.pub.pem``) for auditors, who should pin its key id out of band. Operators
who keep the key elsewhere (HSM, secret store, encrypted PEM) configure its path instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from trust.sm2 import Sm2PrivateKey


def ensure_server_key(path: str | os.PathLike[str]) -> Sm2PrivateKey:
    """Load the SM2 private key at ``path``, creating it (and ``.pub.pem`` beside it) if missing.

    Raises:
        KeyFormatError: the file exists but is not an unencrypted SM2 PKCS#8 key.
        OSError: the directory cannot be created or written.
    """
    key_path = Path(path)
    if key_path.exists():
        return Sm2PrivateKey.from_pem(key_path.read_bytes())
    key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Sm2PrivateKey.generate()
    try:
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # created concurrently: use that one
        return Sm2PrivateKey.from_pem(key_path.read_bytes())
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.to_pem())
    pub = key_path.with_name(key_path.name.removesuffix(".pem") + ".pub.pem")
    pub.write_bytes(key.public_key().to_pem())
    return key
