"""Principal names as the audit log stores them, and the principal filters an auditor types.

**Canonical form of an mTLS principal.** The client certificate's subject as an RFC 4514
string, exactly as pyca/cryptography's ``x509.Name.rfc4514_string()`` renders it — RDNs from
the last to the first of the certificate's sequence (``CN=teller-7,O=Bank,C=CN`` for a
certificate issued to ``C=CN, O=Bank, CN=teller-7``), as LDAP, Java's
``X500Principal.getName()`` and ``openssl x509 -noout -subject -nameopt RFC2253`` print it —
with two additions that make the rendering unique and safe to display:

* the attributes of a multi-valued RDN (``CN=a+UID=b``) are sorted by their rendered text
  (an RDN is a set, so its order carries no meaning);
* every character that is invisible or changes how the text around it is displayed is written
  as RFC 4514 hex escapes of its UTF-8 bytes (U+202E becomes ``\\E2\\80\\AE``): control
  characters (Unicode category Cc: C0, DEL, C1), format characters (Cf: the bidi marks,
  embeddings, overrides and isolates U+200E, U+200F, U+061C, U+202A–U+202E, U+2066–U+2069,
  zero-width characters, U+FEFF), line and paragraph separators (Zl, Zp), spaces other than
  U+0020 (Zs), surrogates and private-use characters (Cs, Co). The result still parses as
  RFC 4514 to the same name, so a stored principal never displays as anything but what it is.

**Filters.** :func:`principal_candidates` turns what an auditor types into the stored strings
it matches: the text exactly as typed, and, when it reads as a distinguished name, that name
in canonical form in the order typed and in reverse (the certificate's order, as
``openssl x509 -subject`` prints it by default). Reading a name, attribute types are
case-insensitive and may be RFC 4514 short names, common long names (``commonName``,
``emailAddress``...) or dotted OIDs; unescaped spaces around ``,``, ``+`` and the ``=`` after
a type are ignored; a value may be quoted (``OU = "a, b"``, RFC 2253 section 4, as OpenSSL's
default ``-nameopt oneline`` prints it); values are compared exactly (case, inner spaces and
escapes decoded); no other RDN order matches.

The other layouts ``openssl x509 -noout -subject -nameopt X`` prints are read too, with
OpenSSL's escapes (``\\UXXXX``, ``\\WXXXXXXXX``, ``\\XX``, ``\\\\``; ``\\xXX`` and ``\\/`` in the
slash form): the slash form of ``compat`` (``/C=CN/O=Bank/CN=teller-8``, ``+`` joining the
attributes of one RDN); RDNs separated by ``; `` (``sep_semi_plus_space``) or ``, ``
(``sep_comma_plus_space``, ``utf8``) with `` + `` between the attributes of one RDN and values
unescaped; and ``multiline`` (one RDN a line, ``type = value``). A filter that starts like a
distinguished name (an attribute type this module knows, then ``=``) but reads as none of
these — typically a value holding a separator the layout does not escape, such as the comma
in ``O=Bank, Ltd`` printed by ``utf8``, which leaves a piece without ``=`` — raises
:class:`PrincipalFilterError` instead of matching nothing.
"""

from __future__ import annotations

import re
import unicodedata
import warnings

from cryptography import x509
from cryptography.x509.oid import NameOID, ObjectIdentifier

from audit.errors import AuditConfigError

__all__ = ["PrincipalFilterError", "display_safe", "parse_name", "principal_candidates", "read_subject", "render_name"]


class PrincipalFilterError(AuditConfigError):
    """A principal filter that starts like a distinguished name but cannot be read as one
    unambiguously; the message says why and is safe to show (filter text display-escaped).
    The CLI exits 2 with it; ``AuditService`` answers INVALID_ARGUMENT naming
    ``filter.principal``."""


_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})

_TYPE_NAMES: dict[str, ObjectIdentifier] = {
    alias.lower(): oid
    for oid, aliases in (
        (NameOID.COMMON_NAME, ("CN", "commonName")),
        (NameOID.COUNTRY_NAME, ("C", "countryName")),
        (NameOID.LOCALITY_NAME, ("L", "localityName")),
        (NameOID.STATE_OR_PROVINCE_NAME, ("ST", "S", "stateOrProvinceName")),
        (NameOID.STREET_ADDRESS, ("STREET", "streetAddress")),
        (NameOID.ORGANIZATION_NAME, ("O", "organizationName")),
        (NameOID.ORGANIZATIONAL_UNIT_NAME, ("OU", "organizationalUnitName")),
        (NameOID.DOMAIN_COMPONENT, ("DC", "domainComponent")),
        (NameOID.USER_ID, ("UID", "userId")),
        (NameOID.EMAIL_ADDRESS, ("emailAddress", "E", "email")),
        (NameOID.SERIAL_NUMBER, ("serialNumber",)),
        (NameOID.SURNAME, ("SN", "surname")),
        (NameOID.GIVEN_NAME, ("GN", "givenName")),
        (NameOID.TITLE, ("title",)),
        (NameOID.INITIALS, ("initials",)),
        (NameOID.GENERATION_QUALIFIER, ("generationQualifier",)),
        (NameOID.DN_QUALIFIER, ("dnQualifier",)),
        (NameOID.PSEUDONYM, ("pseudonym",)),
        (NameOID.POSTAL_CODE, ("postalCode",)),
        (NameOID.BUSINESS_CATEGORY, ("businessCategory",)),
        (NameOID.ORGANIZATION_IDENTIFIER, ("organizationIdentifier",)),
    )
    for alias in aliases
}
"""Attribute type names an auditor may type (case-insensitive) → OID."""

_SPECIAL = frozenset(' "#+,;<=>\\')
"""Characters RFC 4514 lets a value escape with a backslash."""

_DOTTED_OID = re.compile(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))+")


def _unsafe(ch: str) -> bool:
    category = unicodedata.category(ch)
    return category in _UNSAFE_CATEGORIES or (category == "Zs" and ch != " ")


def _hex_escape(text: str) -> str:
    if text.isascii() and text.isprintable():
        return text
    return "".join("".join(f"\\{b:02X}" for b in ch.encode("utf-8")) if _unsafe(ch) else ch for ch in text)


def render_name(name: x509.Name) -> str:
    """The canonical principal string of an X.509 name (see the module docstring).

    Equal to ``name.rfc4514_string()`` for names without multi-valued RDNs out of order and
    without unsafe characters. Raises ``ValueError`` only as cryptography does for a name it
    cannot decode.
    """
    return ",".join("+".join(sorted(_hex_escape(attr.rfc4514_string()) for attr in rdn)) for rdn in reversed(name.rdns))


def display_safe(text: str) -> str:
    """``text`` with the characters :func:`render_name` escapes written as ``\\uXXXX``
    (``\\UXXXXXXXX`` above U+FFFF), for free text that is not a distinguished name (a filter
    as typed, in a log line or an audit detail)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        (f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}") if _unsafe(ch) else ch for ch in text
    )


def _split(text: str) -> list[list[tuple[str, str]]] | None:
    """RDNs of ``(type, raw value)`` with unescaped outer spaces dropped; None if not a DN."""
    rdns: list[list[tuple[str, str]]] = [[]]
    type_chars: list[str] = []
    units: list[tuple[str, bool]] = []  # (text, escaped)
    in_value = False

    def finish() -> bool:
        while units and units[0] == (" ", False):
            units.pop(0)
        while units and units[-1] == (" ", False):
            units.pop()
        attr_type = "".join(type_chars).strip(" ")
        if not attr_type:
            return False
        rdns[-1].append((attr_type, "".join(u for u, _ in units)))
        type_chars.clear()
        units.clear()
        return True

    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if not in_value or i + 1 >= len(text):
                return None
            units.append((text[i : i + 2], True))
            i += 2
            continue
        i += 1
        if not in_value:
            if ch == "=":
                in_value = True
            elif ch in ",+":
                return None
            else:
                type_chars.append(ch)
        elif ch in ",+":
            if not finish():
                return None
            in_value = False
            if ch == ",":
                rdns.append([])
        elif ch == '"' and all(u == (" ", False) for u in units):
            end = _closing_quote(text, i)
            if end is None:
                return None
            units[:] = _quoted_units(text[i:end])
            i = end + 1
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] not in ",+":
                return None
        else:
            units.append((ch, False))
    if not in_value or not finish():
        return None
    return rdns


def _closing_quote(text: str, start: int) -> int | None:
    """Index of the unescaped ``"`` that closes a quoted value starting at ``start``."""
    j = start
    while j < len(text):
        if text[j] == "\\":
            j += 2
        elif text[j] == '"':
            return j
        else:
            j += 1
    return None


def _quoted_units(content: str) -> list[tuple[str, bool]]:
    """A quoted value (RFC 2253 section 4, as OpenSSL prints ``OU = "a, b"``) as RFC 4514
    units: its special characters and spaces escaped, its escapes kept."""
    units: list[tuple[str, bool]] = []
    j = 0
    while j < len(content):
        if content[j] == "\\":
            units.append((content[j : j + 2], True))
            j += 2
            continue
        ch = content[j]
        units.append(("\\" + ch, True) if ch in _SPECIAL else (ch, False))
        j += 1
    return units


def parse_name(text: str) -> x509.Name | None:
    """The distinguished name ``text`` spells, read leniently as described in the module
    docstring (first RDN typed = last of the certificate's sequence, as in RFC 4514), or
    None when it is not one (an unknown attribute type, a bad escape, invalid UTF-8 in hex
    escapes, a value cryptography refuses such as a CN over 64 bytes)."""
    if "=" not in text:
        return None
    rdns = _split(text)
    if rdns is None:
        return None
    parts: list[str] = []
    for rdn in rdns:
        avas: list[str] = []
        for attr_type, value in rdn:
            oid = _TYPE_NAMES.get(attr_type.lower())
            if oid is None and not _DOTTED_OID.fullmatch(attr_type):
                return None
            avas.append(f"{oid.dotted_string if oid else attr_type}={value}")
        parts.append("+".join(avas))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return x509.Name.from_rfc4514_string(",".join(parts))
    except ValueError:  # includes UnicodeDecodeError of hex escapes
        return None


_DN_START = re.compile(r"\s*/?\s*([A-Za-z][A-Za-z0-9-]*|[0-9]+(?:\.[0-9]+)+)\s*=")
_OPENSSL_ESCAPE = re.compile(r"\\(?:U([0-9A-Fa-f]{4})|W([0-9A-Fa-f]{8})|([0-9A-Fa-f]{2})|(\\))")
_COMPAT_ESCAPE = re.compile(r"\\(?:x([0-9A-Fa-f]{2})|([/+]))")


def _looks_like_dn(text: str) -> bool:
    m = _DN_START.match(text)
    return m is not None and (m.group(1).lower() in _TYPE_NAMES or _DOTTED_OID.fullmatch(m.group(1)) is not None)


def _bytes_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _unescape_openssl(value: str) -> str:
    """A value as ``X509_NAME_print_ex`` escapes it without RFC 2253 quoting (``\\UXXXX``,
    ``\\WXXXXXXXX``, ``\\XX`` bytes, ``\\\\``; any other backslash is itself)."""
    out: list[str] = []
    pending = bytearray()
    pos = 0
    for m in _OPENSSL_ESCAPE.finditer(value):
        literal = value[pos : m.start()]
        pos = m.end()
        if m.group(3) is not None and not literal:
            pending.append(int(m.group(3), 16))
            continue
        out.append(_bytes_text(bytes(pending)) + literal)
        pending.clear()
        if m.group(3) is not None:
            pending.append(int(m.group(3), 16))
        elif m.group(4) is not None:
            out.append(m.group(4))
        else:
            out.append(chr(int(m.group(1) or m.group(2), 16)))
    out.append(_bytes_text(bytes(pending)) + value[pos:])
    return "".join(out)


def _unescape_compat(value: str) -> str:
    """A value of the slash form (``X509_NAME_oneline``: ``\\xXX`` bytes, ``\\/``, ``\\+``;
    any other backslash is itself)."""
    raw = bytearray()
    pos = 0
    for m in _COMPAT_ESCAPE.finditer(value):
        raw += value[pos : m.start()].encode("utf-8")
        raw += bytes([int(m.group(1), 16)]) if m.group(1) is not None else m.group(2).encode("utf-8")
        pos = m.end()
    raw += value[pos:].encode("utf-8")
    return _bytes_text(bytes(raw))


def _split_unescaped(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` not escaped as the slash form escapes (``\\/``, ``\\+``)."""
    parts: list[str] = []
    start = i = 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 2] in ("/", "+"):
            i += 2
        elif text[i] == sep:
            parts.append(text[start:i])
            start = i = i + 1
        else:
            i += 1
    parts.append(text[start:])
    return parts


def _read_layout(rdn_texts: list[list[str]], compat: bool) -> x509.Name:
    rdns: list[x509.RelativeDistinguishedName] = []
    for ava_texts in rdn_texts:
        attrs: list[x509.NameAttribute] = []
        for ava in ava_texts:
            attr_type, eq, value = ava.partition("=")
            attr_type = attr_type.strip()
            if not eq:
                raise ValueError(
                    f"{display_safe(ava.strip())!r} has no '=': a value holding a separator this layout "
                    "does not escape (',', ';', '/', ' + ') cannot be told from the separator"
                )
            oid = _TYPE_NAMES.get(attr_type.lower())
            if oid is None:
                if not _DOTTED_OID.fullmatch(attr_type):
                    raise ValueError(f"unknown attribute type {display_safe(attr_type)!r}")
                oid = ObjectIdentifier(attr_type)
            decoded = _unescape_compat(value) if compat else _unescape_openssl(value.strip(" "))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                attrs.append(x509.NameAttribute(oid, decoded))
        rdns.append(x509.RelativeDistinguishedName(attrs))
    return x509.Name(rdns)


def _parse_openssl_layouts(text: str) -> list[x509.Name]:
    """Every name ``text`` spells in one of OpenSSL's non-RFC-2253 layouts (module
    docstring), first RDN typed first. Raises ``ValueError`` with a display-safe reason when
    it spells none. Only the RDN separators ``text`` holds are tried."""
    stripped = text.strip()
    if stripped.startswith("/"):
        return [_read_layout([_split_unescaped(r, "+") for r in _split_unescaped(stripped[1:], "/")], True)]
    if "\n" in stripped:
        return [_read_layout([line.split(" + ") for line in stripped.splitlines() if line.strip()], False)]
    names: list[x509.Name] = []
    reasons: list[str] = []
    for sep in [sep for sep in ("; ", ", ") if sep in stripped] or [", "]:
        try:
            names.append(_read_layout([part.split(" + ") for part in stripped.split(sep)], False))
        except ValueError as exc:
            reasons.append(str(exc))
    if not names:
        raise ValueError(reasons[0] if reasons else "not a distinguished name")
    return names


def read_subject(text: str) -> x509.Name | None:
    """The certificate subject a proxy wrote as text: RFC 4514 / RFC 2253 (:func:`parse_name`,
    as Envoy and Go's ``pkix.Name.String`` write it) or OpenSSL's slash form
    (``/C=CN/O=Bank/CN=teller-8``, certificate order); None when it is neither. The other
    OpenSSL layouts are not read here: a comma inside their values is ambiguous."""
    name = parse_name(text)
    if name is not None or not text.strip().startswith("/"):
        return name
    try:
        return _parse_openssl_layouts(text)[0]
    except ValueError:
        return None


def principal_candidates(text: str) -> tuple[str, ...]:
    """The stored principal strings a filter ``text`` matches: ``text`` itself and, for each
    way it reads as a distinguished name (RFC 4514 as :func:`parse_name` reads it, or an
    OpenSSL layout of the module docstring), that name's canonical form in the order typed
    and reversed.

    Raises :class:`PrincipalFilterError` when ``text`` starts like a distinguished name
    (a known attribute type, then ``=``) but reads as none.

    >>> principal_candidates("cn=teller-7, o=Bank")
    ('cn=teller-7, o=Bank', 'CN=teller-7,O=Bank', 'O=Bank,CN=teller-7')
    """
    found = [text]
    names: list[x509.Name] = []
    name = parse_name(text)
    if name is not None:
        names.append(name)
    reason = "it is not a distinguished name in any layout this filter reads"
    if "=" in text:
        try:
            names.extend(_parse_openssl_layouts(text))
        except ValueError as exc:
            reason = str(exc) or reason
    if not names and _looks_like_dn(text):
        raise PrincipalFilterError(
            f"principal filter {display_safe(text)!r} looks like a distinguished name but cannot be read "
            f"unambiguously: {reason}; paste the subject as openssl x509 -noout -subject -nameopt RFC2253 "
            "(or oneline) prints it"
        )
    for name in names:
        found.append(render_name(name))
        found.append(render_name(x509.Name(list(reversed(name.rdns)))))
    return tuple(dict.fromkeys(found))
