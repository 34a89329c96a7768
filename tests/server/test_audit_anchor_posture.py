"""The production posture of the audit log: ``audit.require_anchor`` refuses a start without an
off-host anchor (``audit.syslog``) unless ``audit.anchor_waiver`` names a reason; the posture is
in the ``start`` record and the audit log's health detail, and a start without an anchor logs a
warning; GetServerInfo reports it. Real ``xinserve serve`` (refusal) and a real in-process
server start (no engine) called over gRPC."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
import structlog.testing

import service.lifecycle.server
from audit import QueryFilter, decode_record
from service.settings.config import ConfigError, load_settings
from tests.conftest import REPO
from tests.server.in_process import started_server
from tests.server.stubs import stubs
from xinserve.v1 import server_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")
REASON = "collector ordered, ticket OPS-42"


def _serve(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--listen", "127.0.0.1:0", "--no-metrics", *extra],
        cwd=REPO,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg"), "XINSERVE_AUDIT__REQUIRE_ANCHOR": "true"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_require_anchor_without_syslog_refuses_the_start(tmp_path: Path) -> None:
    result = _serve(tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "audit: require_anchor: no off-host anchor is configured" in result.stderr
    assert "anchor_waiver" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "xdg").exists()  # refused before anything was created


def test_posture_from_the_settings(tmp_path: Path) -> None:
    def posture(audit: dict) -> str:
        return load_settings(overrides={"data_dir": str(tmp_path), "audit": audit}).audit.anchor_posture

    assert posture({}) == "none"
    assert posture({"require_anchor": True, "syslog": {"host": "collector.example"}}) == "syslog"
    assert posture({"require_anchor": True, "anchor_waiver": REASON}) == "waived"
    with pytest.raises(ConfigError, match="anchor_waiver waives require_anchor"):
        posture({"anchor_waiver": REASON})
    with pytest.raises(ConfigError, match="anchor_waiver"):
        posture({"require_anchor": True, "anchor_waiver": ""})


async def _start_record_and_health(tmp_path: Path, audit: dict) -> tuple[dict, dict, server_pb2.AuditStatus]:
    async with started_server(tmp_path, audit=audit) as server:
        assert server.runtime.audit is not None
        health = server.runtime.audit.log.health_detail()
        rows = await server.runtime.audit.log.query(QueryFilter(event="start"))
        port = next(iter(server.frontend.ports.values()))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = await stubs(channel).server.GetServerInfo(server_pb2.GetServerInfoRequest())
    return decode_record(rows[-1].body)[2].detail, health, info.audit


@contextlib.contextmanager
def _server_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The server module's log events while the block runs (structlog's ``capture_logs``). The
    module's logger is replaced by a fresh one: structlog caches a logger on first use, so one
    that an earlier test used still writes to the stream it was configured with."""
    with structlog.testing.capture_logs() as logged:
        monkeypatch.setattr(service.lifecycle.server, "log", structlog.get_logger("xinserve.server"))
        yield logged


@ASYNC
async def test_a_waived_anchor_is_recorded_at_start_and_in_the_health_detail(tmp_path: Path, monkeypatch) -> None:
    with _server_log(monkeypatch) as logged:
        detail, health, info = await _start_record_and_health(
            tmp_path, {"require_anchor": True, "anchor_waiver": REASON}
        )
    assert detail["audit_anchor"] == "waived" and detail["anchor_waiver"] == REASON
    assert health["anchor"] == "waived" and health["anchor_waiver"] == REASON
    assert (info.anchor, info.anchor_waiver, info.require_anchor) == ("waived", REASON, True)
    (warning,) = [e for e in logged if e["event"] == "AUDIT_LOG_WITHOUT_OFF_HOST_ANCHOR"]
    assert warning["log_level"] == "warning" and warning["anchor_waiver"] == REASON


@ASYNC
async def test_the_default_start_records_no_anchor_and_warns(tmp_path: Path, monkeypatch) -> None:
    with _server_log(monkeypatch) as logged:
        detail, health, info = await _start_record_and_health(tmp_path, {})
    assert detail["audit_anchor"] == "none" and "anchor_waiver" not in detail
    assert health["anchor"] == "none" and "anchor_waiver" not in health
    assert (info.anchor, info.anchor_waiver, info.require_anchor) == ("none", "", False)
    (warning,) = [e for e in logged if e["event"] == "AUDIT_LOG_WITHOUT_OFF_HOST_ANCHOR"]
    assert warning["log_level"] == "warning" and "audit.require_anchor" in warning["note"]
    json.dumps(health)  # the health detail stays plain JSON
