"""The ``x-forwarded-client-cert`` (XFCC) header of a TLS-terminating gateway, read strictly.

Format (Envoy, ``configuration/http/http_conn_man/headers``): the value is a comma-separated
list of elements, one per proxy, the last added by the proxy nearest to this server; an element
is a semicolon-separated list of ``Key=value`` pairs. Keys are case-insensitive: ``By`` (URI
subjectAltName of that proxy's own certificate), ``Hash`` (hex SHA-256 of the client
certificate's DER), ``Cert`` and ``Chain`` (URL-encoded PEM), ``Subject`` (the client
certificate's subject, always double-quoted), ``URI`` and ``DNS`` (its subjectAltNames; ``DNS``
may repeat). A value holding ``,``, ``;`` or ``=`` is double-quoted, with ``\\"`` for a quote
inside it. Example from Envoy's documentation::

    By=http://frontend.lyft.com;Hash=468ed33b...;Subject="/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client";URI=http://testclient.lyft.com

Strict means: an unknown key, a key given twice (other than ``DNS`` and ``URI``), an empty
element, an unquoted value holding ``=`` or a quote, an unterminated quote, a control
character, a ``Hash`` that is not 64 hex digits or a value over the limits below is an
``XfccError`` whose message names the element and the key, never the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from audit.principals import read_subject, render_name
from service.access.auth import ForwardedClient

HEADER = "x-forwarded-client-cert"
"""The header (gRPC metadata key, HTTP header name) the gateway sets."""

MAX_HEADER_CHARS = 16384
MAX_ELEMENTS = 16
_KEYS = {"by": "by", "hash": "hash", "cert": "cert", "chain": "chain", "subject": "subject", "uri": "uri", "dns": "dns"}
_REPEATABLE = frozenset({"uri", "dns"})
_HEX = frozenset("0123456789abcdef")


class XfccError(ValueError):
    """The header does not follow the XFCC format; the message is safe to send to a client."""


@dataclass(frozen=True)
class XfccElement:
    """One proxy's element of an XFCC header.

    Attributes:
        by: the URI subjectAltName of the proxy that added the element, if given.
        hash: lower-case hex SHA-256 of the client certificate's DER, if given.
        subject: the client certificate's subject as the proxy wrote it, if given (may be empty).
        uris: the certificate's URI subjectAltNames.
        dns: the certificate's DNS subjectAltNames.
        cert: the URL-encoded PEM certificate, if given.
        chain: the URL-encoded PEM chain, if given.
    """

    by: str | None = None
    hash: str | None = None
    subject: str | None = None
    uris: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()
    cert: str | None = None
    chain: str | None = None


def parse_xfcc(value: str) -> list[XfccElement]:
    """The elements of an XFCC header value, in header order (the last is the nearest
    proxy's client).

    Raises:
        XfccError: the value is not well-formed XFCC (see the module docstring).
    """
    if len(value) > MAX_HEADER_CHARS:
        raise XfccError(f"{HEADER} is longer than {MAX_HEADER_CHARS} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise XfccError(f"{HEADER} holds a control character")
    elements: list[XfccElement] = []
    pairs: list[tuple[str, str]] = []
    pos, n = 0, len(value)
    while True:
        index = len(elements) + 1
        key_end = pos
        while key_end < n and value[key_end] not in "=,;":
            key_end += 1
        key = value[pos:key_end].strip()
        if key_end >= n or value[key_end] != "=" or not key:
            raise XfccError(f"{HEADER} element {index}: expected Key=value")
        pos = key_end + 1
        while pos < n and value[pos] == " ":
            pos += 1
        if pos < n and value[pos] == '"':
            text, pos = _quoted(value, pos, index, key)
        else:
            end = pos
            while end < n and value[end] not in ",;":
                end += 1
            text = value[pos:end].strip()
            if "=" in text or '"' in text:
                raise XfccError(f"{HEADER} element {index}: the value of {key} must be double-quoted")
            pos = end
        pairs.append((key, text))
        while pos < n and value[pos] == " ":
            pos += 1
        if pos >= n:
            elements.append(_element(pairs, index))
            break
        sep = value[pos]
        pos += 1
        if sep == ",":
            elements.append(_element(pairs, index))
            pairs = []
            if len(elements) >= MAX_ELEMENTS:
                raise XfccError(f"{HEADER} has more than {MAX_ELEMENTS} elements")
        while pos < n and value[pos] == " ":
            pos += 1
    return elements


def _quoted(value: str, start: int, index: int, key: str) -> tuple[str, int]:
    """The text of the double-quoted value opening at ``start`` and the position after it."""
    out: list[str] = []
    pos = start + 1
    while pos < len(value):
        ch = value[pos]
        if ch == "\\" and pos + 1 < len(value) and value[pos + 1] == '"':
            out.append('"')
            pos += 2
            continue
        if ch == '"':
            end = pos + 1
            while end < len(value) and value[end] == " ":
                end += 1
            if end < len(value) and value[end] not in ",;":
                raise XfccError(f"{HEADER} element {index}: text after the quoted value of {key}")
            return "".join(out), end
        out.append(ch)
        pos += 1
    raise XfccError(f"{HEADER} element {index}: the quoted value of {key} is not closed")


def _element(pairs: list[tuple[str, str]], index: int) -> XfccElement:
    fields: dict[str, str] = {}
    repeated: dict[str, list[str]] = {"uri": [], "dns": []}
    for raw_key, text in pairs:
        key = _KEYS.get(raw_key.lower())
        if key is None:
            raise XfccError(f"{HEADER} element {index}: unknown key {raw_key[:32]!r}")
        if key in _REPEATABLE:
            if text:
                repeated[key].append(text)
            continue
        if key in fields:
            raise XfccError(f"{HEADER} element {index}: {raw_key} given twice")
        fields[key] = text
    digest = fields.get("hash")
    if digest is not None:
        digest = digest.lower()
        if len(digest) != 64 or not set(digest) <= _HEX:
            raise XfccError(f"{HEADER} element {index}: Hash must be 64 hex digits (SHA-256)")
    return XfccElement(
        by=fields.get("by") or None,
        hash=digest,
        subject=fields.get("subject"),
        uris=tuple(repeated["uri"]),
        dns=tuple(repeated["dns"]),
        cert=fields.get("cert") or None,
        chain=fields.get("chain") or None,
    )


def nearest_client(values: Sequence[str]) -> tuple[ForwardedClient, XfccElement]:
    """The client certificate of the proxy nearest to this server: the last element of the one
    XFCC header, with its subject in canonical form (``audit.principals.render_name``).

    Args:
        values: every value of the header the call carried.

    Raises:
        XfccError: no header or more than one, a malformed one, or a last element without
            ``Hash``, or whose ``Subject`` is not a distinguished name (RFC 4514 or OpenSSL's
            slash form).
    """
    if len(values) != 1:
        raise XfccError(f"send {HEADER} once" if values else f"{HEADER} is required on this listener")
    elements = parse_xfcc(values[0])
    last = elements[-1]
    index = len(elements)
    if last.hash is None:
        raise XfccError(f"{HEADER} element {index}: Hash is required")
    subject = ""
    if last.subject:
        name = read_subject(last.subject)
        if name is None:
            raise XfccError(f"{HEADER} element {index}: Subject is not a distinguished name")
        subject = render_name(name)
    return ForwardedClient(last.hash, subject, (*last.uris, *last.dns)), last
