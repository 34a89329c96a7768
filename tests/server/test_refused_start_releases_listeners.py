"""A start refused while the models are being set up (after the listeners bound and the audit
log opened) stops its listeners before the refusal propagates: nothing keeps the port. On a
fresh data directory it also removes the key, audit database and directories it created
(service.lifecycle.start_footprint); an audit store and key an earlier start made are kept."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
from contextlib import closing

import pytest

from engine_backends.errors import PlatformError
from service.lifecycle.server import Server, open_audit
from service.settings.config import load_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_start_refused_while_building_models_releases_its_listener(tmp_path):
    port = _free_port()
    model = tmp_path / "model"
    model.mkdir()
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": [f"127.0.0.1:{port}"]},
            "metrics_listen": None,
            "models": [{"name": "m", "path": str(model), "engine": {"quantization": "fp8"}}],
            "audit": {"path": str(tmp_path / "audit.db"), "node_id": "refused-start"},
        }
    )
    with pytest.raises(PlatformError, match="quantization 'fp8' has no kernel on cpu"):
        await Server.create(settings)
    with socket.socket() as s:  # raises EADDRINUSE while the refused server still listens
        s.bind(("127.0.0.1", port))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no data dir, key or audit.db*


async def test_a_refused_start_keeps_the_audit_store_and_key_of_earlier_starts(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "models": [{"name": "m", "path": str(model), "engine": {"quantization": "fp8"}}],
            "audit": {"path": str(tmp_path / "audit.db"), "node_id": "refused-start"},
        }
    )
    trail = await open_audit(settings)  # an earlier start's store and key
    await trail.close()
    key = settings.audit.signing_key_path
    assert key is not None
    key_pem = key.read_bytes()
    with pytest.raises(PlatformError):
        await Server.create(settings)
    assert key.read_bytes() == key_pem
    assert (tmp_path / "audit.db").is_file()
    records = await asyncio.to_thread(_events, settings)
    assert records.count("start") == 1, records  # the refused start is on the record


def _events(settings) -> list[str]:
    with closing(sqlite3.connect(settings.audit.path)) as db:
        return [str(row[0]) for row in db.execute("SELECT event FROM audit_records ORDER BY seq")]
