"""Session-wide fixtures: ONE real server over the real vLLM engine (CPU) per test session.

``live_server`` starts two built-in models once, named explicitly: xinserve-tiny-llama and
all-MiniLM-L6-v2 (not the default SmolLM2 chat model: tests/smollm2/ has its own server);
tests that need other listeners (TLS, tokens, a draining front end) add front ends over the
same runtime instead of starting more engines. The built-in models are cached in
``.cache/xinserve-test`` at the repository root (override: XINSERVE_TEST_DATA_DIR).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
import pytest_asyncio

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

# grpc.aio shuts its completion queue down when its last object is freed. Freed during interpreter
# finalization (an aio server or channel collected after its loop closed), that shutdown joins a
# poller thread that can no longer take the GIL, and the process never exits (grpc/grpc#22365).
# A reference taken here, in the main thread, keeps that shutdown out of finalization.
grpc.aio.init_grpc_aio()

# Seconds the interpreter may take to exit after the session before every thread's stack is
# printed and the process ends with status 1, instead of hanging until CI's own limit.
EXIT_WATCHDOG_S = 300

REPO = Path(__file__).resolve().parent.parent
TINY = "xinserve-tiny-llama"
MINILM = "all-MiniLM-L6-v2"


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, for disk-full tests (skipped, with the reason, where mounting is refused)."""
    from tests.support.full_disk import mount_tiny_fs

    yield from mount_tiny_fs(tmp_path / "tiny")


def _data_dir() -> Path:
    return Path(os.environ.get("XINSERVE_TEST_DATA_DIR", REPO / ".cache" / "xinserve-test"))


@dataclass
class LiveServer:
    """The session's server: ``target`` is HOST:PORT of its plaintext listener."""

    target: str
    server: object  # service.lifecycle.server.Server
    data_dir: Path

    @property
    def runtime(self):
        return self.server.runtime  # type: ignore[attr-defined]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def live_server(tmp_path_factory) -> AsyncIterator[LiveServer]:
    from service.core import logs
    from service.lifecycle.server import Server
    from service.settings.config import load_settings

    logs.configure("console", "warning")
    data_dir = _data_dir()
    settings = load_settings(
        overrides={
            "data_dir": str(data_dir),
            "builtin_models": [TINY, MINILM],
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "admission": {"max_in_flight": 16, "max_queue": 16},
            "drain_grace_seconds": 5,
            "audit": {
                "path": str(tmp_path_factory.mktemp("audit") / "audit.db"),
                "node_id": "test-node",
                "checkpoint_interval_s": 5,
            },
        }
    )
    server = await Server.create(settings)
    if not await server.load_models():
        pytest.fail(
            "the built-in models did not load: " + repr({n: e.state_reason for n, e in server.runtime.models.items()})
        )
    port = next(iter(server.frontend.ports.values()))
    try:
        yield LiveServer(f"127.0.0.1:{port}", server, data_dir)
    finally:
        await server.drain_and_stop()


@pytest_asyncio.fixture(loop_scope="session")
async def api(live_server: LiveServer) -> AsyncIterator[Any]:
    """grpc.aio stubs (tests.server.stubs) on the live server's plaintext listener; the
    channel is closed after the test."""
    from tests.server.stubs import stubs

    s = stubs(grpc.aio.insecure_channel(live_server.target))
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture(autouse=True)
def _logs_on_an_open_stream() -> Iterator[None]:
    """After a test that ran ``xinserve serve`` in-process under ``capsys``/``capfd`` (which
    configures the logs onto the capture's stream, closed when the test ends), log to the real
    stderr again, so that a later test's log line is not a ``ValueError`` on a closed file."""
    yield
    import structlog

    stream = getattr(structlog.get_config()["logger_factory"], "_file", None)
    if stream is not None and getattr(stream, "closed", False):
        from service.core import logs

        logs.configure("console", "warning")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Bound the interpreter's exit: a thread, pool or child left alive by a test shows up as a
    stack dump on stderr and exit status 1 after ``EXIT_WATCHDOG_S``, never as a silent hang."""
    faulthandler.dump_traceback_later(EXIT_WATCHDOG_S, exit=True, file=sys.__stderr__)


ENGINE_FIXTURES = frozenset({"live_server"})
"""Fixtures that start (or share) the real vLLM engine: a test using one, directly or through
another fixture, is marked ``engine`` at collection (``scripts/test --quick`` leaves those out)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``engine`` every test whose fixture closure includes an ``ENGINE_FIXTURES`` entry."""
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.engine)
