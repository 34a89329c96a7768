"""Limits on the engine work one request can buy (``limits.max_structured_choices``,
``max_structured_output_bytes``, ``max_structured_output_depth``, ``max_token_ids``,
``max_logit_bias``, ``max_tokenize_bytes``): the same refusal on gRPC (INVALID_ARGUMENT with
ErrorInfo and the field in BadRequest) and on the OpenAI front end (400 naming the OpenAI
``param``), one past each limit; a request at the limit is served. Fake engines: the refusal
comes before any engine work."""

from __future__ import annotations

import json
from typing import Any

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2

from engine_backends.protocol import ModelInfo
from service.frontends.grpc.server import Frontend
from service.lifecycle.wiring import shared_core
from service.operations.validation import Violations, nesting_depth, sampling_options
from service.settings.config import LimitsSettings
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines
from tests.server.stubs import detail_of, field_violations, stubs
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

LIMITS = {
    "max_structured_choices": 3,
    "max_structured_output_bytes": 1024,
    "max_structured_output_depth": 3,
    "max_token_ids": 5,
    "max_logit_bias": 4,
    "max_tokenize_bytes": 1024,
}


def _schema(size: int) -> str:
    """A JSON Schema of exactly ``size`` bytes, nested 1 level."""
    head, tail = '{"type": "string", "description": "', '"}'
    return head + "d" * (size - len(head) - len(tail)) + tail


def _nested_schema(depth: int) -> str:
    text = '{"type": "string"}'
    for _ in range(depth - 1):
        text = '{"type": "array", "items": ' + text + "}"
    return text


def _format(depth: int) -> dict[str, Any]:
    """Chat's ``response_format`` with a JSON Schema nested ``depth`` levels."""
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": json.loads(_nested_schema(depth))}}


def _sp(**fields: Any) -> sampling_pb2.SamplingParams:
    return sampling_pb2.SamplingParams(max_tokens=1, **fields)


# (name, gRPC method, request at the limit, request past it, gRPC field,
#  HTTP path, body at the limit, body past it, OpenAI param)
CASES: list[tuple[str, str, Any, Any, str, str, dict, dict, str]] = [
    (
        "choices",
        "Generate",
        inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=_sp(choice=sampling_pb2.ChoiceList(choices=["a", "b", "c"]))
        ),
        inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=_sp(choice=sampling_pb2.ChoiceList(choices=["a", "b", "c", "d"]))
        ),
        "sampling_params.choice.choices",
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 1, "choice": ["a", "b", "c"]},
        {"prompt": "hi", "max_tokens": 1, "choice": ["a", "b", "c", "d"]},
        "choice",
    ),
    (
        "choice bytes",
        "Generate",
        inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=_sp(choice=sampling_pb2.ChoiceList(choices=["a" * 512, "b" * 512]))
        ),
        inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=_sp(choice=sampling_pb2.ChoiceList(choices=["a" * 512, "b" * 513]))
        ),
        "sampling_params.choice.choices",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "choice": ["a" * 512, "b" * 512]},
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "choice": ["a" * 512, "b" * 513]},
        "choice",
    ),
    (
        "schema bytes",
        "Generate",
        inference_pb2.GenerateRequest(model="m", prompt="hi", sampling_params=_sp(json_schema=_schema(1024))),
        inference_pb2.GenerateRequest(model="m", prompt="hi", sampling_params=_sp(json_schema=_schema(1025))),
        "sampling_params.json_schema",
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 1, "json_schema": _schema(1024)},
        {"prompt": "hi", "max_tokens": 1, "json_schema": _schema(1025)},
        "json_schema",
    ),
    (
        "schema depth",
        "Chat",
        inference_pb2.ChatRequest(
            model="m",
            messages=[common_pb2.ChatMessage(role="user", content="hi")],
            sampling_params=_sp(json_schema=_nested_schema(3)),
        ),
        inference_pb2.ChatRequest(
            model="m",
            messages=[common_pb2.ChatMessage(role="user", content="hi")],
            sampling_params=_sp(json_schema=_nested_schema(4)),
        ),
        "sampling_params.json_schema",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "response_format": _format(3)},
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "response_format": _format(4)},
        "response_format",
    ),
    (
        "regex depth",
        "Generate",
        inference_pb2.GenerateRequest(model="m", prompt="hi", sampling_params=_sp(regex="(((a)))[((((]")),
        inference_pb2.GenerateRequest(model="m", prompt="hi", sampling_params=_sp(regex="((((a))))")),
        "sampling_params.regex",
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 1, "regex": r"(((a)))\(\(\("},
        {"prompt": "hi", "max_tokens": 1, "regex": "((((a))))"},
        "regex",
    ),
    (
        "grammar depth",
        "Generate",
        inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=_sp(grammar='root ::= ((("a" | "((((")))')
        ),
        inference_pb2.GenerateRequest(model="m", prompt="hi", sampling_params=_sp(grammar='root ::= (((("a"))))')),
        "sampling_params.grammar",
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 1, "grammar": 'root ::= [(("a"))]'},
        {"prompt": "hi", "max_tokens": 1, "grammar": 'root ::= [((("a")))]'},
        "grammar",
    ),
    (
        "prompt token ids",
        "Generate",
        inference_pb2.GenerateRequest(model="m", prompt_token_ids=[1, 2, 3, 4, 5], sampling_params=_sp()),
        inference_pb2.GenerateRequest(model="m", prompt_token_ids=[1, 2, 3, 4, 5, 6], sampling_params=_sp()),
        "prompt_token_ids",
        "/v1/completions",
        {"prompt": [1, 2, 3, 4, 5], "max_tokens": 1},
        {"prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 1},
        "prompt",
    ),
    (
        "logit bias",
        "Generate",
        inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=_sp(logit_bias={i: 1.0 for i in range(4)})
        ),
        inference_pb2.GenerateRequest(
            model="m", prompt="hi", sampling_params=_sp(logit_bias={i: 1.0 for i in range(5)})
        ),
        "sampling_params.logit_bias",
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 1, "logit_bias": {str(i): 1.0 for i in range(4)}},
        {"prompt": "hi", "max_tokens": 1, "logit_bias": {str(i): 1.0 for i in range(5)}},
        "logit_bias",
    ),
    (
        "detokenize ids",
        "Detokenize",
        inference_pb2.DetokenizeRequest(model="m", token_ids=[1, 2, 3, 4, 5]),
        inference_pb2.DetokenizeRequest(model="m", token_ids=[1, 2, 3, 4, 5, 6]),
        "token_ids",
        "/detokenize",
        {"tokens": [1, 2, 3, 4, 5]},
        {"tokens": [1, 2, 3, 4, 5, 6]},
        "tokens",
    ),
    (
        "tokenize bytes",
        "Tokenize",
        inference_pb2.TokenizeRequest(model="m", text="é" * 512),
        inference_pb2.TokenizeRequest(model="m", text="é" * 512 + "a"),
        "text",
        "/tokenize",
        {"prompt": "é" * 512},
        {"prompt": "é" * 512 + "a"},
        "prompt",
    ),
]


@pytest.mark.asyncio(loop_scope="session")
async def test_each_limit_is_refused_one_past_it_and_served_at_it_on_both_front_ends(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], {"limits": LIMITS}) as (http_port, runtime):
        frontend = Frontend(*shared_core(runtime, runtime.settings), runtime.settings, "cpu")
        await frontend.start()
        api = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}"))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as http:
                for name, method, ok, past, field, path, ok_body, past_body, param in CASES:
                    call = getattr(api.inference, method)
                    await call(ok)  # served at the limit
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await call(past)
                    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
                    violations = field_violations(err.value)
                    assert list(violations) == [field], (name, violations)
                    assert "limits.max_" in violations[field], name
                    info = detail_of(err.value, error_details_pb2.ErrorInfo)
                    assert (info.reason, info.domain) == ("INVALID_ARGUMENT", "xinserve.io"), name

                    reply = await http.post(path, json={"model": "m", **ok_body})
                    assert reply.status_code == 200, (name, reply.text)
                    reply = await http.post(path, json={"model": "m", **past_body})
                    assert reply.status_code == 400, (name, reply.text)
                    error = reply.json()["error"]
                    assert (error["param"], error["type"]) == (param, "invalid_request_error"), name
                    assert "limits.max_" in error["message"], name
        finally:
            await api.close()
            await frontend.stop(0)


INFO = ModelInfo("m", "generate", 2048, 50_000, "float32", "vllm", "0", "cpu", 20)


def _violations(limits: LimitsSettings, **sampling: Any) -> dict[str, str]:
    v = Violations()
    sampling_options(sampling_pb2.SamplingParams(**sampling), INFO, limits, v)
    return {item.field: item.description for item in v.items}


def test_the_issue_choice_list_is_refused_by_default():
    # 100,000 choices kept vLLM's EngineCore compiling for minutes after the call was cancelled.
    found = _violations(LimitsSettings(), choice=sampling_pb2.ChoiceList(choices=[f"c{i}" for i in range(100_000)]))
    assert "at most 1000 choices" in found["sampling_params.choice.choices"]
    assert _violations(LimitsSettings(), choice=sampling_pb2.ChoiceList(choices=[f"c{i}" for i in range(1000)])) == {}


def test_logit_bias_is_bounded_by_the_smaller_of_limit_and_vocabulary():
    small_vocab = ModelInfo("m", "generate", 2048, 3, "float32", "vllm", "0", "cpu", 20)
    v = Violations()
    sampling_options(
        sampling_pb2.SamplingParams(logit_bias={0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}), small_vocab, LimitsSettings(), v
    )
    assert [item.field for item in v.items] == ["sampling_params.logit_bias"]
    assert "at most 3 entries" in v.items[0].description


@pytest.mark.parametrize(
    ("kind", "text", "depth"),
    [
        ("json_schema", '{"a": [1, {"b": "[[[{{{"}]}', 3),
        ("json_schema", '{"a": "\\"[[["}', 1),
        ("regex", r"(a(b)c)\(\(\([(((]", 2),
        ("regex", r"[\]((]((x))", 2),
        ("grammar", "root ::= ( \"(((\" | [a-z] ( 'x' ) )", 2),
        ("grammar", "root ::= x{2,3}", 1),
        ("regex", ")))(", 1),
    ],
)
def test_nesting_depth_counts_only_structure(kind, text, depth):
    assert nesting_depth(text, kind) == depth


def test_a_deep_schema_is_measured_without_recursion():
    deep = "[" * 200_000 + "]" * 200_000
    assert nesting_depth(deep, "json_schema") == 200_000
    found = _violations(LimitsSettings(max_structured_output_bytes=1024 * 1024), json_schema=deep)
    assert "nests 200000 levels deep" in found["sampling_params.json_schema"]
