"""Authentication: bearer tokens stored hashed, and mTLS client certificates.

Token file format (``auth.token_file``), one token per line, ``#`` starts a comment::

    <principal> <sha256-hex of the token> [role,role...] [not_after=<RFC 3339 time>]

Roles default to ``user``. A token past its ``not_after`` (e.g. ``not_after=2027-06-30T00:00:00Z``)
is refused as expired. Tokens are compared by SHA-256 digest in constant time
(``hmac.compare_digest``); the file never holds a token itself. Generate a line with
``xinserve token hash --principal NAME`` (prints a fresh token once and the line to store).
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from audit.principals import render_name
from service.core.call_context import Principal
from service.settings.auth import MtlsRoleRule, default_roles

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PRINCIPAL = re.compile(r"^[\x21-\x7e]{1,256}$")
KNOWN_ROLES = frozenset(default_roles())
"""The roles of the default policy (``auth.roles`` replaces them)."""


class TokenFileError(Exception):
    """The token file is malformed; the message names the line (never a token)."""


class AuthenticationFailed(Exception):
    """Credentials were presented but are not valid. The message is safe for the client.

    Attributes:
        principal: the principal the credential names, when known (an expired token).
    """

    def __init__(self, message: str, principal: str | None = None) -> None:
        super().__init__(message)
        self.principal = principal


@dataclass(frozen=True)
class _TokenEntry:
    principal: str
    digest: bytes
    roles: frozenset[str]
    not_after: datetime.datetime | None = None


def hash_token(token: str) -> str:
    """SHA-256 hex of a token, as stored in the token file."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh 256-bit bearer token (URL-safe base64)."""
    return secrets.token_urlsafe(32)


def load_token_file(path: Path, known_roles: Iterable[str] = KNOWN_ROLES) -> list[_TokenEntry]:
    """Parse the token file; roles must be among ``known_roles`` (the policy's roles).

    Raises:
        TokenFileError: a line is malformed (names the line number) or a role is unknown.
    """
    known = frozenset(known_roles)
    entries: list[_TokenEntry] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        not_after = None
        if len(parts) > 2 and parts[-1].startswith("not_after="):
            try:
                text = parts.pop().removeprefix("not_after=")
                # RFC 3339 "Z": Python 3.10's fromisoformat takes only "+00:00".
                text = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
                not_after = datetime.datetime.fromisoformat(text)
            except ValueError:
                raise TokenFileError(f"{path}:{number}: not_after must be an RFC 3339 time") from None
            if not_after.tzinfo is None:
                raise TokenFileError(f"{path}:{number}: not_after needs a time zone (e.g. Z)")
        if len(parts) not in (2, 3) or not _PRINCIPAL.match(parts[0]):
            raise TokenFileError(f"{path}:{number}: expected '<principal> <sha256-hex> [roles] [not_after=TIME]'")
        digest = parts[1].lower().removeprefix("sha256:")
        if not _HEX64.match(digest):
            raise TokenFileError(f"{path}:{number}: the second field must be 64 hex digits (SHA-256)")
        roles = frozenset(parts[2].split(",")) if len(parts) == 3 else frozenset({"user"})
        unknown = roles - known
        if unknown:
            raise TokenFileError(f"{path}:{number}: unknown role(s) {', '.join(sorted(unknown))}")
        entries.append(_TokenEntry(parts[0], bytes.fromhex(digest), roles, not_after))
    return entries


class Authenticator:
    """Turns a call's credentials into a ``Principal``.

    Args:
        tokens: entries from the token file.
        required: refuse calls with no credentials (else they are ``anonymous``).
        anonymous_roles: roles of a caller without credentials.
        mtls_rules: roles of mTLS principals by subject or subjectAltName (first match).
        mtls_default_roles: roles of an mTLS principal no rule matches.
    """

    def __init__(
        self,
        tokens: list[_TokenEntry],
        required: bool,
        anonymous_roles: Iterable[str] = ("user",),
        mtls_rules: Sequence[MtlsRoleRule] = (),
        mtls_default_roles: Iterable[str] = ("user",),
    ) -> None:
        self._tokens = tokens
        self.required = required
        self._anonymous = Principal("anonymous", "anonymous", frozenset(anonymous_roles))
        self._mtls_rules = [
            (re.compile(r.subject) if r.subject is not None else None, r.san, frozenset(r.roles)) for r in mtls_rules
        ]
        self._mtls_default = frozenset(mtls_default_roles)

    @property
    def tokens(self) -> list[_TokenEntry]:
        return list(self._tokens)

    def mtls_roles(self, cert: x509.Certificate, subject: str | None = None) -> frozenset[str]:
        """The roles of a client certificate: the first ``auth.mtls_roles`` rule whose subject
        regex matches the whole canonical subject (``audit.principals.render_name``: RFC 4514,
        unsafe characters hex-escaped; ``subject`` when already rendered) and whose SAN pattern
        matches one DNS name, URI or e-mail subjectAltName (each condition only if given);
        else the default roles. A URI whose path has a dot segment (``.`` or ``..``, also
        percent-encoded: RFC 3986 section 3.3; the SPIFFE ID format forbids them) matches no
        pattern, so ``spiffe://td/audit/*`` never grants to ``spiffe://td/audit/../admin``.

        Raises:
            ValueError: the certificate's subject cannot be decoded.
        """
        subject = render_name(cert.subject) if subject is None else subject
        return self.roles_for(subject, _subject_alt_names(cert))

    def roles_for(self, subject: str, sans: Sequence[str]) -> frozenset[str]:
        """The ``auth.mtls_roles`` roles of a certificate by its canonical subject and its
        DNS, URI and e-mail subjectAltNames (a URI with a dot segment matches no pattern)."""
        sans = [n for n in sans if not _has_dot_segment(n)]
        for subject_re, san, roles in self._mtls_rules:
            if subject_re is not None and not subject_re.fullmatch(subject):
                continue
            if san is not None and not any(fnmatch.fnmatchcase(name, san) for name in sans):
                continue
            return roles
        return self._mtls_default

    def authenticate(
        self,
        authorization: str | None,
        auth_context: dict[str, list[bytes]],
        forwarded: ForwardedClient | None = None,
    ) -> Principal:
        """Return the caller's principal.

        A presented but invalid token fails even when a client certificate is present:
        credentials are never silently downgraded. With a valid token and a client certificate
        the principal is the token's, and carries the certificate's subject and fingerprint
        too. An mTLS principal's name is the certificate subject in canonical form
        (``audit.principals.render_name``); a certificate with an empty subject (RFC 5280
        section 4.1.2.6 allows it when a subjectAltName names the holder, as SPIFFE X.509-SVIDs
        do) is named by its fingerprint, ``sha256:<hex SHA-256 of the DER>``, and its roles come
        from ``auth.mtls_roles`` as for any other certificate.

        ``forwarded`` (a trusted-proxy listener) stands for the client certificate: the one a
        gateway verified and forwarded (``x-forwarded-client-cert``); ``auth_context`` is then
        not read. Such a principal's ``auth_method`` is ``forwarded`` and its roles come from
        ``auth.mtls_roles`` as for a certificate presented directly.

        Raises:
            AuthenticationFailed: bad token, malformed header, none when required, or a client
                certificate whose subject cannot be decoded.
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
            if match.not_after is not None and datetime.datetime.now(datetime.timezone.utc) >= match.not_after:
                raise AuthenticationFailed("the bearer token has expired", match.principal)
            if forwarded is not None:
                return Principal(match.principal, "token", match.roles, forwarded.fingerprint, forwarded.subject)
            cert = _client_certificate(auth_context)
            if cert is None:
                return Principal(match.principal, "token", match.roles)
            fingerprint = cert.fingerprint(hashes.SHA256()).hex()
            return Principal(match.principal, "token", match.roles, fingerprint, _subject(cert))
        if forwarded is not None:
            name = forwarded.subject or f"{CERT_FINGERPRINT_PREFIX}{forwarded.fingerprint}"
            roles = self.roles_for(forwarded.subject, forwarded.sans)
            return Principal(name, "forwarded", roles, forwarded.fingerprint, forwarded.subject)
        cert = _client_certificate(auth_context)
        if cert is not None:
            subject = _subject(cert)
            fingerprint = cert.fingerprint(hashes.SHA256()).hex()
            name = subject or f"{CERT_FINGERPRINT_PREFIX}{fingerprint}"
            return Principal(name, "mtls", self.mtls_roles(cert, subject), fingerprint, subject)
        if self.required:
            raise AuthenticationFailed("authentication required: send a bearer token or a client certificate")
        return self._anonymous


@dataclass(frozen=True)
class ForwardedClient:
    """A client certificate a trusted gateway verified, as it forwarded it.

    Attributes:
        fingerprint: lower-case hex SHA-256 of the certificate's DER (XFCC ``Hash``).
        subject: its subject in canonical form (``audit.principals.render_name``), "" if empty.
        sans: its URI and DNS subjectAltNames.
    """

    fingerprint: str
    subject: str
    sans: tuple[str, ...] = ()


CERT_FINGERPRINT_PREFIX = "sha256:"
"""The principal of a client certificate with an empty subject is this prefix and its fingerprint."""


def certificate_identity(auth_context: dict[str, list[bytes]]) -> tuple[str | None, str | None]:
    """The ``(cert_fingerprint, cert_subject)`` of a call's verified client certificate, for
    the audit record of a call refused before it has a principal (a bad token beside a valid
    certificate): SHA-256 hex of the DER and the canonical subject
    (``audit.principals.render_name``); ``(None, None)`` without a certificate, and a subject of
    ``None`` when it does not decode. Never raises."""
    cert = _client_certificate(auth_context)
    if cert is None:
        return None, None
    try:
        subject: str | None = render_name(cert.subject)
    except ValueError:
        subject = None
    return cert.fingerprint(hashes.SHA256()).hex(), subject


def _client_certificate(auth_context: dict[str, list[bytes]]) -> x509.Certificate | None:
    """The verified client certificate of an mTLS connection, if any."""
    pems = auth_context.get("x509_pem_cert")
    return x509.load_pem_x509_certificate(pems[0]) if pems else None


def _subject(cert: x509.Certificate) -> str:
    """The canonical subject of a verified client certificate.

    Raises:
        AuthenticationFailed: the subject does not decode (e.g. invalid UTF-8 in a UTF8String).
    """
    try:
        return render_name(cert.subject)
    except ValueError:
        raise AuthenticationFailed("the client certificate's subject cannot be decoded") from None


def _subject_alt_names(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    names: list[str] = []
    for kind in (x509.DNSName, x509.UniformResourceIdentifier, x509.RFC822Name):
        names.extend(ext.get_values_for_type(kind))
    return names


def _has_dot_segment(name: str) -> bool:
    """Whether a URI's path has a ``.`` or ``..`` segment (RFC 3986 section 3.3), also written
    with percent-encoded dots or slashes (``%2e``, ``%2f``); names without ``://`` (DNS,
    e-mail) never do."""
    _, sep, rest = name.partition("://")
    if not sep:
        return False
    path = rest.partition("/")[2].split("?", 1)[0].split("#", 1)[0]
    path = path.lower().replace("%2e", ".").replace("%2f", "/")
    return any(seg in (".", "..") for seg in path.split("/"))
