"""Open-time recovery of ``AuditLog``: check the end of the chain, seal a crashed tail.

Checks (docs/audit.md, *Crashes and torn records*): the tables are as created, the last
checkpoint's form and signature, that the last signed record re-chains to the signed head, and
that an unsigned tail chains from it; the chain is then sealed by an ``open`` or ``recovery``
checkpoint.
"""

from __future__ import annotations

from typing import Any

import structlog

from audit.chain import GENESIS, Checkpoint, CheckpointKind, chain_hash
from audit.errors import AuditEncodingError, AuditError
from audit.stores import Store
from audit.writer import LogCore, RecoveryInfo

log = structlog.get_logger("xinserve.audit")


class AuditIntegrityError(AuditError):
    """At open, the last checkpoint or the unsigned tail does not verify: the log was altered."""


class ChainRecovery(LogCore):
    """``AuditLog``'s open-time checks."""

    def _open_sync(self) -> None:
        store = self._store_factory()
        try:
            if store.schema_exists():
                altered = store.schema_problems()
                if altered:
                    raise AuditIntegrityError(
                        f"the audit store's tables were altered ({'; '.join(altered)}); run `xinserve audit verify`"
                    )
            store.create_schema()
            store.lock_writer(self.chain)
            head = store.head(self.chain)
            try:
                last = store.last_checkpoint(self.chain)
            except AuditEncodingError:
                raise AuditIntegrityError(
                    "the last audit checkpoint is malformed (altered); run `xinserve audit verify`"
                ) from None
        except BaseException:
            store.close()
            raise
        self._store = store
        st = self._state
        prev_n: int | None = None
        tail = 0
        unclean = False
        if last is not None:
            cp = last.checkpoint
            prev_n = cp.n
            verifier = self._verifier
            if verifier is not None and cp.key_id == verifier.key_id:
                from trust.errors import InvalidSignature

                try:
                    verifier.verify(last.signature, last.payload)
                except InvalidSignature:
                    store.close()
                    raise AuditIntegrityError(
                        f"the last audit checkpoint (n={cp.n}) has an invalid signature; run `xinserve audit verify`"
                    ) from None
            elif verifier is not None:
                log.warning("audit_checkpoint_key_rotated", chain=self.chain, old_key_id=cp.key_id)
            st.cp_n, st.cp_digest = cp.n, last.checkpoint.digest()
            st.seq, st.head = cp.tree_size, cp.head
            if head is not None and head[0] < cp.tree_size:
                store.close()
                raise AuditIntegrityError(
                    f"audit records end at {head[0]} but checkpoint n={cp.n} covers {cp.tree_size}; "
                    "run `xinserve audit verify`"
                )
            problem = _signed_record_problem(store, self.chain, cp, self._verifier)
            if problem is not None:
                store.close()
                raise AuditIntegrityError(f"{problem}; run `xinserve audit verify`")
            # Re-chain the unsigned tail (records after the last checkpoint) to verify it.
            if head is not None and head[0] > cp.tree_size:
                h = cp.head
                expect = cp.tree_size + 1
                for seq, body, stored_hash in store.iter_hashes(self.chain, cp.tree_size + 1, None):
                    h = chain_hash(h, body)
                    if seq != expect or h != stored_hash:
                        store.close()
                        raise AuditIntegrityError(
                            f"audit record {expect} after checkpoint n={cp.n} does not chain; "
                            "run `xinserve audit verify`"
                        )
                    expect += 1
                    tail += 1
                st.seq, st.head = head
            unclean = cp.kind is not CheckpointKind.CLOSE or tail > 0
        elif head is not None:
            # Records but no checkpoint at all: only legitimate if the first checkpoint was
            # never written (crash within the first interval). Re-chain from genesis.
            h = GENESIS
            expect = 1
            for seq, body, stored_hash in store.iter_hashes(self.chain, 1, None):
                h = chain_hash(h, body)
                if seq != expect or h != stored_hash:
                    store.close()
                    raise AuditIntegrityError(f"audit record {expect} does not chain; run `xinserve audit verify`")
                expect += 1
                tail += 1
            st.seq, st.head = head
            unclean = True
        kind = CheckpointKind.RECOVERY if unclean else CheckpointKind.OPEN
        extra: dict[str, Any] = {}
        if unclean:
            extra = {"unclean_shutdown": True, "unsigned_tail": tail}
        self.recovery = RecoveryInfo(unclean, prev_n, tail, st.seq)
        cp_signed = self._make_checkpoint(kind, extra)
        try:
            store.write([], [cp_signed])
        except BaseException:
            self._state.cp_n -= 1
            store.close()
            self._store = None
            raise
        self._after_checkpoint(cp_signed)


def _signed_record_problem(store: Store, chain: str, cp: Checkpoint, verifier: Any = None) -> str | None:
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


def _purge_anchor(store: Store, chain: str, through: int, verifier: Any = None) -> bytes | None:
    """``anchor_hash`` of a purge checkpoint that removed records through ``through``, if any.

    With ``verifier``, a purge checkpoint signed with its key must carry a valid signature.
    """
    from trust.errors import InvalidSignature

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
