"""``Tokenize`` and ``Detokenize`` pass admission as the other inference calls do: one holds
an admission slot while its tokenizer work runs, and past ``max_in_flight`` and
``max_queue`` they (and Generate) are refused RESOURCE_EXHAUSTED with RetryInfo. ``Abort``
and ``ListModels`` stay outside admission."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc
import pytest
from google.rpc import error_details_pb2

from service.frontends.grpc.server import Frontend
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.fake_engine import FakeEngine
from tests.server.stubs import detail_of, stubs
from xinserve.v1 import inference_pb2, model_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")


class BlockingTokenizer(FakeEngine):
    """Tokenize and Detokenize wait for ``release`` (set: they answer at once)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.release = asyncio.Event()
        self.release.set()

    async def tokenize(self, text: str, add_special_tokens: bool) -> list[int]:
        await self.release.wait()
        return await super().tokenize(text, add_special_tokens)

    async def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool) -> str:
        await self.release.wait()
        return await super().detokenize(token_ids, skip_special_tokens)


@pytest.fixture
async def server(tmp_path):
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "admission": {"max_in_flight": 1, "max_queue": 0},
        }
    )
    runtime = Runtime(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    engine = BlockingTokenizer("m")
    api = None
    try:
        await frontend.start()
        await engine.start()
        runtime.add_model(ModelEntry("m", "generate", tmp_path, engine))
        await runtime.mark(runtime.models["m"], ModelState.READY)
        await runtime.set_serving(True)
        api = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}"))
        yield api, runtime, engine
    finally:
        engine.release.set()
        if api is not None:
            await api.close()
        await frontend.stop(0)


async def _until(predicate, what: str, limit_s: float = 60.0) -> None:
    """Wait for ``predicate()`` (a generous limit: it is a condition, not a speed check)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + limit_s
    while not predicate():
        assert loop.time() < until, f"never happened: {what}"
        await asyncio.sleep(0.01)


def _refused_busy(err: grpc.aio.AioRpcError) -> None:
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (err.code(), err.details())
    retry = detail_of(err, error_details_pb2.RetryInfo)
    assert retry is not None and retry.retry_delay.ToNanoseconds() > 0


TOKENIZE = inference_pb2.TokenizeRequest(model="m", text="hello")
DETOKENIZE = inference_pb2.DetokenizeRequest(model="m", token_ids=[1, 2, 3])


@ASYNC
@pytest.mark.parametrize("holder", ["Tokenize", "Detokenize"])
async def test_tokenizer_calls_hold_and_need_an_admission_slot(server, holder):
    api, runtime, engine = server
    engine.release.clear()
    request = TOKENIZE if holder == "Tokenize" else DETOKENIZE
    held = asyncio.ensure_future(getattr(api.inference, holder)(request))
    try:
        await _until(lambda: runtime.admission.in_flight == 1 or held.done(), f"{holder} admitted")
        assert not held.done(), "the blocked call ended without holding a slot"
        assert runtime.admission.in_flight == 1
        for refused in (
            api.inference.Tokenize(TOKENIZE),
            api.inference.Detokenize(DETOKENIZE),
            api.inference.Generate(inference_pb2.GenerateRequest(model="m", prompt="hi")),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await refused
            _refused_busy(caught.value)
        # Outside admission: still answered while every slot is taken.
        assert (await api.inference.Abort(inference_pb2.AbortRequest(request_id="none"))).aborted is False
        listed = await api.models.ListModels(model_pb2.ListModelsRequest())
        assert [m.name for m in listed.models] == ["m"]
    finally:
        engine.release.set()
    reply = await held
    assert (list(reply.token_ids) if holder == "Tokenize" else reply.text) in ([1] * 5, "xxx")
    await _until(lambda: runtime.admission.in_flight == 0, "slot released")
    assert list((await api.inference.Tokenize(TOKENIZE)).token_ids) == [1] * 5


@ASYNC
async def test_tokenize_is_refused_while_draining(server):
    api, runtime, _ = server
    await runtime.start_drain()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.inference.Tokenize(TOKENIZE)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert detail_of(caught.value, error_details_pb2.ErrorInfo).reason == "DRAINING"
