"""The tamper matrix, on both stores: every alteration is caught and the first broken record named."""

from __future__ import annotations

import json

import pytest
from audit_helpers import Backend, FakeClock, rpc_record_factory

from audit.chain import GENESIS, Checkpoint, SignedCheckpoint, chain_hash
from audit.log import AuditIntegrityError, AuditLog
from audit.records import canonical_json
from audit.stores import open_store
from audit.verify import VerifyReport, verify_store

CHAIN = "node-a"


async def build_log(backend: Backend, key, clock: FakeClock) -> list[SignedCheckpoint]:
    """25 records: checkpoints at 0 (open), 10, 20 and a closing one at 25."""
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(25):
        await log.append(make(i, outcome="OK" if i % 4 else "INVALID_ARGUMENT"))
        clock.advance(seconds=1)
        if i in (9, 19):
            await log.checkpoint()
    await log.close()
    with open_store(backend.settings()) as store:
        return store.checkpoints(CHAIN)


def verify(backend: Backend, key, clock: FakeClock, **kw) -> VerifyReport:
    with open_store(backend.settings()) as store:
        return verify_store(store, [key.public_key()], now_ms=clock(), **kw)


def body_of(backend: Backend, seq: int) -> dict:
    (row,) = backend.sql("SELECT body FROM audit_records WHERE chain = ? AND seq = ?", (CHAIN, seq))
    return json.loads(bytes(row[0]))


def kinds(report: VerifyReport) -> set[str]:
    return {p.kind for c in report.chains for p in c.problems}


@pytest.fixture
async def built(backend: Backend, key, clock: FakeClock):
    cps = await build_log(backend, key, clock)
    clock.advance(seconds=30)
    report = verify(backend, key, clock)
    assert report.ok, report.to_json()
    assert report.records_checked == 25
    return cps


async def test_modified_field(backend: Backend, key, clock, built) -> None:
    obj = body_of(backend, 7)
    obj["outcome"] = "OK" if obj["outcome"] != "OK" else "PERMISSION_DENIED"
    backend.sql("UPDATE audit_records SET body = ? WHERE seq = 7", (canonical_json(obj),))
    report = verify(backend, key, clock)
    assert not report.ok
    assert report.chains[0].first_broken == 7
    assert "record_altered" in kinds(report)


async def test_modified_indexed_column_only(backend: Backend, key, clock, built) -> None:
    backend.sql("UPDATE audit_records SET principal = 'someone-else' WHERE seq = 8")
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 8
    assert "record_altered" in kinds(report)


async def test_deleted_record(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_records WHERE seq = 12")
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 12
    assert "record_missing" in kinds(report)


async def test_deleted_first_records_without_purge(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_records WHERE seq <= 5")
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 1
    assert "record_missing" in kinds(report)


async def test_inserted_forged_record(backend: Backend, key, clock, built) -> None:
    # Make room at 12 and insert a forged record that chains correctly from record 11.
    backend.sql("UPDATE audit_records SET seq = seq + 1000000 WHERE seq >= 12")
    backend.sql("UPDATE audit_records SET seq = seq - 999999 WHERE seq >= 1000000")
    forged = body_of(backend, 11)
    forged.update(seq=12, principal="ghost", request_id="forged")
    body = canonical_json(forged)
    (h11,) = backend.sql("SELECT hash FROM audit_records WHERE seq = 11")
    backend.sql(
        "INSERT INTO audit_records (chain, seq, time_ms, event, principal, method, outcome, body, hash)"
        " VALUES (?, 12, ?, 'rpc', 'ghost', ?, 'OK', ?, ?)",
        (CHAIN, forged["time_ms"], forged["method"], body, chain_hash(bytes(h11[0]), body)),
    )
    report = verify(backend, key, clock)
    assert not report.ok
    assert report.chains[0].first_broken in (12, 13)


async def test_forged_record_appended_after_close(backend: Backend, key, clock, built) -> None:
    forged = body_of(backend, 25)
    forged.update(seq=26, request_id="forged")
    body = canonical_json(forged)
    (h25,) = backend.sql("SELECT hash FROM audit_records WHERE seq = 25")
    backend.sql(
        "INSERT INTO audit_records (chain, seq, time_ms, event, principal, method, outcome, body, hash)"
        " VALUES (?, 26, ?, 'rpc', ?, ?, ?, ?, ?)",
        (
            CHAIN,
            forged["time_ms"],
            forged["principal"],
            forged["method"],
            forged["outcome"],
            body,
            chain_hash(bytes(h25[0]), body),
        ),
    )
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 26
    assert "records_after_close" in kinds(report)


async def test_reordered_records(backend: Backend, key, clock, built) -> None:
    backend.sql("UPDATE audit_records SET seq = -1 WHERE seq = 5")
    backend.sql("UPDATE audit_records SET seq = 5 WHERE seq = 6")
    backend.sql("UPDATE audit_records SET seq = 6 WHERE seq = -1")
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 5
    assert "record_altered" in kinds(report)


async def test_truncated_tail_covered_by_checkpoint(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_records WHERE seq > 20")
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 21
    assert "truncated" in kinds(report)


async def test_truncated_tail_with_its_checkpoints(backend: Backend, key, clock, built) -> None:
    anchor = built[-1]  # the closing checkpoint an auditor exported earlier
    backend.sql("DELETE FROM audit_records WHERE seq > 20")
    backend.sql("DELETE FROM audit_checkpoints WHERE tree_size > 20")
    # Without an anchor the cut shows once the writer has been silent for longer than the
    # checkpoint tolerance (2 intervals + 60 s): a live writer would have checkpointed by then.
    clock.advance(seconds=600)
    report = verify(backend, key, clock)
    assert "stale" in kinds(report), report.to_json()
    assert report.chains[0].first_broken == 21
    report = verify(backend, key, clock, anchors=[anchor])
    assert "anchor_missing" in kinds(report)


async def test_wholesale_rechained_forgery_without_key(backend: Backend, key, other_key, clock, built) -> None:
    rows = backend.sql("SELECT seq, body FROM audit_records WHERE chain = ? ORDER BY seq", (CHAIN,))
    h = GENESIS
    for seq, body in rows:
        obj = json.loads(bytes(body))
        if seq == 3:
            obj["principal"] = "scapegoat"
        new = canonical_json(obj)
        h = chain_hash(h, new)
        backend.sql(
            "UPDATE audit_records SET body = ?, hash = ?, principal = ? WHERE seq = ?",
            (new, h, obj.get("principal"), seq),
        )
    report = verify(backend, key, clock)
    assert "rechained" in kinds(report)
    assert report.chains[0].first_broken is not None and report.chains[0].first_broken <= 3

    # Re-signing the checkpoints with another key does not help the forger.
    prev = GENESIS
    for cp in built:
        c = cp.checkpoint
        head = (
            bytes(backend.sql("SELECT hash FROM audit_records WHERE seq = ?", (c.tree_size,))[0][0])
            if c.tree_size
            else GENESIS
        )
        forged = Checkpoint(
            c.chain, c.n, c.kind, c.time_ms, c.tree_size, head, prev, c.interval_s, other_key.public_key().key_id
        )
        signed = SignedCheckpoint.sign(forged, other_key)
        prev = forged.digest()
        backend.sql(
            "UPDATE audit_checkpoints SET payload = ?, signature = ? WHERE n = ?",
            (signed.payload, signed.signature, c.n),
        )
    report = verify(backend, key, clock)
    assert "checkpoint_untrusted_key" in kinds(report)
    assert not report.ok


async def test_deleted_checkpoint(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_checkpoints WHERE n = 2")
    report = verify(backend, key, clock)
    assert "checkpoint_missing" in kinds(report)


async def test_modified_checkpoint(backend: Backend, key, clock, built) -> None:
    (payload,) = backend.sql("SELECT payload FROM audit_checkpoints WHERE n = 3")[0]
    obj = json.loads(bytes(payload))
    obj["tree_size"] = 19
    backend.sql("UPDATE audit_checkpoints SET payload = ? WHERE n = 3", (canonical_json(obj),))
    report = verify(backend, key, clock)
    assert "checkpoint_bad_signature" in kinds(report)


async def test_range_verification(backend: Backend, key, clock, built) -> None:
    report = verify(backend, key, clock, start=11, end=20)
    assert report.ok and report.records_checked == 10
    backend.sql("DELETE FROM audit_records WHERE seq = 15")
    report = verify(backend, key, clock, start=11, end=20)
    assert report.chains[0].first_broken == 15


async def test_garbage_body_rechained_in_unsigned_tail(backend: Backend, key, clock) -> None:
    """Even a non-JSON body with a recomputed hash after the last checkpoint is named."""
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(5):
        await log.append(make(i))
    await log.abort()  # crashed writer: records 1..5 are not yet signed
    (h4,) = backend.sql("SELECT hash FROM audit_records WHERE seq = 4")[0]
    garbage = b"\xff not json"
    backend.sql("UPDATE audit_records SET body = ?, hash = ? WHERE seq = 5", (garbage, chain_hash(bytes(h4), garbage)))
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 5
    assert "record_altered" in kinds(report)


async def test_range_end_deleted(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_records WHERE seq >= 19 AND seq <= 20")
    report = verify(backend, key, clock, start=11, end=20)
    assert report.chains[0].first_broken == 19


def _set_outcome(backend: Backend, seq: int, outcome: str) -> None:
    """Edit a record's outcome in its body (stored as a BLOB) and in the indexed column."""
    obj = body_of(backend, seq)
    assert obj["outcome"] != outcome
    obj["outcome"] = outcome
    backend.sql("UPDATE audit_records SET body = ?, outcome = ? WHERE seq = ?", (canonical_json(obj), outcome, seq))


async def test_open_refuses_an_edited_last_record_after_a_clean_close(backend: Backend, key, clock, built) -> None:
    """The closing checkpoint signs record 25's hash; its stored hash still matches, its body does not."""
    _set_outcome(backend, 25, "OK")
    with pytest.raises(AuditIntegrityError, match="record 25"):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)


async def test_open_refuses_a_log_whose_signed_records_were_all_deleted(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_records")
    with pytest.raises(AuditIntegrityError, match="record 25"):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)


async def test_open_refuses_an_edited_signed_record_before_an_unsigned_tail(backend: Backend, key, clock) -> None:
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(8):
        await log.append(make(i))
        if i == 4:
            await log.checkpoint()  # signs records 1..5
    await log.abort()  # crash: 6..8 unsigned; recovery re-chains them from the signed head
    _set_outcome(backend, 5, "ABORTED")
    with pytest.raises(AuditIntegrityError, match="record 5"):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)


async def test_open_after_purging_everything_signed(backend: Backend, key, clock) -> None:
    """The record a checkpoint signs, or the one before it, may be purged: open uses the purge's anchor."""
    from audit.retention import _retention_sync

    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(5):
        await log.append(make(i))
    await log.close()
    clock.advance(days=200)
    cutoff = clock() - 180 * 86_400_000
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    result = await log.run_in_writer(
        lambda store, lg: _retention_sync(store, lg, 180, cutoff, backend.tmp_path / "archive", None)
    )
    assert result.purged == 5
    await log.abort()  # crash before the retention_run record: the last checkpoint signs purged record 5

    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    assert log.recovery is not None and log.recovery.unclean_shutdown and log.last_seq == 6
    await log.close()  # signs record 6 (the recovery record), whose predecessor is purged
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    assert log.recovery is not None and not log.recovery.unclean_shutdown
    await log.close()
    report = verify(backend, key, clock)
    assert report.ok, report.to_json()

    _set_outcome(backend, 6, "ABORTED")
    with pytest.raises(AuditIntegrityError, match="record 6"):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
