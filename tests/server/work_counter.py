"""Deterministic measures of the front end's work per call: Python-level function calls made
under the server's own code, and gRPC messages, for a fixed request over a fake engine.

``CallCounter`` counts, with ``sys.setprofile`` on the event loop's thread, every Python
function call (profile event ``call``, which includes each resumption of a generator or
coroutine) and every C function call (``c_call``) made while a frame of the server's code
(``service/``, ``engine_backends/``) is on the stack. Work the event loop does outside the
server's frames (asyncio's scheduling, grpc.aio's Cython callbacks, the audit log's
committer) is not counted: how much of it runs depends on timing, this does not. Nor is work in
asyncio tasks that already ran when counting began (servers that earlier tests left on the
session's event loop, periodic ticks): only the call's own tasks count.

``StreamEngine`` is an ``Engine`` that generates ``tokens`` tokens without vLLM: one update
per token when streaming (as vLLM's DELTA output when the consumer keeps up), one final
update holding all tokens otherwise (vLLM's FINAL_ONLY).

``measure`` runs one GenerateStream or Generate call against a real gRPC front end (with the
audit log on) from a blocking client in another thread, and returns the counts.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from engine_backends.protocol import CompletionChunk, FinishReason, GenerateInput, GenerationUpdate
from tests.server.fake_engine import FakeEngine
from xinserve.v1 import inference_pb2, inference_pb2_grpc, sampling_pb2

REPO = Path(__file__).resolve().parents[2]
SERVER_CODE = (str(REPO / "service") + "/", str(REPO / "engine_backends") + "/")


class StreamEngine(FakeEngine):
    """Generates ``request.sampling.max_tokens`` tokens (id ``100 + i``, text ``"t{i} "``):
    one update per token when streaming, one final update with all of them otherwise."""

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        self._alive()
        n = request.sampling.max_tokens or 1
        rid = request.request_id
        if not request.stream:
            text = "".join([f"t{i} " for i in range(n)])  # a list: no generator resumed per token
            chunk = CompletionChunk(0, text, list(range(100, 100 + n)), FinishReason.LENGTH)
            yield GenerationUpdate(rid, [chunk], 3, 0, True)
            return
        for i in range(n):
            last = i == n - 1
            chunk = CompletionChunk(0, f"t{i} ", [100 + i], FinishReason.LENGTH if last else None)
            yield GenerationUpdate(rid, [chunk], 3, 0, last)


class CallCounter:
    """Counts calls made under the server's code on the thread that runs ``counting()``."""

    def __init__(self, roots: tuple[str, ...] = SERVER_CODE) -> None:
        self._roots = roots
        self._ours: dict[Any, bool] = {}
        self._earlier_tasks: set[asyncio.Task[Any]] = set()
        self.calls = 0
        self.by_function: Counter[str] = Counter()

    def _is_ours(self, code: Any) -> bool:
        hit = self._ours.get(code)
        if hit is None:
            hit = self._ours[code] = code.co_filename.startswith(self._roots)
        return hit

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" and event != "c_call":
            return
        f = frame
        while f is not None:
            if self._is_ours(f.f_code):
                break
            f = f.f_back
        else:
            return
        task = asyncio.current_task()
        if task is None or task in self._earlier_tasks:
            return
        self.calls += 1
        if event == "call":
            code = frame.f_code
            name = f"{Path(code.co_filename).name}:{code.co_name}"
        else:
            name = f"C {getattr(arg, '__qualname__', None) or getattr(arg, '__name__', '?')}"
        self.by_function[name] += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        self._earlier_tasks = asyncio.all_tasks()
        previous = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(previous)


@dataclass
class Measured:
    tokens: int
    messages: int
    calls: int
    by_function: Counter[str]
    text: str
    token_ids: list[int]


@asynccontextmanager
async def fake_server(tmp_path: Path, engine: FakeEngine | None = None) -> AsyncIterator[str]:
    """A gRPC front end with the audit log on (SQLite under ``tmp_path``) over ``engine``
    (default: a ``StreamEngine``) named ``m``; yields its HOST:PORT."""
    from service.frontends.grpc.server import Frontend
    from service.lifecycle.server import open_audit
    from service.lifecycle.wiring import shared_core
    from service.runtime.state import ModelEntry, ModelState, Runtime
    from service.settings.config import load_settings

    settings = load_settings(
        overrides={"data_dir": str(tmp_path), "listen": {"plaintext": ["127.0.0.1:0"]}, "metrics_listen": None}
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    try:
        await frontend.start()
        engine = engine or StreamEngine("m")
        await engine.start()
        runtime.add_model(ModelEntry("m", "generate", tmp_path, engine, manifest_digest="sm3:" + "ab" * 32))
        await runtime.mark(runtime.models["m"], ModelState.READY)
        await runtime.set_serving(True)
        yield f"127.0.0.1:{next(iter(frontend.ports.values()))}"
    finally:
        await frontend.stop(0)
        await runtime.audit.close()


def _client_call(target: str, stream: bool, tokens: int) -> tuple[int, str, list[int]]:
    """One call from a blocking client: (messages received, text, token ids)."""
    with grpc.insecure_channel(target) as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        req = inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=sampling_pb2.SamplingParams(max_tokens=tokens)
        )
        if stream:
            msgs = list(stub.GenerateStream(req, timeout=120))
            return len(msgs), "".join(m.text for m in msgs), [t for m in msgs for t in m.token_ids]
        reply = stub.Generate(req, timeout=120)
        return 1, reply.outputs[0].text, list(reply.outputs[0].token_ids)


async def measure(target: str, *, stream: bool, tokens: int) -> Measured:
    """One call of ``tokens`` tokens, its server-side calls counted on this event loop."""
    counter = CallCounter()
    result: dict[str, Any] = {}
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def client() -> None:
        try:
            result["value"] = _client_call(target, stream, tokens)
        except BaseException as exc:  # handed to the awaiting test
            result["error"] = exc
        finally:
            loop.call_soon_threadsafe(done.set)

    thread = threading.Thread(target=client, daemon=True)
    with counter.counting():
        thread.start()
        try:
            await asyncio.wait_for(done.wait(), 120)
        finally:
            thread.join(120)
    if "error" in result:
        raise result["error"]
    messages, text, ids = result["value"]
    return Measured(len(ids), messages, counter.calls, counter.by_function, text, ids)
