"""An OpenAI HTTP front end on a loopback port over fake engines, with a real audit log: for
tests of the HTTP layer that need no real vLLM engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from audit import QueryFilter
from audit.records import AuditRecord, decode_record
from service.frontends.grpc.server import Frontend
from service.frontends.openai.listener import HttpFrontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.fake_engine import FakeEngine


@asynccontextmanager
async def http_over_fake_engines(
    tmp_path: Path, engines: list[FakeEngine], overrides: dict | None = None
) -> AsyncIterator[tuple[int, Runtime]]:
    """Serve ``engines`` (started here, READY) over HTTP on 127.0.0.1; yields (port, runtime).
    ``overrides``: more settings (e.g. ``{"limits": {...}}``). Stops the listener, the engines
    and the audit log on exit."""
    async with both_over_fake_engines(tmp_path, engines, overrides, grpc=False) as (port, _, runtime):
        yield port, runtime


@asynccontextmanager
async def both_over_fake_engines(
    tmp_path: Path, engines: list[FakeEngine], overrides: dict | None = None, *, grpc: bool = True
) -> AsyncIterator[tuple[int, int, Runtime]]:
    """As ``http_over_fake_engines``, with the gRPC listener of the same call core serving too
    (``grpc``); yields (HTTP port, gRPC port or 0, runtime)."""
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"], "http": ["127.0.0.1:0"]},
            "metrics_listen": None,
            **(overrides or {}),
        }
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    for engine in engines:
        await engine.start()
        runtime.add_model(ModelEntry(engine.info.name, engine.info.kind, tmp_path, engine))
        await runtime.mark(runtime.models[engine.info.name], ModelState.READY)
    await runtime.set_serving(True)
    grpc_frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    http = HttpFrontend(grpc_frontend.core, grpc_frontend.inference, settings)
    await http.start()
    if grpc:
        await grpc_frontend.start()
    try:
        yield next(iter(http.ports.values())), next(iter(grpc_frontend.ports.values())) if grpc else 0, runtime
    finally:
        if grpc:
            await grpc_frontend.stop(0)
        await http.stop()
        for engine in engines:
            await engine.shutdown()
        await runtime.audit.close()


async def rpc_records(runtime: Runtime, request_id: str, wait_s: float = 60.0) -> list[AuditRecord]:
    """The ``rpc`` audit records of the call ``request_id``, waiting up to ``wait_s`` seconds for
    the first (a call's record may be appended just after its reply is sent)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        rows = await runtime.audit.log.query(QueryFilter(event="rpc"))
        found = [r for r in (decode_record(row.body)[2] for row in rows) if r.request_id == request_id]
        if found:
            return found
        assert loop.time() < deadline, f"no audit record for {request_id}"
        await asyncio.sleep(0.05)
