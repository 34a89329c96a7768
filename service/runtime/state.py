"""The server's shared state: models and their engines, admission, serving status.

One ``Runtime`` per process; several gRPC front ends (listeners) may share it. Health
statuses are pushed to every registered ``grpc.health.v1`` servicer on each transition
(starting → serving → draining), which is what makes ``Watch`` real.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from audit import EventType
from engine_backends.errors import EngineError
from engine_backends.protocol import Engine, ModelKind
from service.core.admission import Admission
from service.core.audit_trail import AuditTrail
from service.core.body_reception import BodyReception
from service.core.logs import get_logger
from service.core.reasons import Reason
from service.core.status import RpcError, not_found
from service.runtime.model_entry import AdapterEntry, ModelEntry, ModelState, Verification
from service.runtime.tee_hook import TeeHook
from service.settings.config import Settings

__all__ = ["AdapterEntry", "ModelEntry", "ModelState", "Runtime", "Verification", "model_health_name"]

log = get_logger(__name__)

INFERENCE_SERVICE = "xinserve.v1.InferenceService"
OVERALL = ""


def model_health_name(model: str) -> str:
    """Health service name of one model: ``xinserve.v1.InferenceService/<model>``."""
    return f"{INFERENCE_SERVICE}/{model}"


class Runtime:
    """Shared server state. All methods run on the event loop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.models: dict[str, ModelEntry] = {}
        self.admission = Admission(
            settings.admission.max_in_flight,
            settings.admission.max_queue,
            settings.admission.retry_after_ms / 1000,
        )
        self.body_reception = BodyReception(
            settings.admission.max_in_flight + settings.admission.max_queue,
            settings.limits.max_http_bodies_per_peer,
            settings.limits.max_http_bodies_per_principal,
            settings.admission.retry_after_ms / 1000,
            settings.limits.http_refusal_audit_interval_s,
        )
        self.draining = False
        # request id -> (engine running it, principal that started it)
        self.active_requests: dict[str, dict[str, tuple[Engine, str]]] = {}
        """Running inference requests: request id → owner (``request_owner``) → (engine, the
        engine's id for the request); ``claim_request`` is the one rule that fills it."""
        self._health: list[health_aio.HealthServicer] = []
        self._status: dict[str, int] = {
            OVERALL: health_pb2.HealthCheckResponse.NOT_SERVING,
            INFERENCE_SERVICE: health_pb2.HealthCheckResponse.NOT_SERVING,
        }
        self.audit: AuditTrail | None = None
        self.tee: TeeHook | None = None
        """The TEE hook (evidence, key release, decrypted copies); set by the server at start."""
        self.engine_died: Callable[[str], Awaitable[None]] | None = None
        """Called with a model's name when a call found its engine dead (``EngineDeadError``),
        before that call is answered; set by ``service.runtime.engine_watch.EngineWatch``."""

    # -- health ------------------------------------------------------------------------

    async def attach_health(self, servicer: health_aio.HealthServicer) -> None:
        self._health.append(servicer)
        for name, status in self._status.items():
            await servicer.set(name, status)

    async def _set(self, name: str, status: int) -> None:
        self._status[name] = status
        for servicer in self._health:
            await servicer.set(name, status)

    def health_status(self, name: str = OVERALL) -> int | None:
        """The ``grpc.health.v1`` status last pushed for ``name`` (None if never set)."""
        return self._status.get(name)

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        await self._set(OVERALL, status)
        await self._set(INFERENCE_SERVICE, status)

    # -- models ------------------------------------------------------------------------

    def add_model(self, entry: ModelEntry) -> None:
        self.models[entry.name] = entry

    async def mark(
        self, entry: ModelEntry, state: ModelState, reason: str = "", code: str = "", detail: str = ""
    ) -> None:
        """Move ``entry`` to ``state`` and push its health status. ``reason`` must be safe for
        any caller; ``code`` is its machine-readable form; ``detail`` is for operators only."""
        if state is ModelState.READY and entry.state is not ModelState.READY:
            entry.ready_since = int(time.time())
        entry.state = state
        entry.state_reason = reason
        entry.reason_code = code
        entry.state_detail = detail
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if state is ModelState.READY
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await self._set(model_health_name(entry.name), status)

    async def audit_event(self, event: Any, outcome: str = "OK", **detail: Any) -> None:
        if self.audit is not None:
            await self.audit.event(event, outcome, **detail)

    async def load_model(self, entry: ModelEntry) -> None:
        """Start the entry's engine; on failure the model is FAILED with a short reason."""
        assert entry.engine is not None
        await self.mark(entry, ModelState.LOADING)
        if self.tee is not None and not await self.tee.prepare_model(self, entry):
            return  # an encrypted model whose key was not released (or did not decrypt): FAILED
        try:
            await entry.engine.start()
        except EngineError as exc:
            log.error("model_load_failed", model=entry.name, reason=str(exc))
            await self.mark(entry, ModelState.FAILED, str(exc), "load_failed", str(exc))
            await self.audit_event(EventType.MODEL_LOADED, "FAILED_PRECONDITION", model=entry.name, reason=str(exc))
            return
        log.info("model_loaded", model=entry.name, kind=entry.kind)
        await self.mark(entry, ModelState.READY)
        await self.audit_event(
            EventType.MODEL_LOADED, model=entry.name, manifest_digest=entry.manifest_digest or None, kind=entry.kind
        )

    def engine_for(self, name: str, kind: ModelKind | None = None) -> Engine:
        """The ready engine serving ``name``.

        Raises:
            RpcError: NOT_FOUND (unknown), UNAVAILABLE (loading or draining),
                FAILED_PRECONDITION (failed, refused, or the wrong kind for the call).
        """
        entry = self.models.get(name)
        if entry is None:
            raise not_found("model", name, Reason.MODEL_NOT_FOUND)
        if entry.state is ModelState.LOADING:
            raise RpcError(
                grpc.StatusCode.UNAVAILABLE,
                f"model {name!r} is loading",
                Reason.MODEL_LOADING,
                retry_after_s=5.0,
                metadata={"model": name[:128]},
            )
        if entry.state is ModelState.FAILED or entry.engine is None:
            raise RpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"model {name!r} cannot be served: {entry.state_reason or 'not loaded'}",
                Reason.MODEL_NOT_SERVABLE,
                metadata={"model": name[:128]},
            )
        if kind is not None and entry.kind != kind:
            what = "an embedding" if entry.kind == "embed" else "a generative"
            raise RpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"model {name!r} is {what} model and cannot serve this call",
                Reason.WRONG_MODEL_KIND,
                metadata={"model": name[:128], "kind": entry.kind},
            )
        return entry.engine

    def adapter_for(self, model: str, lora_name: str | None) -> AdapterEntry | None:
        """The adapter a request names for ``model`` (None when it names none).

        Raises:
            RpcError: NOT_FOUND (not configured for the model), FAILED_PRECONDITION (its
                verification failed: it is never loaded).
        """
        if not lora_name:
            return None
        entry = self.models.get(model)
        adapter = entry.adapters.get(lora_name) if entry is not None else None
        if adapter is None:
            raise RpcError(
                grpc.StatusCode.NOT_FOUND,
                f"LoRA adapter {lora_name!r} is not configured for model {model!r}",
                Reason.LORA_NOT_FOUND,
                metadata={"lora_adapter": lora_name[:128], "model": model[:128]},
            )
        if not adapter.servable:
            raise RpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"LoRA adapter {lora_name!r} cannot be used: signature verification failed "
                f"({adapter.verification_reason or 'not verified'})",
                Reason.LORA_NOT_SERVABLE,
                metadata={
                    "lora_adapter": lora_name[:128],
                    "model": model[:128],
                    "reason": adapter.verification_reason[:128],
                },
            )
        return adapter

    def claim_request(self, request_id: str, engine: Engine, owner: str) -> str:
        """Hold ``request_id`` as running on ``engine`` for ``owner`` (``request_owner``), the
        one rule of every inference call: running ids are scoped per owner, so another
        owner's running id is neither refused nor revealed. Returns the engine's id for the
        request: ``request_id`` itself, or, while another owner's request holds that engine
        id, ``request_id`` with a random suffix (an engine aborts by id).

        Raises:
            RpcError: ALREADY_EXISTS when ``owner`` already runs ``request_id``.
        """
        owners = self.active_requests.setdefault(request_id, {})
        if owner in owners:
            raise RpcError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"request id {request_id!r} is already running",
                Reason.DUPLICATE_REQUEST_ID,
            )
        engine_id = request_id
        if any(held == request_id for _, held in owners.values()):
            engine_id = f"{request_id}~{uuid.uuid4().hex[:12]}"
        owners[owner] = (engine, engine_id)
        return engine_id

    def release_request(self, request_id: str, owner: str) -> None:
        """End ``claim_request``'s hold (a no-op when it has none)."""
        owners = self.active_requests.get(request_id)
        if owners is not None:
            owners.pop(owner, None)
            if not owners:
                del self.active_requests[request_id]

    def running_for(self, request_id: str, owner: str | None) -> list[tuple[Engine, str]]:
        """(engine, engine id) of ``request_id`` run by ``owner``; ``owner`` None: by anyone."""
        owners = self.active_requests.get(request_id) or {}
        if owner is None:
            return list(owners.values())
        held = owners.get(owner)
        return [held] if held is not None else []

    @contextmanager
    def running_request(self, request_id: str, engine: Engine, owner: str) -> Iterator[str]:
        """``claim_request`` for the block; yields the engine's id for the request."""
        engine_id = self.claim_request(request_id, engine, owner)
        try:
            yield engine_id
        finally:
            self.release_request(request_id, owner)

    def ready_engines(self) -> list[tuple[str, Engine]]:
        return [
            (name, e.engine) for name, e in self.models.items() if e.state is ModelState.READY and e.engine is not None
        ]

    async def start_drain(self) -> None:
        """Health NOT_SERVING everywhere; new inference calls get UNAVAILABLE."""
        self.draining = True
        await self.audit_event(EventType.DRAIN, in_flight=self.admission.in_flight)
        await self.set_serving(False)
        for name in self.models:
            await self._set(model_health_name(name), health_pb2.HealthCheckResponse.NOT_SERVING)

    async def wait_idle(self, grace_seconds: float) -> bool:
        """Wait until no inference call is in flight, at most ``grace_seconds``; True if idle."""
        deadline = asyncio.get_running_loop().time() + grace_seconds
        while self.admission.in_flight:
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def shutdown_engines(self) -> None:
        """Stop every engine, in parallel (each takes seconds to stop its processes)."""

        async def stop(entry: ModelEntry) -> None:
            if entry.engine is None:
                return
            try:
                await entry.engine.shutdown()
            except Exception as exc:  # shutting down: log and go on with the others
                log.warning("engine_shutdown_failed", model=entry.name, error=type(exc).__name__)
                return
            if entry.state is ModelState.READY:
                await self.audit_event(EventType.MODEL_UNLOADED, model=entry.name)

        await asyncio.gather(*(stop(e) for e in self.models.values()))
