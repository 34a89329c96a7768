"""Authentication: bearer tokens stored hashed, and mTLS client certificates.

Token file format (``auth.token_file``), one token per line, ``#`` starts a comment::

    <principal> <sha256-hex of the token> [role,role...]

Roles default to ``user``. Tokens are compared by SHA-256 digest in constant time
(``hmac.compare_digest``); the file never holds a token itself. Generate a line with
``xinserve token hash --principal NAME`` (prints a fresh token once and the line to store).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from service.call_context import ANONYMOUS, Principal

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PRINCIPAL = re.compile(r"^[\x21-\x7e]{1,256}$")
KNOWN_ROLES = frozenset({"user", "admin", "auditor"})


class TokenFileError(Exception):
    """The token file is malformed; the message names the line (never a token)."""


class AuthenticationFailed(Exception):
    """Credentials were presented but are not valid. The message is safe for the client."""


@dataclass(frozen=True)
class _TokenEntry:
    principal: str
    digest: bytes
    roles: frozenset[str]


def hash_token(token: str) -> str:
    """SHA-256 hex of a token, as stored in the token file."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh 256-bit bearer token (URL-safe base64)."""
    return secrets.token_urlsafe(32)


def load_token_file(path: Path) -> list[_TokenEntry]:
    """Parse the token file.

    Raises:
        TokenFileError: a line is malformed (names the line number) or a role is unknown.
    """
    entries: list[_TokenEntry] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) not in (2, 3) or not _PRINCIPAL.match(parts[0]):
            raise TokenFileError(f"{path}:{number}: expected '<principal> <sha256-hex> [roles]'")
        digest = parts[1].lower().removeprefix("sha256:")
        if not _HEX64.match(digest):
            raise TokenFileError(f"{path}:{number}: the second field must be 64 hex digits (SHA-256)")
        roles = frozenset(parts[2].split(",")) if len(parts) == 3 else frozenset({"user"})
        unknown = roles - KNOWN_ROLES
        if unknown:
            raise TokenFileError(f"{path}:{number}: unknown role(s) {', '.join(sorted(unknown))}")
        entries.append(_TokenEntry(parts[0], bytes.fromhex(digest), roles))
    return entries


class Authenticator:
    """Turns a call's credentials into a ``Principal``.

    Args:
        tokens: entries from the token file.
        required: refuse calls with no credentials (else they are ``anonymous``).
    """

    def __init__(self, tokens: list[_TokenEntry], required: bool) -> None:
        self._tokens = tokens
        self.required = required

    def authenticate(self, authorization: str | None, auth_context: dict[str, list[bytes]]) -> Principal:
        """Return the caller's principal.

        A presented but invalid token fails even when a client certificate is present:
        credentials are never silently downgraded.

        Raises:
            AuthenticationFailed: bad token, malformed header, or none when required.
        """
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthenticationFailed("the authorization metadata must be 'Bearer <token>'")
            digest = hashlib.sha256(token.strip().encode("utf-8")).digest()
            match = None
            for entry in self._tokens:  # compare against all, in constant time each
                if hmac.compare_digest(entry.digest, digest):
                    match = entry
            if match is None:
                raise AuthenticationFailed("invalid bearer token")
            cert = _client_certificate(auth_context)
            fingerprint = cert.fingerprint(hashes.SHA256()).hex() if cert is not None else None
            return Principal(match.principal, "token", match.roles, fingerprint)
        cert = _client_certificate(auth_context)
        if cert is not None:
            return Principal(
                cert.subject.rfc4514_string(), "mtls", frozenset({"user"}), cert.fingerprint(hashes.SHA256()).hex()
            )
        if self.required:
            raise AuthenticationFailed("authentication required: send a bearer token or a client certificate")
        return ANONYMOUS


def _client_certificate(auth_context: dict[str, list[bytes]]) -> x509.Certificate | None:
    """The verified client certificate of an mTLS connection, if any."""
    pems = auth_context.get("x509_pem_cert")
    return x509.load_pem_x509_certificate(pems[0]) if pems else None
