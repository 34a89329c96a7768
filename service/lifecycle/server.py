"""Start-up, serving and shutdown of the server process (``xinserve serve``).

Order (ARCHITECTURE.md): load config → probe the listener addresses (``service.core.listen_probe``,
before the engine is imported) → check data_dir (creating nothing) → bind the metrics
listener → verify the running image signature if configured (``service.lifecycle.startup_checks``)
→ read the token and TLS files, build the one call core both front ends share
(``service.lifecycle.wiring``) and bind the listeners → open the audit log (data_dir, key and
database are created here, so a start refused before it leaves nothing behind; one refused from
here on removes what it created, ``service.lifecycle.start_footprint``) → TEE evidence → serve
with health NOT_SERVING → for each model: verify its SM2 signature (fail closed) → load engine
→ health SERVING → serve. SIGHUP: reload the token file and the trust store
(``service.lifecycle.reload``, audited).
SIGTERM/SIGINT: health NOT_SERVING, new inference calls UNAVAILABLE, in-flight
calls get ``drain_grace_seconds`` to finish, the rest are cancelled (which aborts their engine
requests), engines stop, exit 0 (``service.lifecycle.exit_codes``).
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from audit import AuditError, AuditLog, ContentCapture, EventType, WriterConflict
from audit.log import load_signer
from engine_backends.builtin_models import builtin_models
from engine_backends.engine_args_plan import engine_options, plan_engine_args
from engine_backends.platforms import PlatformProfile, resolve_device
from engine_backends.vllm_compat import engine_version, set_engine_environment
from engine_backends.vllm_engine import VllmEngine
from service.core import metrics
from service.core.audit_trail import AuditTrail
from service.core.listen_probe import listen_error
from service.core.logs import get_logger
from service.frontends.grpc.server import Frontend
from service.frontends.grpc.server_servicer import server_version
from service.frontends.openai.listener import HttpFrontend
from service.lifecycle.exit_codes import ExitCode
from service.lifecycle.refused_start import record_refused_start
from service.lifecycle.reload import Reloader, changed_config_fields, record_start_state
from service.lifecycle.start_footprint import StartFootprint
from service.lifecycle.startup_checks import ImageRefused, StartupRefused, verify_running_image, warn_without_anchor
from service.lifecycle.wiring import shared_core
from service.runtime.engine_watch import EngineWatch
from service.runtime.model_metrics import export_runtime
from service.runtime.state import AdapterEntry, ModelEntry, ModelState, Runtime
from service.runtime.tee_hook import TeeHook, TeeStartupError
from service.runtime.verification import copies_root, verify_and_load
from service.settings.config import Settings
from trust.demo import ensure_demo_key, sign_if_unsigned
from trust.sm3 import sm3_hex
from trust.trust_store import TrustStore
from xinserve_client.addresses import split_host_port

log = get_logger("xinserve.server")


class AuditOpenFailed(StartupRefused):
    """The audit log cannot be opened, or its stored log does not verify: nothing is served.

    ``another_writer``: another process holds the audit chain's writer lock (``WriterConflict``).
    """

    exit_code = ExitCode.AUDIT

    def __init__(self, message: str, *, another_writer: bool = False) -> None:
        super().__init__(message)
        self.another_writer = another_writer


async def open_audit(settings: Settings) -> AuditTrail:
    """Open the audit log with the server's SM2 key (created on first start).

    Raises:
        AuditOpenFailed: bad key, store unreachable, another writer on this chain, or the
            stored log fails verification against the key.
    """
    cfg = settings.audit
    assert cfg.signing_key_path is not None
    try:
        capture = ContentCapture.from_settings(cfg)  # before the key is created: it may refuse
    except AuditError as exc:
        raise AuditOpenFailed(f"the audit log cannot be opened: {exc}") from None
    try:
        key = await asyncio.to_thread(load_signer, cfg, create=True)
    except AuditError as exc:
        raise AuditOpenFailed(f"the server's SM2 key at {cfg.signing_key_path} is unusable: {exc}") from None
    try:
        audit_log = await AuditLog.open(cfg, signer=key)
    except WriterConflict as exc:
        raise AuditOpenFailed(f"the audit log cannot be opened: {exc}", another_writer=True) from None
    except AuditError as exc:
        raise AuditOpenFailed(f"the audit log cannot be opened: {exc}") from None
    except OSError as exc:  # e.g. the database's directory cannot be created
        raise AuditOpenFailed(f"the audit log cannot be opened: {exc.strerror or type(exc).__name__}") from None
    except Exception as exc:  # a stored value of an unexpected type (edited database): fail closed, no traceback
        raise AuditOpenFailed(
            f"the audit log cannot be read ({type(exc).__name__}); run `xinserve audit verify` on it"
        ) from None
    if audit_log.recovery is not None and audit_log.recovery.unclean_shutdown:
        log.warning("audit_recovered_after_unclean_shutdown", recovery=str(audit_log.recovery))
    return AuditTrail(audit_log, capture, key.public_key())


def config_digest(settings: Settings) -> str:
    """SM3 of the effective configuration (secrets masked), recorded at start."""
    return "sm3:" + sm3_hex(settings.model_dump_json().encode("utf-8"))


def offline_environment() -> None:
    """No hub downloads, no usage telemetry: models are local and deployments are closed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


async def model_entries(
    settings: Settings, profile: PlatformProfile, audit: AuditTrail | None = None
) -> tuple[list[ModelEntry], TrustStore | None]:
    """The configured models, or the embedded defaults (built on first use) if none, and the
    trust store their signatures are checked against.

    The embedded defaults are signed on first run with a local demo key that only the demo
    trust store trusts (trust.demo), so the verification path runs by default.

    Each model's engine arguments are ``engine_args_plan.plan_engine_args``'s (what
    ``xinserve serve --print-engine-args`` prints).

    Raises:
        TrustStoreError: the configured trust store is malformed.
        PlatformError: a configured quantization has no kernel on the device.
    """
    engine_args = settings.engine.engine_args()
    entries: list[ModelEntry] = []
    if settings.models:
        for m in settings.models:
            plan = plan_engine_args(profile, engine_args, None, m.path, m.engine.engine_args())
            engine = VllmEngine(
                m.name, m.kind, m.path, profile, engine_options(plan), tool_call_parser=m.tool_call_parser
            )
            adapters = {n: AdapterEntry(n, p) for n, p in m.lora.items()}
            entries.append(ModelEntry(m.name, m.kind, m.path, engine, adapters=adapters))
        store_dir = settings.trust.trust_store_dir
        store = await asyncio.to_thread(TrustStore.load, store_dir) if store_dir else None
        return entries, store

    def prepare() -> tuple[list, TrustStore]:
        builtins = builtin_models(settings.data_dir, settings.builtin_models)
        key, demo_store_dir = ensure_demo_key(settings.data_dir)
        for b in builtins:
            if sign_if_unsigned(b.path, key, b.name):
                signed.append(b.name)
                log.info("builtin_model_signed_with_demo_key", model=b.name, key_id=key.public_key().key_id)
        return builtins, TrustStore.load(demo_store_dir)

    signed: list[str] = []
    builtins, store = await asyncio.to_thread(prepare)
    if audit is not None:
        for name in signed:
            await audit.event(EventType.KEY_USED, model=name, purpose="demo signing of a built-in model")
    for builtin in builtins:
        plan = plan_engine_args(profile, engine_args, builtin.engine_options, builtin.path)
        engine = VllmEngine(builtin.name, builtin.kind, builtin.path, profile, engine_options(plan))
        entries.append(ModelEntry(builtin.name, builtin.kind, builtin.path, engine))
    return entries, store


@dataclass
class Server:
    """A running server: runtime, front end, and how to stop it. Used by ``serve`` and tests."""

    settings: Settings
    runtime: Runtime
    frontend: Frontend
    profile: PlatformProfile
    trust_store: TrustStore | None = None
    http: HttpFrontend | None = None
    """The OpenAI-compatible HTTP listeners (``listen.http``, ``listen.https``), if any."""
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int = ExitCode.OK
    watch: EngineWatch | None = None

    @classmethod
    async def create(cls, settings: Settings) -> Server:
        """Resolve the device, bind the listeners, open the audit log, start serving (health
        NOT_SERVING) and register models.

        Everything that can refuse a start without the audit log (device, trust store, image
        signature, token file, TLS files, listener addresses) is checked before the audit log
        is opened, so such a start creates nothing under ``data_dir``. A start refused once the
        audit log is being opened (the audit store itself, TEE evidence, the models' set-up)
        removes the key, audit database and directories it created, never ones that existed
        before (``service.lifecycle.start_footprint``).

        Raises:
            PlatformError: the device's vLLM plugin is missing.
            TokenFileError: malformed token file.
            TlsMaterialError: a TLS certificate, key or client CA file is unusable.
            ListenError: a gRPC or HTTP listener could not bind.
            StartupRefused: image signature, audit log or TEE refused the start.
        """
        offline_environment()
        set_engine_environment(xgrammar_cache_mb=settings.engine.xgrammar_cache_mb)
        profile = resolve_device(settings.engine.device, settings.engine.visible_devices)
        if settings.trust.allow_unsigned_models:
            log.warning("ALLOW_UNSIGNED_MODELS", note="models that fail verification will be served: development only")
        configured_store = (
            await asyncio.to_thread(TrustStore.load, settings.trust.trust_store_dir)
            if settings.trust.trust_store_dir
            else None
        )
        try:
            verify_running_image(settings, configured_store)
        except ImageRefused as exc:
            await record_refused_start(settings, open_audit, exc.audit_detail)
            raise
        runtime = Runtime(settings)
        # The listeners bind (and the TLS files and the token file are read) before the audit
        # log is opened: a start that cannot serve creates no data directory, key or database.
        # One call core, built here, serves both front ends.
        shared = shared_core(runtime, settings)
        frontend = Frontend(shared.core, shared.inference, settings, profile.device)
        http = None
        footprint = StartFootprint.note(settings)
        try:
            if settings.listen.http or settings.listen.https:
                http = HttpFrontend(shared.core, shared.inference, settings)
            audit = await open_audit(settings)
            runtime.audit = audit
            metrics.ENGINE_LOAD.source = runtime.ready_engines
            export_runtime(lambda: runtime.models, server_version(), engine_version())
            await audit.event(
                EventType.START,
                version=server_version(),
                node_id=settings.audit.node_id,
                pid=os.getpid(),
                image_digest=settings.trust.image_digest,
                allow_unsigned_models=settings.trust.allow_unsigned_models,
                audit_anchor=settings.audit.anchor_posture,
                anchor_waiver=settings.audit.anchor_waiver if settings.audit.anchor_posture == "waived" else None,
            )
            warn_without_anchor(settings)
            await audit.event(
                EventType.CONFIG_LOADED,
                config_digest=config_digest(settings),
                changed_fields=",".join(changed_config_fields(settings)),
            )
            await record_start_state(settings, audit, shared.core.authenticator.tokens, configured_store)
            try:
                runtime.tee = await TeeHook.start(settings.tee, runtime)
            except TeeStartupError as exc:
                raise StartupRefused(str(exc)) from None
            await frontend.start()
            if http is not None:
                await http.start()
            entries, store = await model_entries(settings, profile, audit)
        except BaseException as exc:
            await frontend.stop(None)
            if http is not None:
                await http.stop()
            if runtime.audit is not None:
                await runtime.audit.close()
            if isinstance(exc, Exception) and not (isinstance(exc, AuditOpenFailed) and exc.another_writer):
                removed = await asyncio.to_thread(footprint.remove_created)
                if removed:
                    log.info("refused_start_removed_what_it_created", paths=[str(p) for p in removed])
            raise
        for entry in entries:
            runtime.add_model(entry)
        for entry in runtime.models.values():
            await runtime.mark(entry, ModelState.LOADING)
        return cls(settings, runtime, frontend, profile, store, http=http)

    def reloader(self) -> Reloader:
        """Reloads the token file and the trust store into this server (SIGHUP)."""

        def set_store(store: TrustStore | None) -> None:
            self.trust_store = store

        store = self.trust_store if self.settings.trust.trust_store_dir else None
        return Reloader(self.settings, self.frontend.core, self.runtime.audit, store, set_store)

    async def load_models(self) -> bool:
        """Verify then load every model; health turns SERVING if at least one is ready. Returns that."""
        copies = copies_root(self.settings.data_dir)

        async def one(entry: ModelEntry) -> None:
            await verify_and_load(self.runtime, entry, self.trust_store, copies)

        await asyncio.gather(*(one(e) for e in self.runtime.models.values()))
        ready = self.runtime.ready_engines()
        if ready:
            await self.runtime.set_serving(True)
            log.info("serving", models=[name for name, _ in ready], ports=self.frontend.ports)
            self.watch = EngineWatch(self.runtime, self._engine_died).start()
        return bool(ready)

    def _engine_died(self, model: str) -> None:
        self.exit_code = ExitCode.ENGINE_DIED
        self.stop_requested.set()

    async def drain_and_stop(self) -> None:
        grace = self.settings.drain_grace_seconds
        log.info("draining", grace_seconds=grace, in_flight=self.runtime.admission.in_flight)
        if self.watch is not None:
            await self.watch.stop()
        await self.runtime.start_drain()
        # Keep listening while in-flight calls finish, so that probes see NOT_SERVING and new
        # calls get UNAVAILABLE with details (not "connection refused"); then stop, cancelling
        # whatever is still running (which aborts its engine requests).
        await self.runtime.wait_idle(grace)
        await self.frontend.stop(0)
        if self.http is not None:
            await self.http.stop()
        await self.runtime.shutdown_engines()
        if self.runtime.tee is not None:
            await asyncio.to_thread(self.runtime.tee.close)  # zero and remove decrypted models
        audit = self.runtime.audit
        if audit is not None:
            await audit.event(EventType.STOP)
            await audit.close()  # flush and a closing checkpoint
        log.info("stopped")


def start_metrics_listener(address: str) -> WSGIServer:
    """Serve Prometheus ``/metrics`` on ``address`` (HOST:PORT) in a daemon thread
    (``prometheus_client.start_http_server``).

    Raises:
        ListenError: the address cannot be bound.
    """
    host, port = split_host_port(address)
    try:
        httpd, _ = start_http_server(port, addr=host)
    except OSError as exc:
        raise listen_error(address, "metrics_listen", exc) from None
    return httpd


async def serve(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; returns the process exit code.

    Raises:
        ListenError, StartupRefused ...: as ``Server.create``; nothing under
            ``data_dir`` is created when a listener (``metrics_listen`` included) cannot bind.
    """
    metrics_httpd = start_metrics_listener(settings.metrics_listen) if settings.metrics_listen else None
    try:
        return await _serve_until_stopped(settings)
    finally:
        if metrics_httpd is not None:
            await asyncio.to_thread(metrics_httpd.shutdown)
            metrics_httpd.server_close()


async def _serve_until_stopped(settings: Settings) -> int:
    server = await Server.create(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop_requested.set)
    reloader = server.reloader()
    reloads: set[asyncio.Task[bool]] = set()

    def on_sighup() -> None:
        task = asyncio.create_task(reloader.reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_sighup)
    loading = asyncio.create_task(server.load_models())
    stopping = asyncio.create_task(server.stop_requested.wait())
    await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if stopping.done():
        loading.cancel()
        await asyncio.gather(loading, return_exceptions=True)
        await server.drain_and_stop()
        return ExitCode.OK
    if not loading.result():
        log.error("no_model_can_be_served", models={n: e.state_reason for n, e in server.runtime.models.items()})
        stopping.cancel()
        await server.drain_and_stop()
        return ExitCode.NO_MODEL
    await stopping
    await server.drain_and_stop()
    return server.exit_code
