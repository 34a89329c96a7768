"""The OpenAI-compatible front end over the session's server: the same engines, admission
and audit log as its gRPC listener (one call core), on a free loopback port."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import pytest_asyncio

from service.access.policy import AccessPolicy
from service.frontends.openai.listener import HttpFrontend
from service.lifecycle.reload import authenticator_for
from service.operations.inference import Inference
from service.pipeline.call_core import CallCore
from service.runtime.state import ModelState, Runtime
from service.settings.config import load_settings


@dataclass
class HttpServer:
    base_url: str  # http://127.0.0.1:PORT/v1
    frontend: HttpFrontend


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def http_server(live_server):
    """``listen.http`` on the live server's own call core (shared admission and audit)."""
    settings = load_settings(
        overrides={
            "data_dir": str(live_server.data_dir),
            "metrics_listen": None,
            "listen": {"plaintext": ["127.0.0.1:0"], "http": ["127.0.0.1:0"]},
        }
    )
    grpc_frontend = live_server.server.frontend
    frontend = HttpFrontend(grpc_frontend.core, grpc_frontend.inference, settings)
    await frontend.start()
    port = next(iter(frontend.ports.values()))
    try:
        yield HttpServer(f"http://127.0.0.1:{port}/v1", frontend)
    finally:
        await frontend.stop()


@asynccontextmanager
async def extra_http(live_server, overrides: dict, audit=None):
    """An HTTP front end with its own settings (listeners, TLS, tokens, admission) over a new
    Runtime that shares the live server's loaded engines. Yields (frontend, runtime)."""
    settings = load_settings(
        overrides={
            "data_dir": str(live_server.data_dir),
            "metrics_listen": None,
            "listen": {"plaintext": ["127.0.0.1:0"], **overrides.pop("listen", {})},
            **overrides,
        }
    )
    runtime = Runtime(settings)
    runtime.audit = audit
    for entry in live_server.runtime.models.values():
        runtime.add_model(replace(entry))
    for entry in runtime.models.values():
        await runtime.mark(entry, ModelState.READY)
    await runtime.set_serving(True)
    policy = AccessPolicy(settings.auth)
    core = CallCore(runtime, authenticator_for(settings), policy)
    frontend = HttpFrontend(core, Inference(runtime, policy), settings)
    await frontend.start()
    try:
        yield frontend, runtime
    finally:
        await frontend.stop()
