"""A real ``Server.create`` in this process with no engine: one model directory that holds no
model (so nothing loads), plaintext gRPC on 127.0.0.1, no metrics listener. For tests of what a
start records and reports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from service.core import metrics
from service.lifecycle.server import Server
from service.settings.config import load_settings


@asynccontextmanager
async def started_server(tmp_path: Path, **overrides: Any) -> AsyncIterator[Server]:
    """The started server (data under ``tmp_path / "data"``, ``overrides`` merged into its
    settings); its gRPC front end and audit log are stopped on exit. The process-wide
    engine-load metrics source, which a start points at its own runtime, is restored then,
    so the session's live server keeps exporting its engines' load."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "models": [{"name": "m", "path": str(model)}],
            **overrides,
        }
    )
    source = metrics.ENGINE_LOAD.source
    server = await Server.create(settings)
    try:
        assert server.runtime.audit is not None
        yield server
    finally:
        await server.frontend.stop(0)
        await server.runtime.audit.close()
        metrics.ENGINE_LOAD.source = source
