"""Secret files (private keys, their passwords, token files): permission checks and reading.

A secret file must not be readable or writable by its group or by others (``mode & 0o077 == 0``),
as OpenSSH requires of private keys. ``allow_insecure`` turns the refusal into a warning.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

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


def read_password(
    env: str | None, file: str | os.PathLike[str] | None, *, allow_insecure: bool = False
) -> bytes | None:
    """A key password from the environment variable ``env`` or the first line of ``file``.

    Returns ``None`` when neither is given. Raises ``KeyError`` (variable not set), ``ValueError``
    (empty password), ``InsecureFileError`` and ``OSError`` (file).
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
    return password
