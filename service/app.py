"""Start-up, serving and shutdown of the server process (``xinserve serve``).

Order (ARCHITECTURE.md): load config → [open audit: audit issue] → [TEE attest: later] →
start listeners with health NOT_SERVING → for each model: [verify signature: signing
issue] → load engine → health SERVING → serve. SIGTERM/SIGINT: health NOT_SERVING, new
inference calls UNAVAILABLE, in-flight calls get ``drain_grace_seconds`` to finish, the
rest are cancelled (which aborts their engine requests), engines stop, exit 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import start_http_server

from engine_backends.builtin_models import builtin_models
from engine_backends.platforms import PlatformProfile, resolve_device
from engine_backends.vllm_engine import VllmEngine
from service.auth import Authenticator, load_token_file
from service.config import Settings
from service.frontend import Frontend
from service.logs import get_logger
from service.runtime import ModelEntry, ModelState, Runtime

log = get_logger("xinserve.server")

EXIT_OK = 0
EXIT_NO_MODEL = 4  # 2 (configuration) and 3 (environment) are returned by service.commands

# Engine arguments for the built-in models (tiny; CPU-friendly).
_BUILTIN_OPTIONS = {
    "generate": {"max_model_len": 2048, "max_num_seqs": 64, "max_num_batched_tokens": 4096},
    "embed": {"max_model_len": 256, "max_num_seqs": 64, "max_num_batched_tokens": 4096},
}


def offline_environment() -> None:
    """No hub downloads, no usage telemetry: models are local and deployments are closed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def authenticator_for(settings: Settings) -> Authenticator:
    tokens = load_token_file(settings.auth.token_file) if settings.auth.token_file else []
    return Authenticator(tokens, settings.auth.required)


async def model_entries(settings: Settings, profile: PlatformProfile) -> list[ModelEntry]:
    """The configured models, or the embedded defaults (built on first use) if none."""
    engine_args = settings.engine.engine_args()
    entries: list[ModelEntry] = []
    if settings.models:
        for m in settings.models:
            engine = VllmEngine(m.name, m.kind, m.path, profile, engine_args, m.lora)
            entries.append(ModelEntry(m.name, m.kind, m.path, engine))
        return entries
    for builtin in await asyncio.to_thread(builtin_models, settings.data_dir):
        options = {**_BUILTIN_OPTIONS[builtin.kind], **engine_args}
        engine = VllmEngine(builtin.name, builtin.kind, builtin.path, profile, options)  # type: ignore[arg-type]
        entries.append(ModelEntry(builtin.name, builtin.kind, builtin.path, engine))  # type: ignore[arg-type]
    return entries


@dataclass
class Server:
    """A running server: runtime, front end, and how to stop it. Used by ``serve`` and tests."""

    settings: Settings
    runtime: Runtime
    frontend: Frontend
    profile: PlatformProfile
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def create(cls, settings: Settings) -> Server:
        """Resolve the device, open the listeners (health NOT_SERVING) and register models.

        Raises:
            PlatformError: the device's vLLM plugin is missing.
            TokenFileError: malformed token file.
            RuntimeError: a listener could not bind (grpc raises it).
        """
        offline_environment()
        profile = resolve_device(settings.engine.device, settings.engine.visible_devices)
        runtime = Runtime(settings)
        frontend = Frontend(runtime, settings, authenticator_for(settings), profile.device)
        await frontend.start()
        for entry in await model_entries(settings, profile):
            runtime.add_model(entry)
        for entry in runtime.models.values():
            await runtime.mark(entry, ModelState.LOADING)
        return cls(settings, runtime, frontend, profile)

    async def load_models(self) -> bool:
        """Load every model; health turns SERVING if at least one is ready. Returns that."""
        await asyncio.gather(*(self.runtime.load_model(e) for e in self.runtime.models.values()))
        ready = self.runtime.ready_engines()
        if ready:
            await self.runtime.set_serving(True)
            log.info("serving", models=[name for name, _ in ready], ports=self.frontend.ports)
        return bool(ready)

    async def drain_and_stop(self) -> None:
        grace = self.settings.drain_grace_seconds
        log.info("draining", grace_seconds=grace, in_flight=self.runtime.admission.in_flight)
        await self.runtime.start_drain()
        await self.frontend.stop(grace)
        await self.runtime.shutdown_engines()
        log.info("stopped")


async def serve(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; returns the process exit code."""
    server = await Server.create(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop_requested.set)
    if settings.metrics_listen:
        host, _, port = settings.metrics_listen.rpartition(":")
        start_http_server(int(port), addr=host.strip("[]"))
    loading = asyncio.create_task(server.load_models())
    stopping = asyncio.create_task(server.stop_requested.wait())
    await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if stopping.done():
        loading.cancel()
        await asyncio.gather(loading, return_exceptions=True)
        await server.drain_and_stop()
        return EXIT_OK
    if not loading.result():
        log.error("no_model_can_be_served", models={n: e.state_reason for n, e in server.runtime.models.items()})
        stopping.cancel()
        await server.drain_and_stop()
        return EXIT_NO_MODEL
    await stopping
    await server.drain_and_stop()
    return EXIT_OK


def data_dir_ok(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        return os.access(path, os.W_OK)
    except OSError:
        return False
