"""Loading the checkpoint signing key for ``AuditLog`` (through ``trust``)."""

from __future__ import annotations

from typing import Any

from audit.config import AuditSettings
from audit.errors import AuditConfigError


def load_signer(settings: AuditSettings, *, create: bool = False) -> Any:
    """The checkpoint signing key (``trust.sm2.Sm2PrivateKey``) from ``settings.signing_key_path``.

    Decrypts it with the password from ``signing_key_password_env`` or
    ``signing_key_password_file``; refuses a key or password file its group or others can access
    unless ``allow_insecure_key_permissions``. ``create``: generate the key (0600, encrypted
    with the password if one is configured, which must then have at least
    ``trust.key_files.MIN_NEW_KEY_PASSWORD_LENGTH`` characters) when the file does not exist
    (the server's first start). Raises ``AuditConfigError`` (safe to show: no path or password in it).
    """
    from trust.errors import KeyFormatError
    from trust.key_files import MIN_NEW_KEY_PASSWORD_LENGTH, InsecureFileError, read_password
    from trust.server_key import ensure_server_key

    path = settings.signing_key_path
    if path is None:
        raise AuditConfigError("audit needs an SM2 signing key (signing_key_path or the server key)")
    allow = settings.allow_insecure_key_permissions
    new_key = create and not path.exists()
    try:
        password = read_password(
            settings.signing_key_password_env,
            settings.signing_key_password_file,
            allow_insecure=allow,
            min_length=MIN_NEW_KEY_PASSWORD_LENGTH if new_key else 0,
        )
    except KeyError as exc:
        raise AuditConfigError(f"environment variable {exc.args[0]} is not set") from None
    except (ValueError, InsecureFileError) as exc:
        raise AuditConfigError(f"the audit signing key's password: {exc}") from None
    except OSError as exc:
        raise AuditConfigError(f"cannot read the audit signing key's password file: {exc.strerror}") from None
    if not create and not path.exists():
        raise AuditConfigError("cannot read the audit signing key: No such file or directory")
    try:
        return ensure_server_key(path, password, allow_insecure=allow)
    except InsecureFileError as exc:
        raise AuditConfigError(str(exc)) from None
    except OSError as exc:
        raise AuditConfigError(f"cannot read the audit signing key: {exc.strerror}") from None
    except KeyFormatError as exc:
        raise AuditConfigError(f"the audit signing key is unusable: {exc}") from None
