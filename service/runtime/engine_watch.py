"""Watches every serving model's engine: a dead engine is never reported healthy.

Every ``interval_s`` seconds each READY model's ``Engine.check_health()`` is asked (for vLLM:
``AsyncLLM.check_health``, which fails once vLLM's own monitor saw the engine-core process
exit, or its output handler stopped). When an engine is dead:

1. the model turns FAILED with reason code ``engine_died`` (``GetModel`` says so) and its
   health service name NOT_SERVING; the server's overall status turns NOT_SERVING when no
   model can be served any more;
2. a warning naming the model is logged and a ``model_unloaded`` event with outcome
   UNAVAILABLE and ``reason: engine_died`` is appended to the audit log;
3. ``on_death(model)`` is called: the server drains and exits with ``ExitCode.ENGINE_DIED``
   (7, ``service.lifecycle.exit_codes``) so that its orchestrator restarts it (with every
   model verified again). The server does not restart engines itself.

Calls to the dead model get FAILED_PRECONDITION (``MODEL_NOT_SERVABLE``), calls that were
running in it UNAVAILABLE (``ENGINE_DIED``), neither with a retry hint. A call that finds the
engine dead before the next check (vLLM's own monitor can lag the process's exit) records the
death first (``confirm_death``, through ``Runtime.engine_died``), then gets its answer: one
state, never a READY model whose calls fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from audit import EventType
from engine_backends.errors import EngineError
from service.core.logs import get_logger
from service.runtime.state import ModelEntry, ModelState, Runtime

log = get_logger("xinserve.engine_watch")

ENGINE_DIED = "engine_died"
DEFAULT_INTERVAL_S = 1.0


class EngineWatch:
    """Polls each READY model's engine health and handles a death once per model.

    Args:
        runtime: the models and their health.
        on_death: called with the model's name after its death is recorded.
        interval_s: seconds between checks.
    """

    def __init__(
        self, runtime: Runtime, on_death: Callable[[str], None], interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self._runtime = runtime
        self._on_death = on_death
        self._interval = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> EngineWatch:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="engine-watch")
            self._runtime.engine_died = self.confirm_death
        return self

    async def stop(self) -> None:
        """Stop watching (before engines are shut down on purpose)."""
        if self._runtime.engine_died == self.confirm_death:
            self._runtime.engine_died = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while not self._runtime.draining:
            for entry in list(self._runtime.models.values()):
                if entry.state is ModelState.READY and entry.engine is not None:
                    await self.check(entry)
            await asyncio.sleep(self._interval)

    async def check(self, entry: ModelEntry) -> bool:
        """Check one model's engine; record its death if it is dead. True if healthy."""
        assert entry.engine is not None
        try:
            await entry.engine.check_health()
        except EngineError as exc:
            if entry.state is not ModelState.READY or self._runtime.draining:
                return False
            await self._died(entry, type(exc.__cause__ or exc).__name__)
            return False
        return True

    async def confirm_death(self, model: str) -> None:
        """A call found ``model``'s engine dead: record the death now (as a failed check
        would), so that the state, health and GetModel say so before that call is answered,
        not only at the next poll. Nothing happens for a model already not READY, or while
        draining."""
        entry = self._runtime.models.get(model)
        if entry is None or entry.state is not ModelState.READY or self._runtime.draining:
            return
        await self._died(entry, "EngineDeadError")

    async def _died(self, entry: ModelEntry, cause: str) -> None:
        rt = self._runtime
        log.warning("engine_died", model=entry.name, cause=cause, action="drain and exit for a restart")
        await rt.mark(
            entry,
            ModelState.FAILED,
            "the model's engine died; the server is stopping so that it can be restarted",
            ENGINE_DIED,
            f"engine check failed: {cause}",
        )
        await rt.audit_event(
            EventType.MODEL_UNLOADED,
            "UNAVAILABLE",
            model=entry.name,
            manifest_digest=entry.manifest_digest or None,
            reason=ENGINE_DIED,
        )
        if not rt.ready_engines():
            await rt.set_serving(False)
        self._on_death(entry.name)
