"""A client of the Confidential Containers Key Broker Service (Trustee KBS protocol, RCAR).

Follows Trustee ``kbs/docs/kbs_attestation_protocol.md`` (protocol version 0.4.0):

1. ``POST /kbs/v0/auth`` ``{"version", "tee", "extra-params"}`` → ``Set-Cookie: kbs-session-id``
   and the challenge ``{"nonce", "extra-params"}``;
2. an ephemeral EC P-256 key pair is made; its public JWK (``alg`` ECDH-ES+A256KW) and the nonce
   form ``runtime-data``; the provider collects evidence whose report data is the hash of it
   (:func:`trust.tee.binding.kbs_report_data`); ``POST /kbs/v0/attest`` with ``runtime-data`` and
   ``tee-evidence {primary_evidence, additional_evidence}`` → ``{"token": <JWT>}``;
3. ``GET /kbs/v0/resource/<repository>/<type>/<tag>`` with the session cookie → a JWE (flattened
   JSON serialisation) encrypted to that key, decrypted with joserfc.

HTTP with httpx, JOSE with joserfc. Every failure is a :class:`KeyReleaseError` with a
:class:`TeeReason`: nothing half-released is ever returned. The key pair lives only in memory for
one release. Blocking: call :meth:`KbsClient.get_resource` from a worker thread in async code.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
from dataclasses import dataclass
from typing import Any

import httpx
from joserfc import jwe
from joserfc.errors import JoseError
from joserfc.jwk import ECKey

from trust.tee.binding import kbs_report_data, runtime_data
from trust.tee.errors import EvidenceError, KeyReleaseError, TeeReason
from trust.tee.evidence import (
    TEE_CCA,
    TEE_CSV,
    TEE_NONE,
    TEE_SAMPLE,
    TEE_SNP,
    TEE_TDX,
    Evidence,
    EvidenceProvider,
)

PROTOCOL_VERSION = "0.4.0"
SESSION_COOKIE = "kbs-session-id"
KEY_ALG = "ECDH-ES+A256KW"
CONTENT_ENC = "A256GCM"
JWE_ALGORITHMS = [KEY_ALG, CONTENT_ENC]
MAX_RESPONSE = 1 << 20
_RESOURCE = re.compile(r"^[A-Za-z0-9._-]{1,128}/[A-Za-z0-9._-]{1,128}/[A-Za-z0-9._-]{1,128}$")


def check_resource_path(resource: str) -> str:
    """``<repository>/<type>/<tag>``, each part ``[A-Za-z0-9._-]``; ValueError otherwise."""
    if not isinstance(resource, str) or not _RESOURCE.match(resource) or ".." in resource.split("/"):
        raise ValueError("a KBS resource id is <repository>/<type>/<tag> of letters, digits, '.', '_', '-'")
    return resource


def primary_evidence(evidence: Evidence) -> Any:
    """The ``tee-evidence.primary_evidence`` JSON value for ``evidence``.

    TDX: Trustee's ``{"quote": <base64>, "cc_eventlog": null}``; CSV and sample: the evidence JSON
    itself; SNP: ``{"report": <base64>, "cert_table": <base64 of auxblob>}``; CCA:
    ``{"token": <base64>}``.
    """
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    if evidence.tee == TEE_TDX:
        return {"quote": b64(evidence.raw), "cc_eventlog": None}
    if evidence.tee in (TEE_CSV, TEE_SAMPLE):
        return json.loads(evidence.raw)
    if evidence.tee == TEE_SNP:
        return {"report": b64(evidence.raw), "cert_table": b64(evidence.aux)}
    if evidence.tee == TEE_CCA:
        return {"token": b64(evidence.raw)}
    raise EvidenceError(TeeReason.PROVIDER_ERROR, f"no KBS evidence encoding for TEE {evidence.tee!r}")


@dataclass(frozen=True)
class ReleasedResource:
    """A resource the KBS released: its bytes (secret: never log them) and where it came from."""

    resource: str
    value: bytes
    kbs_url: str
    tee: str
    recorded: bool
    evidence_sm3: str


def _problem(response: httpx.Response) -> str:
    """The RFC 7807 ``type`` tail of a KBS error (``PolicyDeny``...), or the HTTP status."""
    try:
        doc = response.json()
        kind = str(doc.get("type", "")).rsplit("/", 1)[-1][:64]
    except (ValueError, AttributeError):
        kind = ""
    return kind or f"HTTP {response.status_code}"


class KbsSession:
    """One KBS session: its own cookie jar (``kbs-session-id``), nonce and ephemeral key."""

    def __init__(self, http: httpx.Client, nonce: str) -> None:
        self.http = http
        self.nonce = nonce
        self.key = ECKey.generate_key("P-256")
        self.token: str | None = None

    def public_jwk(self) -> dict[str, Any]:
        jwk = self.key.as_dict(private=False)
        jwk["alg"] = KEY_ALG
        return jwk

    def close(self) -> None:
        self.http.close()


class KbsClient:
    """Releases resources from a Trustee KBS for the evidence of ``provider``.

    Args:
        base_url: ``https://host:port`` (``http`` for a loopback test KBS only).
        provider: the evidence provider of this machine.
        verify: an ``ssl.SSLContext``, a CA bundle path, or True for the system CAs.
        timeout: seconds per HTTP request.
        transport: an httpx transport (tests only).
    """

    def __init__(
        self,
        base_url: str,
        provider: EvidenceProvider,
        *,
        verify: ssl.SSLContext | str | bool = True,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.provider = provider
        self._verify = verify
        self._timeout = timeout
        self._transport = transport

    def _http(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url,
            verify=self._verify,
            timeout=self._timeout,
            transport=self._transport,
            follow_redirects=False,
        )

    def _send(self, http: httpx.Client, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            response = http.request(method, path, json=body)
        except httpx.TimeoutException:
            raise KeyReleaseError(TeeReason.KBS_UNREACHABLE, f"KBS did not answer {method} {path} in time") from None
        except httpx.HTTPError as exc:
            raise KeyReleaseError(
                TeeReason.KBS_UNREACHABLE, f"KBS unreachable for {method} {path} ({type(exc).__name__})"
            ) from None
        if len(response.content) > MAX_RESPONSE:
            raise KeyReleaseError(TeeReason.KBS_PROTOCOL, f"KBS answer to {path} is larger than 1 MiB")
        return response

    def auth(self) -> KbsSession:
        """Step 1: a new session and its challenge nonce. Raises KeyReleaseError, or EvidenceError
        (before any request) when there is no TEE to attest."""
        if self.provider.tee == TEE_NONE:
            raise EvidenceError(TeeReason.NO_TEE, "no TEE evidence provider: nothing to attest to a KBS")
        http = self._http()
        try:
            body = {"version": PROTOCOL_VERSION, "tee": self.provider.tee, "extra-params": ""}
            response = self._send(http, "POST", "/kbs/v0/auth", body)
            if response.status_code != 200:
                raise KeyReleaseError(TeeReason.KBS_REFUSED, f"KBS refused auth: {_problem(response)}")
            if SESSION_COOKIE not in http.cookies:
                raise KeyReleaseError(TeeReason.KBS_PROTOCOL, f"KBS auth answer sets no {SESSION_COOKIE} cookie")
            try:
                nonce = response.json()["nonce"]
            except (ValueError, KeyError, TypeError):
                raise KeyReleaseError(TeeReason.KBS_PROTOCOL, "KBS challenge has no nonce") from None
            if not isinstance(nonce, str) or not 1 <= len(nonce) <= 1024:
                raise KeyReleaseError(TeeReason.KBS_PROTOCOL, "KBS challenge nonce is not a string")
            return KbsSession(http, nonce)
        except BaseException:
            http.close()
            raise

    def evidence_for(self, session: KbsSession, nonce: str | None = None) -> Evidence:
        """Evidence binding ``nonce`` (the session's by default) and the session's public key."""
        return self.provider.collect(kbs_report_data(session.nonce if nonce is None else nonce, session.public_jwk()))

    def attest(self, session: KbsSession, evidence: Evidence, nonce: str | None = None) -> str:
        """Step 2: send ``evidence`` with ``runtime-data`` (nonce defaults to the session's).
        Returns the attestation token. Raises KeyReleaseError(kbs_refused / kbs_protocol / ...)."""
        body = {
            "runtime-data": runtime_data(session.nonce if nonce is None else nonce, session.public_jwk()),
            "tee-evidence": {"primary_evidence": primary_evidence(evidence), "additional_evidence": "{}"},
        }
        response = self._send(session.http, "POST", "/kbs/v0/attest", body)
        if response.status_code != 200:
            raise KeyReleaseError(TeeReason.KBS_REFUSED, f"KBS refused the evidence: {_problem(response)}")
        try:
            token = response.json()["token"]
        except (ValueError, KeyError, TypeError):
            raise KeyReleaseError(TeeReason.KBS_PROTOCOL, "KBS attest answer has no token") from None
        if not isinstance(token, str):
            raise KeyReleaseError(TeeReason.KBS_PROTOCOL, "KBS attestation token is not a string")
        session.token = token
        return token

    def resource(self, session: KbsSession, resource: str) -> bytes:
        """Step 3: the resource, decrypted from its JWE with the session key. Raises KeyReleaseError."""
        check_resource_path(resource)
        response = self._send(session.http, "GET", f"/kbs/v0/resource/{resource}")
        if response.status_code == 401:
            raise KeyReleaseError(TeeReason.KBS_REFUSED, f"KBS refused the session: {_problem(response)}")
        if response.status_code == 403:
            raise KeyReleaseError(TeeReason.POLICY_DENIED, f"KBS policy denies {resource}: {_problem(response)}")
        if response.status_code == 404:
            raise KeyReleaseError(TeeReason.RESOURCE_NOT_FOUND, f"KBS has no resource {resource}")
        if response.status_code != 200:
            raise KeyReleaseError(TeeReason.KBS_PROTOCOL, f"KBS answered {_problem(response)} for {resource}")
        return decrypt_resource(response.content, session.key)

    def get_resource(self, resource: str) -> ReleasedResource:
        """The whole RCAR flow for one resource. Raises KeyReleaseError or EvidenceError."""
        check_resource_path(resource)
        session = self.auth()
        try:
            evidence = self.evidence_for(session)
            self.attest(session, evidence)
            value = self.resource(session, resource)
        finally:
            session.close()
        from trust.sm3 import sm3_hex

        return ReleasedResource(
            resource=resource,
            value=value,
            kbs_url=self.base_url,
            tee=evidence.tee,
            recorded=evidence.recorded,
            evidence_sm3=sm3_hex(evidence.raw),
        )


def decrypt_resource(body: bytes, key: ECKey) -> bytes:
    """Decrypt a KBS resource response (JWE flattened JSON) with ``key``.

    Raises KeyReleaseError(malformed_jwe) for anything that is not a JWE joserfc can decrypt with
    the allowed algorithms (ECDH-ES+A256KW, A256GCM).
    """
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise KeyReleaseError(TeeReason.MALFORMED_JWE, "KBS resource response is not JSON") from None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in ("protected", "ciphertext", "iv")):
        raise KeyReleaseError(TeeReason.MALFORMED_JWE, "KBS resource response is not a flattened JWE")
    try:
        result = jwe.decrypt_json(doc, key, algorithms=JWE_ALGORITHMS)  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        raise KeyReleaseError(
            TeeReason.MALFORMED_JWE, f"KBS resource JWE does not decrypt ({type(exc).__name__})"
        ) from None
    if result.plaintext is None:
        raise KeyReleaseError(TeeReason.MALFORMED_JWE, "KBS resource JWE has no plaintext")
    return bytes(result.plaintext)
