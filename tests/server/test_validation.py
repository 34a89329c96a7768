"""Bad input gets INVALID_ARGUMENT naming each field; other client mistakes get their own codes."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.rpc import error_details_pb2

from tests.conftest import MINILM, TINY
from tests.server.frontends import extra_frontend
from tests.server.stubs import detail_of, field_violations, stubs
from xinserve.v1 import common_pb2, inference_pb2, model_pb2, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def invalid(api, request, method="Generate", metadata=()) -> dict[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await getattr(api.inference, method)(request, metadata=metadata)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    info = detail_of(err.value, error_details_pb2.ErrorInfo)
    assert info is not None and info.domain == "xinserve.io"
    return field_violations(err.value)


def gen(**sampling) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(
        model=TINY, prompt="hi", sampling_params=sampling_pb2.SamplingParams(**sampling)
    )


@pytest.mark.parametrize(
    ("sampling", "field"),
    [
        ({"temperature": float("nan")}, "sampling_params.temperature"),
        ({"temperature": -0.5}, "sampling_params.temperature"),
        ({"temperature": float("inf")}, "sampling_params.temperature"),
        ({"top_p": 1.5}, "sampling_params.top_p"),
        ({"top_p": 0.0}, "sampling_params.top_p"),
        ({"n": 0}, "sampling_params.n"),
        ({"n": 10_000}, "sampling_params.n"),
        ({"max_tokens": -1}, "sampling_params.max_tokens"),
        ({"max_tokens": 0}, "sampling_params.max_tokens"),
        ({"min_tokens": 5, "max_tokens": 2}, "sampling_params.min_tokens"),
        ({"top_k": -5}, "sampling_params.top_k"),
        ({"min_p": 2.0}, "sampling_params.min_p"),
        ({"presence_penalty": 3.0}, "sampling_params.presence_penalty"),
        ({"repetition_penalty": 0.0}, "sampling_params.repetition_penalty"),
        ({"seed": -1}, "sampling_params.seed"),
        ({"logprobs": 10_000}, "sampling_params.logprobs"),
        ({"stop_token_ids": [999_999]}, "sampling_params.stop_token_ids[0]"),
        ({"stop": ["ok", ""]}, "sampling_params.stop[1]"),
        ({"regex": ""}, "sampling_params.regex"),
    ],
)
async def test_bad_sampling_parameter_names_the_field(api, sampling, field):
    assert field in await invalid(api, gen(**sampling))


async def test_ten_thousand_stop_strings(api):
    violations = await invalid(api, gen(stop=[f"s{i}" for i in range(10_000)]))
    assert "sampling_params.stop" in violations


async def test_all_violations_reported_at_once(api):
    violations = await invalid(api, gen(temperature=float("nan"), top_p=2.0, n=0, max_tokens=-3))
    assert {
        "sampling_params.temperature",
        "sampling_params.top_p",
        "sampling_params.n",
        "sampling_params.max_tokens",
    } <= set(violations)


async def test_empty_model_name(api):
    violations = await invalid(api, inference_pb2.GenerateRequest(model="", prompt="hi"))
    assert "model" in violations


async def test_prompt_longer_than_the_context(api):
    violations = await invalid(api, inference_pb2.GenerateRequest(model=TINY, prompt="hello world " * 3000))
    assert "prompt" in violations
    assert "2048" in violations["prompt"]


async def test_prompt_plus_max_tokens_beyond_context(api):
    violations = await invalid(
        api,
        inference_pb2.GenerateRequest(
            model=TINY, prompt="hello", sampling_params=sampling_pb2.SamplingParams(max_tokens=2047)
        ),
    )
    assert "sampling_params.max_tokens" in violations


async def test_prompt_and_token_ids_both_or_neither(api):
    assert "prompt" in await invalid(api, inference_pb2.GenerateRequest(model=TINY))
    assert "prompt" in await invalid(api, inference_pb2.GenerateRequest(model=TINY, prompt="a", prompt_token_ids=[5]))


async def test_token_ids_outside_vocabulary(api):
    violations = await invalid(api, inference_pb2.GenerateRequest(model=TINY, prompt_token_ids=[1, 10**6]))
    assert "prompt_token_ids[1]" in violations


async def test_stream_reports_the_same_errors(api):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in api.inference.GenerateStream(gen(top_p=3.0)):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sampling_params.top_p" in field_violations(err.value)


async def test_bad_request_id(api):
    violations = await invalid(api, inference_pb2.GenerateRequest(model=TINY, prompt="x", request_id="has space"))
    assert "request_id" in violations


async def test_bad_request_id_in_metadata_is_refused_not_replaced(api):
    # Before the fix a bad x-request-id was silently swapped for a generated one, so the
    # caller's logs and the server's audit record no longer matched.
    request = inference_pb2.GenerateRequest(model=TINY, prompt="x")
    violations = await invalid(api, request, metadata=(("x-request-id", "x" * 129),))
    assert set(violations) == {"x-request-id"}
    embed = inference_pb2.EmbedRequest(model=MINILM, inputs=["x"])
    assert "x-request-id" in await invalid(api, embed, "Embed", metadata=(("x-request-id", "has space"),))


async def test_chat_bad_role_and_empty(api):
    assert "messages" in await invalid(api, inference_pb2.ChatRequest(model=TINY), "Chat")
    violations = await invalid(
        api,
        inference_pb2.ChatRequest(model=TINY, messages=[common_pb2.ChatMessage(role="wizard", content="x")]),
        "Chat",
    )
    assert "messages[0].role" in violations


async def test_embed_input_checks(api):
    assert "inputs" in await invalid(api, inference_pb2.EmbedRequest(model=MINILM), "Embed")
    assert "inputs[1]" in await invalid(api, inference_pb2.EmbedRequest(model=MINILM, inputs=["a", ""]), "Embed")
    assert "inputs[0]" in await invalid(api, inference_pb2.EmbedRequest(model=MINILM, inputs=["word " * 2000]), "Embed")


async def test_unknown_model_is_not_found(api):
    for call in (
        api.inference.Generate(inference_pb2.GenerateRequest(model="no-such-model", prompt="x")),
        api.inference.Embed(inference_pb2.EmbedRequest(model="no-such-model", inputs=["x"])),
        api.models.GetModel(model_pb2.GetModelRequest(name="no-such-model")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_unknown_lora_is_not_found(api):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(
            inference_pb2.GenerateRequest(
                model=TINY, prompt="x", sampling_params=sampling_pb2.SamplingParams(lora_name="nope")
            )
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_full_queue_is_resource_exhausted_with_retry_info(live_server):
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "admission": {"max_in_flight": 1, "max_queue": 1}}
    async with extra_frontend(live_server, overrides) as (_, runtime, port):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        api = stubs(channel)
        long = inference_pb2.GenerateRequest(
            model=TINY, prompt="x", sampling_params=sampling_pb2.SamplingParams(max_tokens=1500, ignore_eos=True)
        )
        running = api.inference.GenerateStream(long)
        await running.read()  # admitted and producing
        queued = asyncio.ensure_future(api.inference.Generate(long))
        while runtime.admission.queued < 1:  # noqa: ASYNC110 (polls the server's counter)
            await asyncio.sleep(0.01)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await api.inference.Generate(long)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        retry = detail_of(err.value, error_details_pb2.RetryInfo)
        assert retry is not None and retry.retry_delay.ToMilliseconds() > 0
        running.cancel()
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        await api.close()


async def test_malformed_message_is_invalid_argument_and_audited(live_server):
    from audit import QueryFilter

    since = int(time.time() * 1000) - 1000
    async with grpc.aio.insecure_channel(live_server.target) as channel:
        # field 1 (model) with bytes that are not UTF-8, then a corrupt wire format
        for raw in (b"\x0a\x03\xff\xfe\xfd", b"\xff\xff\xff\xff\xff"):
            call = channel.unary_unary("/xinserve.v1.InferenceService/Tokenize")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(raw)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request" in field_violations(err.value)
            assert "DecodeError" not in err.value.details() and "Traceback" not in err.value.details()
    rows = await live_server.runtime.audit.log.query(
        QueryFilter(since_ms=since, method="/xinserve.v1.InferenceService/Tokenize", outcome="INVALID_ARGUMENT")
    )
    assert len(rows) >= 2


async def test_huge_prompt_refused_before_tokenizing(api):
    started = time.monotonic()
    violations = await invalid(api, inference_pb2.GenerateRequest(model=TINY, prompt="ab " * (1 << 20)))
    assert "prompt" in violations and "bytes" in violations["prompt"]
    assert time.monotonic() - started < 5
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Tokenize(inference_pb2.TokenizeRequest(model=TINY, text="a" * (3 << 20)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_engine_rejection_carries_no_library_text(api):
    violations = await invalid(api, gen(regex="([a-", max_tokens=4))
    assert "sampling_params.regex" in violations
    text = violations["sampling_params.regex"].lower()
    assert "parse error" not in text and "grammar error" not in text


@pytest.mark.parametrize(
    ("sampling", "field"),
    [
        # vLLM refuses these itself; before, its VLLMValidationError came back as INTERNAL.
        ({"temperature": 2.5}, "sampling_params.temperature"),
        ({"n": 2, "temperature": 0.0}, "sampling_params.n"),
        ({"min_tokens": 100}, "sampling_params.min_tokens"),
    ],
)
async def test_vllm_bounds_are_invalid_argument_naming_the_field(api, sampling, field):
    assert field in await invalid(api, gen(**sampling))


async def test_chat_refuses_prompt_logprobs(api):
    # Before, Chat accepted prompt_logprobs and silently returned none.
    request = inference_pb2.ChatRequest(
        model=TINY,
        messages=[common_pb2.ChatMessage(role="user", content="hi")],
        sampling_params=sampling_pb2.SamplingParams(prompt_logprobs=1, max_tokens=1),
    )
    assert "sampling_params.prompt_logprobs" in await invalid(api, request, "Chat")
