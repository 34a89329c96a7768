"""The server's TEE hook without an engine: every key refusal fails closed and is audited; a
released key decrypts to tmpfs and is removed at stop; a failing provider refuses the start."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import pytest_asyncio

from audit import AuditLog, AuditSettings, ContentCapture, EventType, QueryFilter, decode_record
from service.core.audit_trail import AuditTrail
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.runtime.tee_hook import TeeHook, TeeStartupError
from service.settings.config import load_settings
from tests.tee.conftest import FIXTURES
from tests.tee.kbs_server import KbsServer
from trust.sm2 import Sm2PrivateKey
from trust.tee.model_encryption import encrypt_model
from trust.tee.private_dir import filesystem_type

KEY = bytes(range(16))
RESOURCE = "xinserve/model-key/m"


@pytest.fixture
def encrypted(tmp_path: Path) -> Path:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text('{"model_type": "llama"}')
    (plain / "weights.bin").write_bytes(b"\x01" * 3000)
    encrypt_model(plain, tmp_path / "enc", KEY, RESOURCE)
    return tmp_path / "enc"


@pytest_asyncio.fixture
async def runtime_factory(tmp_path: Path):
    logs = []

    async def make(tee: dict) -> Runtime:
        settings = load_settings(overrides={"data_dir": str(tmp_path / "data"), "metrics_listen": None, "tee": tee})
        key = Sm2PrivateKey.generate()
        audit_log = await AuditLog.open(
            AuditSettings(path=tmp_path / f"audit{len(logs)}.db", node_id="hook", retention_enabled=False),
            signer=key,
            start_ticker=False,
        )
        logs.append(audit_log)
        runtime = Runtime(settings)
        runtime.audit = AuditTrail(audit_log, ContentCapture(), key.public_key())
        runtime.tee = await TeeHook.start(settings.tee, runtime)
        return runtime

    yield make
    for audit_log in logs:
        await audit_log.close()


def _recorded(**extra) -> dict:
    return {
        "provider": "recorded",
        "recorded_evidence_file": str(FIXTURES / "tdx_quote_4.dat"),
        "allow_recorded": True,
        **extra,
    }


async def _records(runtime: Runtime, event: EventType) -> list:
    assert runtime.audit is not None
    rows = await runtime.audit.log.query(QueryFilter(event=event.value))
    return [decode_record(r.body)[2] for r in rows]


async def _prepare(runtime: Runtime, path: Path) -> tuple[bool, ModelEntry]:
    entry = ModelEntry("m", "generate", path, manifest_digest="sm3:" + "cd" * 32)
    runtime.add_model(entry)
    assert runtime.tee is not None
    return await runtime.tee.prepare_model(runtime, entry), entry


async def test_released_key_decrypts_to_tmpfs_and_is_removed(runtime_factory, kbs: KbsServer, encrypted) -> None:
    if filesystem_type(Path("/dev/shm")) not in ("tmpfs", "ramfs"):
        pytest.skip("/dev/shm is not tmpfs here")
    kbs.state.resources[RESOURCE] = KEY
    runtime = await runtime_factory(_recorded(kbs_url=kbs.url))
    ok, entry = await _prepare(runtime, encrypted)
    assert ok and entry.load_path is not None
    assert (entry.load_path / "weights.bin").read_bytes() == b"\x01" * 3000
    assert runtime.tee is not None and runtime.tee.keys_from_kbs
    (released,) = await _records(runtime, EventType.KEY_RELEASED)
    assert released.detail["resource"] == RESOURCE and released.detail["kbs"] == kbs.url
    purposes = [r.detail["purpose"] for r in await _records(runtime, EventType.ATTESTATION_COLLECTED)]
    assert purposes == ["startup", "key_release"]
    runtime.tee.close()
    assert not entry.load_path.exists()


async def test_plaintext_model_is_left_alone(runtime_factory, tmp_path: Path) -> None:
    runtime = await runtime_factory({})
    (tmp_path / "plain2").mkdir()
    ok, entry = await _prepare(runtime, tmp_path / "plain2")
    assert ok and entry.load_path is None
    assert await _records(runtime, EventType.ATTESTATION_COLLECTED) == []  # provider none: no startup evidence


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("case", "reason", "outcome"),
    [
        ("policy", "policy_denied", "PERMISSION_DENIED"),
        ("unreachable", "kbs_unreachable", "UNAVAILABLE"),
        ("no_kbs", "kbs_unreachable", "UNAVAILABLE"),
        ("no_tee", "no_tee", "PERMISSION_DENIED"),
        ("jwe", "malformed_jwe", "PERMISSION_DENIED"),
        ("missing", "resource_not_found", "PERMISSION_DENIED"),
    ],
)
async def test_every_refusal_fails_closed_and_is_audited(
    runtime_factory, kbs: KbsServer, encrypted, case: str, reason: str, outcome: str
) -> None:
    kbs.state.resources[RESOURCE] = KEY
    tee = _recorded(kbs_url=kbs.url)
    if case == "policy":
        kbs.state.resource_policy = lambda claims, resource: False
    elif case == "unreachable":
        tee["kbs_url"] = f"http://127.0.0.1:{_closed_port()}"
        tee["kbs_timeout_seconds"] = 5
    elif case == "no_kbs":
        del tee["kbs_url"]
    elif case == "no_tee":
        tee = {"kbs_url": kbs.url}
    elif case == "jwe":
        kbs.state.malformed_jwe = True
    else:
        del kbs.state.resources[RESOURCE]
    runtime = await runtime_factory(tee)
    ok, entry = await _prepare(runtime, encrypted)
    assert not ok
    assert entry.state is ModelState.FAILED and entry.reason_code == "key_refused"
    assert reason in entry.state_reason and "http" not in entry.state_reason
    assert entry.load_path is None
    (refused,) = await _records(runtime, EventType.KEY_REFUSED)
    assert (refused.outcome, refused.model, refused.detail["reason"], refused.detail["resource"]) == (
        outcome,
        "m",
        reason,
        RESOURCE,
    )
    assert await _records(runtime, EventType.KEY_RELEASED) == []


async def test_wrong_key_is_decryption_failed(runtime_factory, kbs: KbsServer, encrypted) -> None:
    kbs.state.resources[RESOURCE] = bytes(16)
    runtime = await runtime_factory(_recorded(kbs_url=kbs.url))
    ok, entry = await _prepare(runtime, encrypted)
    assert not ok and entry.reason_code == "decryption_failed" and entry.state is ModelState.FAILED


async def test_provider_failing_at_start_refuses_start(runtime_factory, tmp_path: Path) -> None:
    with pytest.raises(TeeStartupError, match="provider_missing"):
        await runtime_factory({"provider": "configfs-tsm", "configfs_root": str(tmp_path / "no-configfs")})
