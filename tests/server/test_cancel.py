"""Client cancel, deadlines and Abort stop the engine request at once."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from tests.conftest import TINY
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2, server_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")


def long_request(request_id: str = "") -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(
        model=TINY,
        prompt="count forever",
        request_id=request_id,
        sampling_params=sampling_pb2.SamplingParams(temperature=0.0, max_tokens=2000, ignore_eos=True),
    )


async def running_back_to_zero(api, within: float = 1.0) -> float:
    """Seconds until GetLoad().running is 0; fails if it takes longer than ``within``."""
    start = time.monotonic()
    while True:
        load = await api.server.GetLoad(server_pb2.GetLoadRequest())
        elapsed = time.monotonic() - start
        if load.running == 0 and load.waiting == 0:
            return elapsed
        assert elapsed < within, f"engine still running {load.running} request(s) after {elapsed:.2f}s"
        await asyncio.sleep(0.02)


async def test_cancel_after_two_tokens_frees_the_engine(api):
    call = api.inference.GenerateStream(long_request())
    received = 0
    async for msg in call:
        received += len(msg.token_ids)
        if received >= 2:
            break
    load = await api.server.GetLoad(server_pb2.GetLoadRequest())
    assert load.running == 1
    call.cancel()
    await running_back_to_zero(api, within=1.0)
    assert call.cancelled()


async def test_deadline_aborts_the_engine_request(api):
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in api.inference.GenerateStream(long_request(), timeout=0.3):
            pass
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 1.5
    await running_back_to_zero(api, within=1.0)


async def test_unary_deadline_aborts_too(api):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(long_request(), timeout=0.3)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await running_back_to_zero(api, within=1.0)


async def test_abort_unknown_id_is_ok(api):
    reply = await api.inference.Abort(inference_pb2.AbortRequest(request_id="never-started"))
    assert reply.aborted is False


async def test_abort_running_request_ends_its_stream(api):
    call = api.inference.GenerateStream(long_request("abort-me"))
    first = await call.read()
    assert first.request_id == "abort-me"
    reply = await api.inference.Abort(inference_pb2.AbortRequest(request_id="abort-me"))
    assert reply.aborted is True
    last = None
    while (msg := await call.read()) is not grpc.aio.EOF:
        last = msg
    assert last is None or last.finish_reason in (
        common_pb2.FINISH_REASON_CANCELLED,
        common_pb2.FINISH_REASON_UNSPECIFIED,
    )
    await running_back_to_zero(api, within=1.0)
    again = await api.inference.Abort(inference_pb2.AbortRequest(request_id="abort-me"))
    assert again.aborted is False


async def test_duplicate_running_request_id_is_refused(api):
    call = api.inference.GenerateStream(long_request("dup-id"))
    await call.read()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(long_request("dup-id"))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    call.cancel()
    await running_back_to_zero(api)
