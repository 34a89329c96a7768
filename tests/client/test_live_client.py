"""The Python client against the REAL server (``live_server`` from tests/conftest.py: the
embedded default models on the vLLM CPU engine, one per test session).

The server runs on the session's event loop, so these tests use the asyncio client directly
and run the blocking client and the CLI in worker threads.
"""

from __future__ import annotations

import asyncio
import math
import re
import time

import pytest

from xinserve.v1 import common_pb2, model_pb2
from xinserve_client import (
    AsyncXinserveClient,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    XinserveClient,
    cli,
    cosine_similarity,
)

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.engine]

TINY = "xinserve-tiny-llama"
MINILM = "all-MiniLM-L6-v2"
LONG = {"temperature": 0.0, "max_tokens": 2000, "ignore_eos": True}


@pytest.fixture
async def client(live_server):
    async with AsyncXinserveClient(live_server.target) as c:
        yield c


async def engine_idle_within(client: AsyncXinserveClient, within: float = 1.0) -> float:
    """Seconds until GetLoad() shows nothing running or waiting; fails after ``within``."""
    start = time.monotonic()
    while True:
        load = await client.load()
        elapsed = time.monotonic() - start
        if load.running == 0 and load.waiting == 0:
            return elapsed
        assert elapsed < within, f"engine still running {load.running} request(s) after {elapsed:.2f}s"
        await asyncio.sleep(0.02)


async def test_generate_greedy_is_deterministic(client):
    first = await client.generate(TINY, "The quick brown fox", temperature=0.0, max_tokens=12)
    second = await client.generate(TINY, "The quick brown fox", temperature=0.0, max_tokens=12)
    out = first.outputs[0]
    assert 0 < len(out.token_ids) <= 12
    assert list(out.token_ids) == list(second.outputs[0].token_ids)
    assert out.finish_reason in (common_pb2.FINISH_REASON_LENGTH, common_pb2.FINISH_REASON_STOP)
    assert first.usage.completion_tokens == len(out.token_ids) and first.usage.prompt_tokens > 0
    assert re.fullmatch(r"[0-9a-f]{32}", first.request_id)  # the client's generated x-request-id


async def test_stream_matches_unary_and_request_id_echoed(client):
    unary = await client.generate(TINY, "Once upon a time", temperature=0.0, max_tokens=16)
    async with client.generate_stream(
        TINY, "Once upon a time", temperature=0.0, max_tokens=16, request_id="live-stream-1"
    ) as stream:
        deltas = [d async for d in stream]
    assert [t for d in deltas for t in d.token_ids] == list(unary.outputs[0].token_ids)
    assert "".join(d.text for d in deltas) == unary.outputs[0].text
    assert {d.request_id for d in deltas} == {"live-stream-1"}
    assert deltas[-1].HasField("usage") and not any(d.HasField("usage") for d in deltas[:-1])
    assert sum(d.finish_reason != common_pb2.FINISH_REASON_UNSPECIFIED for d in deltas) == 1


async def test_stream_aclose_cancels_and_frees_the_engine(client):
    stream = client.generate_stream(TINY, "count forever", **LONG)
    received = 0
    async for delta in stream:
        received += len(delta.token_ids)
        if received >= 2:
            break
    assert (await client.load()).running == 1
    await stream.aclose()
    await engine_idle_within(client, 1.0)


async def test_leaving_async_with_cancels_chat_stream(client):
    async with client.chat_stream(TINY, [("user", "talk forever")], **LONG) as stream:
        await stream.__anext__()
        await stream.__anext__()
    await engine_idle_within(client, 1.0)


async def test_deadline_raises_and_frees_the_engine(client):
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        async for _ in client.generate_stream(TINY, "count forever", timeout=0.3, **LONG):
            pass
    assert time.monotonic() - started < 1.5
    await engine_idle_within(client, 1.0)


async def test_abort_by_request_id(client):
    stream = client.generate_stream(TINY, "count forever", request_id="live-abort-1", **LONG)
    await stream.__anext__()
    assert await client.abort("live-abort-1") is True
    async for _ in stream:  # the stream ends (finish_reason cancelled) or errors CANCELLED
        pass
    await engine_idle_within(client, 1.0)
    assert await client.abort("no-such-request") is False


async def test_embed_similarity(client):
    texts = ["A cat sits on the mat.", "A kitten is sitting on a rug.", "Quarterly revenue grew by eight percent."]
    reply = await client.embed(MINILM, texts)
    vectors = [list(e.values) for e in reply.embeddings]
    assert [e.index for e in reply.embeddings] == [0, 1, 2]
    assert all(len(v) == 384 for v in vectors)
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, abs_tol=1e-4) for v in vectors)
    assert cosine_similarity(vectors[0], vectors[1]) > cosine_similarity(vectors[0], vectors[2]) + 0.2
    assert reply.usage.prompt_tokens > 0


async def test_chat_and_chat_stream(client):
    messages = [("system", "You are terse."), ("user", "Say hello.")]
    reply = await client.chat(TINY, messages, temperature=0.0, max_tokens=10)
    assert len(reply.outputs) == 1 and 0 < len(reply.outputs[0].token_ids) <= 10
    async with client.chat_stream(TINY, messages, temperature=0.0, max_tokens=10) as stream:
        deltas = [d async for d in stream]
    assert [t for d in deltas for t in d.token_ids] == list(reply.outputs[0].token_ids)


async def test_tokenize_detokenize_round_trip(client):
    text = "Hello, xinserve! 你好"
    tokens = await client.tokenize(TINY, text, add_special_tokens=False)
    assert len(tokens.token_ids) > 0 and tokens.max_model_len > 0
    assert await client.detokenize(TINY, tokens.token_ids) == text


async def test_unknown_model_is_not_found(client):
    with pytest.raises(NotFoundError) as info:
        await client.generate("no-such-model", "hi", max_tokens=2)
    assert info.value.request_id
    with pytest.raises(NotFoundError):
        await client.embed("no-such-model", "hi")
    with pytest.raises(NotFoundError):
        await client.get_model("no-such-model")


@pytest.mark.parametrize("temperature", [-1.0, float("nan")])
async def test_bad_temperature_names_the_field(client, temperature):
    with pytest.raises(InvalidArgumentError) as info:
        await client.generate(TINY, "hi", temperature=temperature, max_tokens=2, request_id="live-bad-1")
    fields = [f for f, _ in info.value.field_violations]
    assert "sampling_params.temperature" in fields
    assert "sampling_params.temperature" in str(info.value)
    assert info.value.request_id == "live-bad-1"


async def test_all_violations_at_once(client):
    with pytest.raises(InvalidArgumentError) as info:
        await client.generate(TINY, "hi", temperature=-1.0, top_p=1.5, n=0)
    fields = {f for f, _ in info.value.field_violations}
    assert {"sampling_params.temperature", "sampling_params.top_p", "sampling_params.n"} <= fields


async def test_models_server_info_health(client):
    models = {m.name: m for m in await client.list_models()}
    assert models[TINY].kind == model_pb2.MODEL_KIND_GENERATE
    assert models[MINILM].kind == model_pb2.MODEL_KIND_EMBED
    assert all(m.state == model_pb2.MODEL_STATE_READY for m in models.values())
    assert (await client.get_model(MINILM)).name == MINILM
    info = await client.check_compatibility()
    assert info.server_version and info.schema_revision >= 1
    assert await client.health() == "SERVING"
    assert await client.health("xinserve.v1.InferenceService") == "SERVING"


async def test_blocking_client_in_a_thread(live_server, client):
    def work() -> tuple[str, int]:
        with XinserveClient(live_server.target) as sync_client:
            reply = sync_client.generate(TINY, "Hello", temperature=0.0, max_tokens=4)
            stream = sync_client.generate_stream(TINY, "count forever", **LONG)
            next(stream)
            next(stream)
            stream.close()
            return reply.outputs[0].text, len(list(stream))

    text, after_close = await asyncio.to_thread(work)
    assert isinstance(text, str) and after_close == 0
    await engine_idle_within(client, 1.0)


async def test_cli_against_the_live_server(live_server, capfd):
    # The CLI's default model is the default server's chat model; this server serves the tiny Llama.
    argv = ["generate", "--target", live_server.target, "-m", TINY, "Hello", "--max-tokens", "5", "--temperature", "0"]
    assert await asyncio.to_thread(cli.main, argv) == 0
    argv = ["embed", "--target", live_server.target, "a cat", "a kitten"]
    assert await asyncio.to_thread(cli.main, argv) == 0
    code = await asyncio.to_thread(cli.main, ["models", "--target", live_server.target])
    out, _ = capfd.readouterr()
    assert code == 0 and TINY in out and MINILM in out
    bad = ["generate", "--target", live_server.target, "-m", TINY, "x", "--temperature", "-1"]
    assert await asyncio.to_thread(cli.main, bad) == 2
    _, err = capfd.readouterr()
    assert "INVALID_ARGUMENT" in err and "sampling_params.temperature" in err
