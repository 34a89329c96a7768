"""Open-time recovery of a chain: check the end of the chain, find a crashed tail.

Checks (docs/audit.md, *Crashes and torn records*): the tables are as created, the last
checkpoint's form and signature, that the last signed record re-chains to the signed head, and
that an unsigned tail chains from it. :func:`open_chain` returns the chain's position and what
it found (:class:`RecoveryInfo`); the writer then seals the chain with an ``open`` or
``recovery`` checkpoint (:meth:`OpenedChain.seal`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from audit.chain import GENESIS, Checkpoint, CheckpointKind, SignedCheckpoint, Verifier, chain_hash
from audit.errors import AuditEncodingError, AuditError
from audit.stores import Store
from trust.errors import InvalidSignature

log = structlog.get_logger("xinserve.audit")


class AuditIntegrityError(AuditError):
    """At open, the last checkpoint or the unsigned tail does not verify: the log was altered."""


@dataclass(frozen=True, slots=True)
class RecoveryInfo:
    """What :meth:`AuditLog.open` found: a clean previous close, or a crash it recovered from."""

    unclean_shutdown: bool
    previous_checkpoint: int | None
    unsigned_tail: int
    """Records after the previous checkpoint, now covered by the recovery checkpoint."""
    last_seq: int


@dataclass(frozen=True, slots=True)
class OpenedChain:
    """A chain checked at open: its store (writer lock held), where it stands, what was found."""

    store: Store
    position: tuple[int, bytes, int, bytes]
    """``(last seq, its chain hash, last checkpoint n, that checkpoint's digest)``."""
    info: RecoveryInfo

    def seal(self) -> tuple[CheckpointKind, dict[str, Any]]:
        """The kind and extra fields of the checkpoint that seals the chain now: ``open``, or
        ``recovery`` after an unclean shutdown (with ``unsigned_tail``)."""
        if self.info.unclean_shutdown:
            return CheckpointKind.RECOVERY, {"unclean_shutdown": True, "unsigned_tail": self.info.unsigned_tail}
        return CheckpointKind.OPEN, {}


def open_chain(store_factory: Callable[[], Store], chain: str, verifier: Verifier | None) -> OpenedChain:
    """Open the store, create its tables if there are none, take the writer lock of ``chain``
    and check its end (module docstring); the last checkpoint's signature is checked when
    ``verifier`` has its key id. Raises ``AuditIntegrityError`` (the log was altered),
    ``WriterConflict`` and ``AuditStoreError``; the store is closed when it raises."""
    store = store_factory()
    try:
        return _recover(store, chain, verifier)
    except BaseException:
        store.close()
        raise


def _recover(store: Store, chain: str, verifier: Verifier | None) -> OpenedChain:
    if store.schema_exists():
        altered = store.schema_problems()
        if altered:
            raise AuditIntegrityError(
                f"the audit store's tables were altered ({'; '.join(altered)}); run `xinserve audit verify`"
            )
    store.create_schema()
    store.lock_writer(chain)
    head = store.head(chain)
    try:
        last = store.last_checkpoint(chain)
    except AuditEncodingError:
        raise AuditIntegrityError(
            "the last audit checkpoint is malformed (altered); run `xinserve audit verify`"
        ) from None
    if last is not None:
        return _from_checkpoint(store, chain, last, head, verifier)
    if head is not None:
        # Records but no checkpoint at all: only legitimate if the first checkpoint was
        # never written (crash within the first interval). Re-chain from genesis.
        tail = _rechain(store, chain, 0, GENESIS, "")
        return OpenedChain(store, (head[0], head[1], 0, GENESIS), RecoveryInfo(True, None, tail, head[0]))
    return OpenedChain(store, (0, GENESIS, 0, GENESIS), RecoveryInfo(False, None, 0, 0))


def _from_checkpoint(
    store: Store, chain: str, last: SignedCheckpoint, head: tuple[int, bytes] | None, verifier: Verifier | None
) -> OpenedChain:
    cp = last.checkpoint
    if verifier is not None and cp.key_id == verifier.key_id:
        try:
            verifier.verify(last.signature, last.payload)
        except InvalidSignature:
            raise AuditIntegrityError(
                f"the last audit checkpoint (n={cp.n}) has an invalid signature; run `xinserve audit verify`"
            ) from None
    elif verifier is not None:
        log.warning("audit_checkpoint_key_rotated", chain=chain, old_key_id=cp.key_id)
    seq, h = cp.tree_size, cp.head
    if head is not None and head[0] < cp.tree_size:
        raise AuditIntegrityError(
            f"audit records end at {head[0]} but checkpoint n={cp.n} covers {cp.tree_size}; run `xinserve audit verify`"
        )
    problem = _signed_record_problem(store, chain, cp, verifier)
    if problem is not None:
        raise AuditIntegrityError(f"{problem}; run `xinserve audit verify`")
    tail = 0
    # Re-chain the unsigned tail (records after the last checkpoint) to verify it.
    if head is not None and head[0] > cp.tree_size:
        tail = _rechain(store, chain, cp.tree_size, cp.head, f" after checkpoint n={cp.n}")
        seq, h = head
    unclean = cp.kind is not CheckpointKind.CLOSE or tail > 0
    return OpenedChain(store, (seq, h, cp.n, cp.digest()), RecoveryInfo(unclean, cp.n, tail, seq))


def _rechain(store: Store, chain: str, after: int, h: bytes, where: str) -> int:
    """Re-chain the records after ``after`` from its hash ``h``; how many there are.
    ``AuditIntegrityError`` naming the first that does not chain (``where`` it is)."""
    expect = after + 1
    for seq, body, stored_hash in store.iter_hashes(chain, after + 1, None):
        h = chain_hash(h, body)
        if seq != expect or h != stored_hash:
            raise AuditIntegrityError(f"audit record {expect}{where} does not chain; run `xinserve audit verify`")
        expect += 1
    return expect - after - 1


def _signed_record_problem(store: Store, chain: str, cp: Checkpoint, verifier: Verifier | None = None) -> str | None:
    """Why the record at ``cp.tree_size`` does not have the head ``cp`` signs, or ``None``.

    Recomputes ``SM3(h[tree_size-1] || body[tree_size])`` from the record's stored body and its
    predecessor's stored hash (genesis for record 1, the ``anchor_hash`` of the purge that
    removed the predecessor) and compares it, and the record's stored hash, with ``cp.head``.
    A record removed by a purge is accepted when that purge checkpoint's anchor is the signed
    head (and, if signed with ``verifier``'s key, its signature verifies). Only this one record
    is checked: the rest of the log is ``verify``'s job. Reads the store (``AuditStoreError``).
    """
    n = cp.tree_size
    if n <= 0:
        return None
    rows = {seq: (body, h) for seq, body, h in store.iter_hashes(chain, max(1, n - 1), n)}
    if n not in rows:
        anchor = _purge_anchor(store, chain, n, verifier)
        if anchor is None:
            return f"record {n}, signed by checkpoint n={cp.n}, is missing"
        if anchor != cp.head:
            return f"the purge anchor of record {n} does not match checkpoint n={cp.n}"
        return None
    body, stored = rows[n]
    prev = GENESIS if n == 1 else rows[n - 1][1] if n - 1 in rows else _purge_anchor(store, chain, n - 1)
    if prev is None:
        return f"record {n - 1}, before the record checkpoint n={cp.n} signs, is missing"
    if stored != cp.head or chain_hash(prev, body) != cp.head:
        return f"record {n} does not match checkpoint n={cp.n} (its body or hash was altered)"
    return None


def _purge_anchor(store: Store, chain: str, through: int, verifier: Verifier | None = None) -> bytes | None:
    """``anchor_hash`` of a purge checkpoint that removed records through ``through``, if any.

    With ``verifier``, a purge checkpoint signed with its key must carry a valid signature.
    """
    for _, payload, signature in store.raw_checkpoints(chain):
        try:
            cp = Checkpoint.from_payload(payload)
            if cp.kind is not CheckpointKind.PURGE or int(cp.extra["purged_through"]) != through:
                continue
            if verifier is not None and cp.key_id == verifier.key_id:
                verifier.verify(signature, payload)
            return bytes.fromhex(str(cp.extra["anchor_hash"]))
        except (AuditEncodingError, InvalidSignature, KeyError, ValueError, TypeError):
            continue
    return None
