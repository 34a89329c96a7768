"""The hash chain and signed checkpoints.

Record hash: ``h[seq] = SM3(h[seq-1] || body[seq])`` with ``h[0]`` = 32 zero bytes, where
``body`` is the record's canonical encoding (which itself names the chain and ``seq``).

Checkpoint: a canonical-JSON payload ``{"v":1,"type":"xinserve.audit.checkpoint","chain",
"n","kind","time_ms","tree_size","head","prev","interval_s","key_id","extra"}`` signed with
SM2 (GB/T 32918, default signer id) by the server key. ``tree_size`` is the last sequence
number covered, ``head`` the hex ``h[tree_size]``, ``prev`` the hex SM3 of the previous
checkpoint's payload (zeros for ``n == 1``). Checkpoints form their own chain, so deleting
one is detected too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from audit.errors import AuditEncodingError
from audit.records import FORMAT_VERSION, canonical_json, parse_body
from trust.compat import StrEnum
from trust.sm3 import sm3

GENESIS = bytes(32)
CHECKPOINT_TYPE = "xinserve.audit.checkpoint"


def chain_hash(prev: bytes, body: bytes) -> bytes:
    """``SM3(prev || body)``: the chain hash of one record."""
    return sm3(prev + body)


class CheckpointKind(StrEnum):
    OPEN = "open"
    """Written when the log opens on a cleanly closed (or new) chain."""
    RECOVERY = "recovery"
    """Written when the log opens on a chain whose writer did not close (crash)."""
    PERIODIC = "periodic"
    """Written every ``checkpoint_interval_s``, also when nothing was appended."""
    CLOSE = "close"
    """Written by ``close()``: the chain is sealed until the next open."""
    PURGE = "purge"
    """Written by retention in the same transaction that deletes archived records."""


class Signer(Protocol):
    """What the log needs from the server's SM2 private key (``trust.sm2.Sm2PrivateKey``)."""

    def sign(self, data: bytes) -> bytes: ...


class Verifier(Protocol):
    """``trust.sm2.Sm2PublicKey``: ``verify`` raises ``trust.errors.InvalidSignature``."""

    @property
    def key_id(self) -> str: ...

    def verify(self, signature: bytes, data: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class Checkpoint:
    chain: str
    n: int
    kind: CheckpointKind
    time_ms: int
    tree_size: int
    head: bytes
    prev: bytes
    interval_s: int
    key_id: str
    extra: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> bytes:
        return canonical_json(
            {
                "v": FORMAT_VERSION,
                "type": CHECKPOINT_TYPE,
                "chain": self.chain,
                "n": self.n,
                "kind": str(self.kind),
                "time_ms": self.time_ms,
                "tree_size": self.tree_size,
                "head": self.head.hex(),
                "prev": self.prev.hex(),
                "interval_s": self.interval_s,
                "key_id": self.key_id,
                "extra": self.extra,
            }
        )

    def digest(self) -> bytes:
        """SM3 of the payload: what the next checkpoint's ``prev`` must be."""
        return sm3(self.payload())

    @classmethod
    def from_payload(cls, payload: bytes) -> Checkpoint:
        obj = parse_body(payload)
        try:
            if obj["v"] != FORMAT_VERSION or obj["type"] != CHECKPOINT_TYPE:
                raise AuditEncodingError("not a checkpoint payload")
            extra = obj["extra"]
            if not isinstance(extra, dict):
                raise AuditEncodingError("checkpoint extra is not an object")
            cp = cls(
                chain=str(obj["chain"]),
                n=int(obj["n"]),
                kind=CheckpointKind(obj["kind"]),
                time_ms=int(obj["time_ms"]),
                tree_size=int(obj["tree_size"]),
                head=bytes.fromhex(obj["head"]),
                prev=bytes.fromhex(obj["prev"]),
                interval_s=int(obj["interval_s"]),
                key_id=str(obj["key_id"]),
                extra=extra,
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise AuditEncodingError("malformed checkpoint payload") from exc
        if cp.payload() != payload:
            raise AuditEncodingError("checkpoint payload is not in canonical form")
        return cp


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    checkpoint: Checkpoint
    payload: bytes
    signature: bytes

    @classmethod
    def sign(cls, checkpoint: Checkpoint, signer: Signer) -> SignedCheckpoint:
        payload = checkpoint.payload()
        return cls(checkpoint, payload, signer.sign(payload))

    def to_json(self) -> dict[str, Any]:
        """The exportable form (an auditor keeps these as anchors)."""
        return {"payload": self.payload.decode("utf-8"), "signature": self.signature.hex()}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SignedCheckpoint:
        try:
            payload = str(obj["payload"]).encode("utf-8")
            signature = bytes.fromhex(str(obj["signature"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise AuditEncodingError("malformed exported checkpoint") from exc
        return cls(Checkpoint.from_payload(payload), payload, signature)
