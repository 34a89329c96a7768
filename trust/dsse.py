"""DSSE envelopes (https://github.com/secure-systems-lab/dsse, protocol v1) signed with SM2.

What is signed is ``PAE(payloadType, payload)``::

    "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

with LEN the decimal byte length. Envelope JSON::

    {"payloadType": "...", "payload": "<base64>",
     "signatures": [{"keyid": "<hex SM3 of SPKI>", "sig": "<base64 DER>"}]}
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trust.errors import InvalidSignature, Reason, VerificationError
from trust.sm2 import Sm2PrivateKey, b64decode_strict, parse_der_signature
from trust.trust_store import TrustedKey, TrustStore

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_ENVELOPE_SIZE = 256 << 20  # a manifest of a few million files still fits
MAX_SIGNATURES = 16


def pae(payload_type: str, payload: bytes) -> bytes:
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign_envelope(payload: bytes, private_key: Sm2PrivateKey, payload_type: str = INTOTO_PAYLOAD_TYPE) -> bytes:
    """A DSSE envelope (UTF-8 JSON bytes) with one SM2 signature over PAE(type, payload)."""
    sig = private_key.sign(pae(payload_type, payload))
    env = {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": private_key.public_key().key_id, "sig": base64.b64encode(sig).decode("ascii")}],
    }
    return (json.dumps(env, indent=2, sort_keys=True) + "\n").encode("utf-8")


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: list[tuple[str, bytes]]  # (keyid, DER signature)


def strict_json(data: bytes, what: str, reason: Reason) -> Any:
    """Parse UTF-8 JSON refusing duplicate keys, NaN/Infinity and a BOM."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise ValueError(f"duplicate key {k!r}")
            out[k] = v
        return out

    def bad_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=pairs, parse_constant=bad_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise VerificationError(reason, f"{what} is not valid JSON ({str(e)[:80]})") from None


def parse_envelope(data: bytes) -> Envelope:
    """Parse an envelope strictly; raises VerificationError(malformed_envelope)."""
    if len(data) > MAX_ENVELOPE_SIZE:
        raise VerificationError(Reason.MALFORMED_ENVELOPE, "envelope is too large")
    env = strict_json(data, "envelope", Reason.MALFORMED_ENVELOPE)
    bad = Reason.MALFORMED_ENVELOPE
    if not isinstance(env, dict) or set(env) != {"payloadType", "payload", "signatures"}:
        raise VerificationError(bad, "envelope must hold exactly payloadType, payload and signatures")
    ptype, payload_b64, sigs = env["payloadType"], env["payload"], env["signatures"]
    if not isinstance(ptype, str) or not isinstance(payload_b64, str):
        raise VerificationError(bad, "payloadType and payload must be strings")
    try:
        payload = b64decode_strict(payload_b64)
    except ValueError:
        raise VerificationError(bad, "payload is not canonical base64") from None
    if not isinstance(sigs, list) or not sigs or len(sigs) > MAX_SIGNATURES:
        raise VerificationError(bad, f"signatures must be a list of 1 to {MAX_SIGNATURES} entries")
    out: list[tuple[str, bytes]] = []
    for s in sigs:
        if not isinstance(s, dict) or set(s) - {"keyid", "sig"} or not isinstance(s.get("sig"), str):
            raise VerificationError(bad, "each signature must be {keyid, sig}")
        keyid = s.get("keyid", "")
        if not isinstance(keyid, str):
            raise VerificationError(bad, "keyid must be a string")
        try:
            out.append((keyid, b64decode_strict(s["sig"])))
        except ValueError:
            raise VerificationError(bad, "signature is not canonical base64") from None
    return Envelope(ptype, payload, out)


# When no signature is accepted, the most telling failure is reported.
_PRIORITY = [
    Reason.REVOKED_KEY,
    Reason.KEY_EXPIRED,
    Reason.KEY_NOT_YET_VALID,
    Reason.BAD_SIGNATURE,
    Reason.MALFORMED_SIGNATURE,
    Reason.UNTRUSTED_KEY,
]


def verify_envelope(
    envelope: Envelope,
    trust_store: TrustStore,
    payload_type: str = INTOTO_PAYLOAD_TYPE,
    now: datetime | None = None,
) -> TrustedKey:
    """The trusted key whose signature verifies; otherwise VerificationError with the best reason.

    The keyid is only a hint: a signature counts only if it verifies under the trusted key of that
    id. One valid signature by a trusted, unrevoked, in-window key suffices (DSSE semantics).
    """
    if envelope.payload_type != payload_type:
        raise VerificationError(
            Reason.WRONG_PAYLOAD_TYPE,
            f"payloadType is {envelope.payload_type[:64]!r}, expected {payload_type!r}",
        )
    message = pae(envelope.payload_type, envelope.payload)
    failures: list[VerificationError] = []
    for keyid, sig in envelope.signatures:
        try:
            parse_der_signature(sig)
        except InvalidSignature as e:
            failures.append(VerificationError(Reason.MALFORMED_SIGNATURE, str(e)))
            continue
        if not keyid:  # DSSE makes keyid optional: find the trusted key it verifies under, if any
            found = _match_without_keyid(trust_store, sig, message, now)
            if isinstance(found, TrustedKey):
                return found
            failures.append(found)
            continue
        try:
            tk = trust_store.check(keyid, now)
        except VerificationError as e:
            failures.append(e)
            continue
        try:
            tk.public_key.verify(sig, message)
        except Exception:  # InvalidSignature, or anything at all: fail closed
            failures.append(VerificationError(Reason.BAD_SIGNATURE, f"signature does not verify under key {tk.name}"))
            continue
        return tk
    failures.sort(key=lambda e: _PRIORITY.index(e.reason) if e.reason in _PRIORITY else len(_PRIORITY))
    raise failures[0]


def _match_without_keyid(
    trust_store: TrustStore, sig: bytes, message: bytes, now: datetime | None
) -> TrustedKey | VerificationError:
    """The key (trusted, unrevoked, in window) a keyid-less signature verifies under, or why not."""
    for key_id, tk in trust_store.keys.items():
        try:
            tk.public_key.verify(sig, message)
        except Exception:  # noqa: S112 - not this key (or a library failure): fail closed, try the next
            continue
        try:
            return trust_store.check(key_id, now)  # verifies, but may be revoked or out of window
        except VerificationError as e:
            return e
    return VerificationError(Reason.UNTRUSTED_KEY, "no trusted key verifies the keyid-less signature")
