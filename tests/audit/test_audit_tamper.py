"""The tamper matrix, on both stores: every alteration is caught and the first broken record named."""

from __future__ import annotations

import json

import pytest
from audit_helpers import Backend, FakeClock, rpc_record_factory

from audit.chain import GENESIS, Checkpoint, SignedCheckpoint, chain_hash
from audit.errors import AuditRangeError, UnknownChainError
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


# ---------------------------------------------------------------- ranges and chains


@pytest.mark.parametrize(
    "kw", [{"start": 0}, {"start": -5}, {"end": 0}, {"end": -1}, {"start": 10, "end": 5}, {"start": 2**53}]
)
async def test_bad_range_is_a_usage_error(backend: Backend, key, clock, built, kw) -> None:
    with pytest.raises(AuditRangeError):
        verify(backend, key, clock, **kw)


async def test_range_beyond_the_end_is_a_usage_error_not_tampering(backend: Backend, key, clock, built) -> None:
    for start in (26, 100_000):
        with pytest.raises(AuditRangeError, match="its last record is 25"):
            verify(backend, key, clock, start=start)
    report = verify(backend, key, clock, start=25, end=100_000)
    assert report.ok and report.records_checked == 1, report.to_json()
    # The server's path raises the same error (it answers INVALID_ARGUMENT, records no false result).
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    with pytest.raises(AuditRangeError, match="its last record is 25"):
        await log.verify(start=100_000)
    await log.close()


async def test_range_beyond_a_truncated_end_is_truncation(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_records WHERE seq > 20")
    report = verify(backend, key, clock, start=23)  # the closing checkpoint covers 25
    assert "truncated" in kinds(report) and report.chains[0].first_broken == 21
    with pytest.raises(AuditRangeError, match="its last record is 20"):
        verify(backend, key, clock, start=30)  # nothing signed reaches 30
    backend.sql("DELETE FROM audit_records")
    report = verify(backend, key, clock, start=5)
    assert "truncated" in kinds(report) and report.chains[0].first_broken == 1
    with pytest.raises(AuditRangeError, match="holds no records"):
        verify(backend, key, clock, start=26)


async def test_range_over_several_chains(backend: Backend, key, clock, built) -> None:
    log = await AuditLog.open(backend.settings(node_id="node-b"), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(5):
        await log.append(make(i))
    await log.close()
    report = verify(backend, key, clock, start=10)
    assert report.ok, report.to_json()
    a, b = report.chains
    assert (a.chain, a.first_seq, a.last_seq, a.records_checked) == ("node-a", 10, 25, 16)
    assert (b.chain, b.records_checked, b.out_of_range, b.last_record) == ("node-b", 0, True, 5)
    with pytest.raises(AuditRangeError, match=r"every chain.*node-a: 25, node-b: 5"):
        verify(backend, key, clock, start=26)
    with pytest.raises(AuditRangeError, match="'node-b': its last record is 5"):
        verify(backend, key, clock, chain="node-b", start=10)


async def test_unknown_chain_is_an_error(backend: Backend, key, clock, built) -> None:
    with pytest.raises(UnknownChainError, match=r"'nochain'.*node-a") as exc:
        verify(backend, key, clock, chain="nochain")
    assert isinstance(exc.value, LookupError) and exc.value.known == ["node-a"]
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    with pytest.raises(UnknownChainError):
        await log.verify(chain="nochain")
    await log.close()


async def test_unknown_chain_in_an_empty_store(backend: Backend, key, clock) -> None:
    with open_store(backend.settings()) as store:
        store.create_schema()
        with pytest.raises(UnknownChainError, match="the store holds no chain"):
            verify_store(store, [key.public_key()], chain="node-a")


# ---------------------------------------------------------------- every problem, not just the first


def _edit_request_id(backend: Backend, seq: int) -> None:
    obj = body_of(backend, seq)
    obj["request_id"] = f"forged-{seq}"  # not an indexed column: only the chain shows it
    backend.sql("UPDATE audit_records SET body = ? WHERE seq = ?", (canonical_json(obj), seq))


async def test_every_altered_record_is_reported(backend: Backend, key, clock, built) -> None:
    for seq in (5, 12, 20):  # 20 is signed by checkpoint 3
        _edit_request_id(backend, seq)
    report = verify(backend, key, clock)
    chain = report.chains[0]
    assert [(p.kind, p.seq) for p in chain.problems] == [("record_altered", s) for s in (5, 12, 20)]
    assert chain.first_broken == 5 and chain.records_checked == 25 and chain.last_seq == 25


async def test_an_altered_stored_hash_names_the_record_and_its_successor(backend: Backend, key, clock, built) -> None:
    backend.sql("UPDATE audit_records SET hash = ? WHERE seq = 7", (bytes(32),))
    backend.sql("UPDATE audit_records SET hash = ? WHERE seq = 10", (bytes(32),))  # signed by checkpoint 2
    report = verify(backend, key, clock)
    assert [(p.kind, p.seq) for p in report.chains[0].problems] == [
        ("record_altered", 7),
        ("record_altered", 8),
        ("record_altered", 10),  # re-synced to the signed head: record 11 chains again
    ]


async def test_every_gap_is_reported(backend: Backend, key, clock, built) -> None:
    backend.sql("DELETE FROM audit_records WHERE seq = 8 OR seq = 15 OR seq = 16")
    _edit_request_id(backend, 22)
    report = verify(backend, key, clock)
    chain = report.chains[0]
    assert [(p.kind, p.seq) for p in chain.problems] == [
        ("record_missing", 8),
        ("record_missing", 15),
        ("record_altered", 22),
    ]
    assert "records 15..16 are missing" in chain.problems[1].message
    assert chain.first_broken == 8 and chain.records_checked == 22


async def test_rechained_forgery_is_reported_once_and_later_breaks_still_show(
    backend: Backend, key, clock, built
) -> None:
    rows = backend.sql("SELECT seq, body FROM audit_records WHERE chain = ? AND seq <= 12 ORDER BY seq", (CHAIN,))
    h = GENESIS
    for seq, body in rows:  # re-chain 3..12 after editing 3; 13 no longer chains
        obj = json.loads(bytes(body))
        if seq == 3:
            obj["request_id"] = "scapegoat"
        new = canonical_json(obj)
        h = chain_hash(h, new)
        backend.sql("UPDATE audit_records SET body = ?, hash = ? WHERE seq = ?", (new, h, seq))
    _edit_request_id(backend, 18)
    report = verify(backend, key, clock)
    assert [(p.kind, p.seq) for p in report.chains[0].problems] == [
        ("rechained", 1),  # the head at 10 is not the signed one
        ("record_altered", 13),
        ("record_altered", 18),
    ]


async def test_problems_are_capped(backend: Backend, key, clock, built, monkeypatch) -> None:
    import audit.verify.records

    monkeypatch.setattr(audit.verify.records, "MAX_RECORD_PROBLEMS", 2)
    for seq in (5, 12, 18, 21):
        _edit_request_id(backend, seq)
    report = verify(backend, key, clock)
    chain = report.chains[0]
    assert [(p.kind, p.seq) for p in chain.problems] == [
        ("record_altered", 5),
        ("record_altered", 12),
        ("more_problems", None),
    ]
    assert "2 more broken records from record 18 on" in chain.problems[2].message
    assert chain.first_broken == 5 and chain.records_checked == 25


async def test_an_anchor_of_a_deleted_chain_is_missing(backend: Backend, key, clock, built) -> None:
    # Before the fix, deleting a whole chain (records and checkpoints) made its anchor vanish
    # from the report: verify said OK for the chains that were left, or "nothing found".
    anchor = built[-1]
    other = await AuditLog.open(backend.settings(node_id="node-b"), key, clock=clock, start_ticker=False)
    await other.append(rpc_record_factory(clock)(0))
    await other.close()
    backend.sql("DELETE FROM audit_records WHERE chain = 'node-a'")
    backend.sql("DELETE FROM audit_checkpoints WHERE chain = 'node-a'")
    report = verify(backend, key, clock, anchors=[anchor])
    assert not report.ok
    assert [c.chain for c in report.chains] == ["node-a", "node-b"]
    assert [p.kind for p in report.chains[0].problems] == ["anchor_missing"] and report.chains[1].ok
    backend.sql("DELETE FROM audit_records")
    backend.sql("DELETE FROM audit_checkpoints")
    assert "anchor_missing" in kinds(verify(backend, key, clock, anchors=[anchor]))


async def test_a_writer_restarted_long_after_a_crash_verifies(backend: Backend, key, clock) -> None:
    # Before the fix, a recovery written more than 2 intervals + 60 s after the crash was
    # reported as a checkpoint_gap, so a crashed chain restarted late never verified again.
    settings = backend.settings()
    log = await AuditLog.open(settings, key, clock=clock, start_ticker=False)
    for i in range(5):
        await log.append(rpc_record_factory(clock)(i))
    await log.abort()  # crash: no closing checkpoint
    clock.advance(seconds=3600)
    log = await AuditLog.open(settings, key, clock=clock, start_ticker=False)
    await log.close()
    report = verify(backend, key, clock)
    assert report.ok, report.to_json()
    assert any("down for 3600 s" in r for r in report.chains[0].recoveries)
