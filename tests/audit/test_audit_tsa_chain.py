"""RFC 3161 replies of a real ``openssl ts -reply`` TSA whose SignedData carries the TSA's
chain (root -> intermediate -> TSA), and replies whose chain leads to no configured anchor."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from asn1crypto import tsp
from audit_helpers import Backend, rpc_record_factory
from local_tsa import LocalTsa, make_tsa_pki
from prometheus_client import REGISTRY
from rsyslog_collector import RSYSLOGD, Rsyslog

from audit.anchors import load_anchors
from audit.config import SyslogSettings, TsaSettings
from audit.log import AuditLog
from audit.records import EventType, parse_body
from audit.stores.sqlite import SqliteStore
from audit.timestamping import TimestampError, fetch_timestamp, load_tsa_roots, verify_timestamp
from audit.verify import verify_store
from tests.support.pki import Pki, make_pki

PAYLOAD = b"checkpoint payload"


@pytest.fixture
def chain_tsa(tmp_path: Path) -> Iterator[LocalTsa]:
    t = LocalTsa(tmp_path / "tsa", chain=True)
    yield t
    t.close()


def _carried_subjects(token: bytes) -> set[str]:
    signed = tsp.TimeStampResp.load(token)["time_stamp_token"]["content"]
    return {c.chosen.subject.native["common_name"] for c in signed["certificates"]}


def _point_chain_elsewhere(tsa: LocalTsa, tmp_path: Path) -> None:
    """The TSA now sends an intermediate and root of another PKI beside its own certificate."""
    make_tsa_pki(tmp_path / "elsewhere", "another TSA", chain=True)
    assert tsa.chain is not None
    tsa.chain.write_bytes((tmp_path / "elsewhere" / "chain.pem").read_bytes())


def test_a_reply_carrying_the_tsa_chain_is_accepted_and_verifies_to_the_root(chain_tsa: LocalTsa) -> None:
    token = fetch_timestamp(TsaSettings(url=chain_tsa.url, trust_file=chain_tsa.ca), PAYLOAD)
    assert _carried_subjects(token) == {
        "xinserve test TSA",
        "xinserve test TSA intermediate",
        "xinserve test TSA root",
    }
    gen_ms = verify_timestamp(token, PAYLOAD, load_tsa_roots(chain_tsa.ca.read_bytes()))
    assert gen_ms > 0
    with pytest.raises(TimestampError, match="does not verify"):
        verify_timestamp(token, PAYLOAD + b"!", load_tsa_roots(chain_tsa.ca.read_bytes()))


def test_a_chained_reply_does_not_verify_to_another_root(chain_tsa: LocalTsa, tmp_path: Path) -> None:
    token = fetch_timestamp(TsaSettings(url=chain_tsa.url), PAYLOAD)
    foreign = load_tsa_roots(make_tsa_pki(tmp_path / "other", "some other TSA", chain=True)[0].read_bytes())
    with pytest.raises(TimestampError, match="certificate path: self-signed certificate in certificate chain"):
        verify_timestamp(token, PAYLOAD, foreign)


def test_a_reply_whose_chain_leads_to_no_anchor_is_refused_with_the_reason(chain_tsa: LocalTsa, tmp_path: Path) -> None:
    _point_chain_elsewhere(chain_tsa, tmp_path)
    with pytest.raises(TimestampError, match="certificate path: unable to get local issuer certificate") as refused:
        fetch_timestamp(TsaSettings(url=chain_tsa.url, trust_file=chain_tsa.ca), PAYLOAD)
    assert str(tmp_path) not in str(refused.value)
    token = fetch_timestamp(TsaSettings(url=chain_tsa.url), PAYLOAD)
    assert "another TSA intermediate" in _carried_subjects(token)
    with pytest.raises(TimestampError, match="does not verify"):
        verify_timestamp(token, PAYLOAD, load_tsa_roots(chain_tsa.ca.read_bytes()))


def test_the_ess_cert_id_v2_of_a_chained_reply_names_the_signer(chain_tsa: LocalTsa) -> None:
    token = fetch_timestamp(TsaSettings(url=chain_tsa.url), PAYLOAD)
    signer = tsp.TimeStampResp.load(token)["time_stamp_token"]["content"]["signer_infos"][0]
    attrs = {a["type"].native: a["values"][0] for a in signer["signed_attrs"]}
    ids = attrs["signing_certificate_v2"]["certs"]
    leaf = chain_tsa.cert.read_bytes()
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    der = x509.load_pem_x509_certificate(leaf).public_bytes(Encoding.DER)
    assert len(ids) == 3 and ids[0]["cert_hash"].native == hashlib.sha256(der).digest()


needs_rsyslog = pytest.mark.skipif(RSYSLOGD is None, reason="rsyslogd is not installed (scripts/bootstrap installs it)")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def collector(tmp_path: Path, pki: Pki) -> Iterator[Rsyslog]:
    rs = Rsyslog(tmp_path / "rsyslog", pki=pki)
    rs.start()
    yield rs
    rs.stop()


def _syslog(rs: Rsyslog, pki: Pki) -> SyslogSettings:
    return SyslogSettings(
        host="127.0.0.1", port=rs.port, tls=True, ca_file=pki.ca_cert, retry_interval_s=0.1, flush_timeout_s=120
    )


def _failures() -> float:
    return REGISTRY.get_sample_value("xinserve_audit_timestamp_failures_total") or 0.0


@needs_rsyslog
async def test_checkpoints_of_a_chained_tsa_are_timestamped_and_verify(
    sqlite_backend: Backend, key, collector: Rsyslog, pki: Pki, chain_tsa: LocalTsa
) -> None:
    tsa = TsaSettings(url=chain_tsa.url, trust_file=chain_tsa.ca)
    log = await AuditLog.open(sqlite_backend.settings(syslog=_syslog(collector, pki), tsa=tsa), key, start_ticker=False)
    await log.append(rpc_record_factory()(0))
    await log.checkpoint()
    await log.close()
    detail = log.health_detail()
    assert detail["timestamp_failures"] == 0 and detail["timestamp_last_error"] is None
    collector.wait_for(lambda ls: sum('"tst"' in x for x in ls) >= 3)
    anchors = load_anchors([collector.stream])
    assert len(anchors.timestamps) == len(anchors.checkpoints) == 3
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        report = verify_store(
            store, [key.public_key()], anchors=anchors, tsa_roots=load_tsa_roots(chain_tsa.ca.read_bytes())
        )
    assert report.ok


def _timestamp_failures_recorded(path: Path, last_seq: int) -> list[dict[str, object]]:
    with SqliteStore(path, readonly=True) as store:
        events = [parse_body(r.body) for r in store.records("node-a", 1, last_seq)]
    return [
        e["detail"]
        for e in events
        if e["event"] == EventType.AUDIT_ANCHOR_SHIPPING and e["detail"]["state"] == "timestamp_failed"
    ]


async def _wait_until(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


@needs_rsyslog
async def test_a_refused_reply_is_logged_counted_recorded_and_shown_in_health(
    sqlite_backend: Backend, key, collector: Rsyslog, pki: Pki, chain_tsa: LocalTsa, tmp_path: Path, capsys
) -> None:
    _point_chain_elsewhere(chain_tsa, tmp_path)
    before = _failures()
    tsa = TsaSettings(url=chain_tsa.url, trust_file=chain_tsa.ca)
    log = await AuditLog.open(sqlite_backend.settings(syslog=_syslog(collector, pki), tsa=tsa), key, start_ticker=False)
    await log.append(rpc_record_factory()(0))
    await _wait_until(lambda: bool(_timestamp_failures_recorded(sqlite_backend.path, log.last_seq)))
    detail = log.health_detail()
    await log.close()
    reason = "the time-stamp token does not verify (certificate path: unable to get local issuer certificate)"
    assert detail["timestamp_failures"] >= 1 and _failures() - before >= 1
    assert detail["timestamp_last_error"] == reason
    assert _timestamp_failures_recorded(sqlite_backend.path, log.last_seq)[0]["error"] == reason
    captured = capsys.readouterr()
    assert "audit_timestamp_failed" in captured.out + captured.err
