"""The asyncio client against the in-process stand-in server (which runs on its own loop)."""

from __future__ import annotations

import asyncio
import re

import grpc
import pytest

from xinserve_client import (
    AsyncXinserveClient,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
)

TINY = "xinserve-tiny-llama"


async def _wait(event, within: float = 5.0) -> bool:
    return await asyncio.to_thread(event.wait, within)


async def _cancelled(stand_in, request_id: str) -> bool:
    return await asyncio.to_thread(stand_in.state.cancelled, request_id)


@pytest.fixture
async def aclient(stand_in):
    async with AsyncXinserveClient(stand_in.target) as c:
        yield c


async def test_generate_and_explicit_zero(aclient, stand_in):
    reply = await aclient.generate(TINY, "abc", temperature=0.0, seed=0)
    assert reply.outputs[0].text == "cba"
    params = stand_in.state.last("Generate").request.sampling_params
    assert params.HasField("temperature") and params.HasField("seed") and params.seed == 0


async def test_metadata_request_id_traceparent_token(stand_in):
    async with AsyncXinserveClient(stand_in.target, token=lambda: "tok") as c:
        await c.generate(TINY, "abc", request_id="a-1", traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        await c.server_info()
    md = stand_in.state.last("Generate").metadata
    assert md["x-request-id"] == "a-1"
    assert md["authorization"] == "Bearer tok"
    assert md["traceparent"].startswith("00-111")


@pytest.mark.parametrize("rid", ["bad id\x01", "x" * 129])
async def test_bad_request_id_is_a_local_value_error(aclient, stand_in, rid):
    n = len(stand_in.state.calls)
    with pytest.raises(ValueError, match=r"request_id must be 1\.\.128 printable ASCII"):
        await aclient.generate(TINY, "x", request_id=rid)
    with pytest.raises(ValueError, match="request_id"):
        async with aclient.generate_stream(TINY, "x", request_id=rid) as stream:
            [d async for d in stream]
    assert len(stand_in.state.calls) == n


async def test_bad_traceparent_and_token_are_local_value_errors(stand_in):
    async with AsyncXinserveClient(stand_in.target, token=lambda: "s3cret\n") as c:
        with pytest.raises(ValueError, match="traceparent must be"):
            await c.generate(TINY, "x", traceparent="00-\x01")
        with pytest.raises(ValueError, match="token must be") as caught:
            await c.generate(TINY, "x")
    assert "s3cret" not in str(caught.value)


async def test_stream_collects_all(aclient):
    async with aclient.generate_stream(TINY, "a b c") as stream:
        texts = [d.text async for d in stream]
    assert "".join(texts) == "a b c"
    assert re.fullmatch(r"[0-9a-f]{32}", stream.request_id)


async def test_break_then_aclose_cancels_server_call(aclient, stand_in):
    stream = aclient.generate_stream(TINY, "forever")
    async for i, _ in _aenumerate(stream):
        if i == 2:
            break
    await stream.aclose()
    assert await _cancelled(stand_in, stream.request_id)
    assert [d async for d in stream] == []


async def test_leaving_async_with_cancels(aclient, stand_in):
    async with aclient.chat_stream(TINY, [("user", "forever")]) as stream:
        await stream.__anext__()
    assert await _cancelled(stand_in, stream.request_id)


async def test_close_from_another_task_ends_iteration(aclient, stand_in):
    stream = aclient.generate_stream(TINY, "forever")
    received = []

    async def consume():
        async for delta in stream:
            received.append(delta)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    stream.close()
    await asyncio.wait_for(task, 5)  # ends without an exception
    assert received
    assert await _cancelled(stand_in, stream.request_id)


def test_a_task_without_a_cancelling_count_is_not_cancelling(monkeypatch):
    """Python 3.10's Task has no ``cancelling()``: a stream closed from another task still
    ends its iteration there instead of raising AttributeError."""
    from xinserve_client import _streams

    monkeypatch.setattr(_streams.asyncio, "current_task", lambda: object())
    assert _streams._task_is_cancelling() is False


async def test_task_cancellation_propagates_and_cancels_rpc(aclient, stand_in):
    async def consume():
        async for _ in aclient.generate_stream(TINY, "forever", request_id="task-cancel-1"):
            pass

    task = asyncio.create_task(consume())
    await _wait(stand_in.state.stream_started)
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _cancelled(stand_in, "task-cancel-1")


async def test_unary_task_cancellation_cancels_rpc(aclient, stand_in):
    task = asyncio.create_task(aclient.generate(TINY, "slow"))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _wait(stand_in.state.unary_cancelled)


async def test_deadline(aclient, stand_in):
    with pytest.raises(DeadlineExceededError):
        await aclient.generate(TINY, "slow", timeout=0.2)
    with pytest.raises(DeadlineExceededError):
        async for _ in aclient.generate_stream(TINY, "forever", timeout=0.2):
            pass


async def test_typed_errors(aclient):
    with pytest.raises(InvalidArgumentError) as info:
        await aclient.chat(TINY, [("user", "x")], temperature=-2.0)
    assert info.value.field_violations == [("sampling_params.temperature", "must be a finite number >= 0")]
    with pytest.raises(NotFoundError) as nf:
        await aclient.embed("missing", ["x"], request_id="r-9")
    assert nf.value.request_id == "r-9" and nf.value.reason == "MODEL_NOT_FOUND"
    with pytest.raises(ResourceExhaustedError) as busy:
        await aclient.generate("busy", "x")
    assert busy.value.retry_after == pytest.approx(2.5)
    with pytest.raises(InvalidArgumentError):
        async for _ in aclient.generate_stream(TINY, "x", top_p=2.0):
            pass


async def test_control_calls(aclient):
    assert len(await aclient.list_models()) == 3
    assert (await aclient.get_model("all-MiniLM-L6-v2")).manifest_digest == "sm3:00ff"
    assert (await aclient.load()).running == 0
    assert await aclient.health() == "SERVING"
    assert await aclient.health("no.such.Service") == "SERVICE_UNKNOWN"
    assert (await aclient.check_compatibility()).min_client_revision == 1
    ids = await aclient.tokenize(TINY, "ok")
    assert await aclient.detokenize(TINY, ids.token_ids) == "ok"
    assert await aclient.abort("running-1") is True


async def test_unreachable_is_unavailable(closed_port_target):
    async with AsyncXinserveClient(closed_port_target) as c:
        with pytest.raises(UnavailableError) as info:
            await c.list_models(timeout=5)
    assert info.value.code is grpc.StatusCode.UNAVAILABLE


async def test_closed_client_refuses_calls(stand_in):
    c = AsyncXinserveClient(stand_in.target)
    await c.close()
    await c.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await c.list_models()


async def _aenumerate(aiterable):
    i = 0
    async for item in aiterable:
        yield i, item
        i += 1
