"""Secret files (private keys, their passwords, token files): permission checks and reading.

A secret file must not be readable or writable by its group or by others (``mode & 0o077 == 0``),
as OpenSSH requires of private keys. ``allow_insecure`` turns the refusal into a warning.

Key passwords are read by one reader for the CLI (``env:VAR`` / ``file:PATH``,
:func:`read_password_spec`) and the server (:func:`read_password`): a file is checked like a
secret file, the password is its first line, never empty, and one that protects a new key has
at least :data:`MIN_NEW_KEY_PASSWORD_LENGTH` characters.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import structlog

from trust.errors import TrustError

log = structlog.get_logger("xinserve.trust")


class InsecureFileError(TrustError):
    """A secret file is accessible to its group or to others."""


def check_private_file(path: str | os.PathLike[str], what: str, *, allow_insecure: bool = False) -> None:
    """Refuse (``InsecureFileError``) or, with ``allow_insecure``, warn about a secret file whose
    mode grants its group or others any access. Raises ``OSError`` when it cannot be stat'ed."""
    p = Path(path)
    mode = stat.S_IMODE(p.stat().st_mode)
    if not mode & 0o077:
        return
    message = f"{what} {p.name} is accessible to its group or others (mode {mode:04o}); chmod 600 it"
    if not allow_insecure:
        raise InsecureFileError(message)
    log.warning("insecure_secret_file", what=what, file=p.name, mode=f"{mode:04o}")


MIN_NEW_KEY_PASSWORD_LENGTH = 8
"""Fewest characters of a password that encrypts a new key (NIST SP 800-63B section 5.1.1.2)."""


def read_password(
    env: str | None,
    file: str | os.PathLike[str] | None,
    *,
    allow_insecure: bool = False,
    min_length: int = 0,
) -> bytes | None:
    """A key password from the environment variable ``env`` or the first line of ``file``.

    ``min_length``: fewest characters (UTF-8 decoded; bytes that do not decode count one
    each); pass :data:`MIN_NEW_KEY_PASSWORD_LENGTH` for a password that encrypts a new key.
    Returns ``None`` when neither is given. Raises ``KeyError`` (variable not set), ``ValueError``
    (empty or too short password), ``InsecureFileError`` and ``OSError`` (file).
    """
    if env:
        value = os.environ.get(env)
        if value is None:
            raise KeyError(env)
        password = value.encode("utf-8")
    elif file is not None:
        check_private_file(file, "the key password file", allow_insecure=allow_insecure)
        lines = Path(file).read_bytes().splitlines()
        password = lines[0] if lines else b""
    else:
        return None
    if not password:
        raise ValueError("the key password is empty")
    length = len(password.decode("utf-8", "replace"))
    if length < min_length:
        raise ValueError(f"the key password is too short ({length} characters; at least {min_length})")
    return password


def read_password_spec(spec: str, *, allow_insecure: bool = False, min_length: int = 0) -> bytes:
    """The CLI's ``--password`` source: ``env:VAR`` or ``file:PATH``, read by :func:`read_password`.

    Raises:
        KeyFormatError: a bad source, the variable not set, an empty or too short password, or
            a file its group or others can access (unless ``allow_insecure``).
        OSError: the file cannot be read.
    """
    from trust.errors import KeyFormatError

    kind, _, value = spec.partition(":")
    if kind not in ("env", "file") or not value:
        raise KeyFormatError("password source must be env:VAR or file:PATH")
    try:
        password = read_password(
            value if kind == "env" else None,
            value if kind == "file" else None,
            allow_insecure=allow_insecure,
            min_length=min_length,
        )
    except KeyError:
        raise KeyFormatError(f"environment variable {value} is not set") from None
    except (ValueError, InsecureFileError) as exc:
        raise KeyFormatError(str(exc)) from None
    assert password is not None
    return password


def read_private_key(path: str | os.PathLike[str], password_spec: str | None = None) -> Any:
    """The SM2 private key (``trust.sm2.Sm2PrivateKey``) in the PEM file ``path`` (PKCS#8, or
    encrypted PKCS#8 opened with the password from ``password_spec``: ``env:VAR`` or
    ``file:PATH``, read by :func:`read_password_spec`).

    Raises:
        KeyFormatError: not an SM2 private key, a wrong password, or a bad password source.
        OSError: the file cannot be read.
    """
    from trust.sm2 import Sm2PrivateKey

    password = read_password_spec(password_spec) if password_spec else None
    return Sm2PrivateKey.from_pem(Path(path).read_bytes(), password)
