"""Extra front ends over the session's engines: other listeners, auth or admission, without
starting another engine."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import replace

from service.frontends.grpc.server import Frontend
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelState, Runtime
from service.settings.config import load_settings


@asynccontextmanager
async def extra_frontend(live_server, overrides: dict, audit=None):
    """A new Runtime sharing the live server's loaded engines, behind a new Frontend.

    ``audit``: an AuditTrail for this runtime (default: none). Yields (frontend, runtime, port)
    where port is the first listener's port.
    """
    settings = load_settings(overrides={"data_dir": str(live_server.data_dir), "metrics_listen": None, **overrides})
    runtime = Runtime(settings)
    runtime.audit = audit
    for entry in live_server.runtime.models.values():
        runtime.add_model(replace(entry))
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    await frontend.start()
    for entry in runtime.models.values():
        await runtime.mark(entry, ModelState.READY)
    await runtime.set_serving(True)
    try:
        yield frontend, runtime, next(iter(frontend.ports.values()))
    finally:
        await frontend.stop(0)
