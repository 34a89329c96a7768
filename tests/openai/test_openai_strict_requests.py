"""The OpenAI front end refuses malformed requests the way OpenAI's API does, instead of
converting them: a value of the wrong JSON type (``"n": "2"``, ``"stream": 1``, a string
for ``top_k``) is a 400 ``invalid_request_error`` naming the field and the type it expects;
a body not declared ``application/json`` is a 415; a chat message without ``content`` is a
400 naming ``messages[i].content``; a known path called with another method is a 405 with
``Allow``. What OpenAI accepts still works: an integer for a number, ``null`` for an
optional field, ``application/json`` with parameters, the official ``openai`` SDK.

Every refusal is in OpenAI's error shape, carries the request id, holds no stack trace or
file path, and leaves one audit record. Real uvicorn listener, call core and audit log over
fake engines (``tests.server.fake_http``): no refusal here needs a real model, and the
accepted requests only need an engine that answers.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio

from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records

ASYNC = pytest.mark.asyncio(loop_scope="session")

COMPLETION: dict[str, Any] = {"model": "m", "prompt": "hi", "max_tokens": 1}
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
EMBEDDING: dict[str, Any] = {"model": "e", "input": "hi"}
BASES = {"completions": COMPLETION, "chat/completions": CHAT, "embeddings": EMBEDDING}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(tmp_path_factory):
    """One listener for the module: every case uses its own request id."""
    engines = [FakeEngine("m"), FakeEngine("e", "embed")]
    async with http_over_fake_engines(tmp_path_factory.mktemp("strict"), engines) as (port, runtime):
        yield f"http://127.0.0.1:{port}", runtime


def _refusal(reply: httpx.Response, status: int, request_id: str) -> dict[str, Any]:
    """The OpenAI error object of ``reply``, after checking what every refusal must hold."""
    assert reply.status_code == status, (reply.status_code, reply.text[:500])
    assert reply.headers["x-request-id"] == request_id
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    for leak in ("Traceback", "site-packages", ".py", "/work", "pydantic"):
        assert leak not in reply.text, (leak, reply.text[:500])
    return error


# -- JSON types -----------------------------------------------------------------------------

# (endpoint, fields merged into its base body, param named, words the message must hold)
WRONG_TYPES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "n-string": ("completions", {"n": "2"}, "n", "expected an integer, but got a string"),
    "n-boolean": ("chat/completions", {"n": True}, "n", "expected an integer, but got a boolean"),
    "n-fraction": ("completions", {"n": 1.5}, "n", "expected an integer, but got a number"),
    "max_tokens-string": ("completions", {"max_tokens": "16"}, "max_tokens", "expected an integer"),
    "max_completion_tokens-string": (
        "chat/completions",
        {"max_completion_tokens": "16"},
        "max_completion_tokens",
        "expected an integer, but got a string",
    ),
    "stream-string": ("chat/completions", {"stream": "yes"}, "stream", "expected a boolean, but got a string"),
    "stream-integer": ("completions", {"stream": 1}, "stream", "expected a boolean, but got an integer"),
    "temperature-string": ("chat/completions", {"temperature": "0.5"}, "temperature", "expected a number"),
    "temperature-boolean": (
        "completions",
        {"temperature": True},
        "temperature",
        "expected a number, but got a boolean",
    ),
    "top_p-string": ("completions", {"top_p": "1"}, "top_p", "expected a number, but got a string"),
    "seed-string": ("completions", {"seed": "7"}, "seed", "expected an integer, but got a string"),
    "chat-logprobs-string": ("chat/completions", {"logprobs": "true"}, "logprobs", "expected a boolean"),
    "completion-logprobs-boolean": ("completions", {"logprobs": True}, "logprobs", "expected an integer"),
    "top_logprobs-string": (
        "chat/completions",
        {"logprobs": True, "top_logprobs": "2"},
        "top_logprobs",
        "expected an integer, but got a string",
    ),
    "include_usage-string": (
        "chat/completions",
        {"stream": True, "stream_options": {"include_usage": "true"}},
        "stream_options.include_usage",
        "expected a boolean, but got a string",
    ),
    "stream_options-string": (
        "completions",
        {"stream_options": "usage"},
        "stream_options",
        "expected an object, but got a string",
    ),
    "logit_bias-value": ("completions", {"logit_bias": {"5": "1"}}, "logit_bias.5", "expected a number"),
    "echo-string": ("completions", {"echo": "false"}, "echo", "expected a boolean, but got a string"),
    "json_schema-strict": (
        "chat/completions",
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "true"}}},
        "response_format.json_schema.strict",
        "expected a boolean, but got a string",
    ),
    "prompt-number": (
        "completions",
        {"prompt": 5},
        "prompt",
        "expected a string, an array of strings, an array of integers or an array of arrays of integers, "
        "but got an integer",
    ),
    "prompt-batch-element": (
        "completions",
        {"prompt": ["a", 5, "c"]},
        "prompt[1]",
        "expected a string, but got an integer",
    ),
    "prompt-token-batch-element": (
        "completions",
        {"prompt": [1, "x", 3]},
        "prompt[1]",
        "expected an integer, but got a string",
    ),
    "prompt-token-batches-element": (
        "completions",
        {"prompt": [[1, 2], [3, "y"]]},
        "prompt[1][1]",
        "expected an integer, but got a string",
    ),
    "stop-element": ("completions", {"stop": ["a", 1]}, "stop[1]", "expected a string, but got an integer"),
    "content-number": (
        "chat/completions",
        {"messages": [{"role": "user", "content": 5}]},
        "messages[0].content",
        "expected a string or an array of objects, but got an integer",
    ),
    "content-part-type": (
        "chat/completions",
        {"messages": [{"role": "user", "content": [{"type": 1, "text": "hi"}]}]},
        "messages[0].content[0].type",
        "expected a string, but got an integer",
    ),
    "temperature-huge-integer": (
        "completions",
        {"temperature": 10**400},
        "temperature",
        "is out of range for a number",
    ),
    "dimensions-string": ("embeddings", {"dimensions": "3"}, "dimensions", "expected an integer, but got a string"),
    # vLLM's extra sampling parameters, typed from xinserve.v1.SamplingParams.
    "top_k-string": ("completions", {"top_k": "5"}, "top_k", "expected an integer, but got a string"),
    "top_k-fraction": ("chat/completions", {"top_k": 2.5}, "top_k", "expected an integer, but got a number"),
    "min_p-string": ("completions", {"min_p": "0.1"}, "min_p", "expected a number, but got a string"),
    "ignore_eos-string": ("completions", {"ignore_eos": "true"}, "ignore_eos", "expected a boolean, but got a string"),
    "ignore_eos-integer": ("chat/completions", {"ignore_eos": 1}, "ignore_eos", "expected a boolean"),
    "stop_token_ids-string": ("completions", {"stop_token_ids": "1"}, "stop_token_ids", "expected an array"),
    "stop_token_ids-element": (
        "completions",
        {"stop_token_ids": [1, "2"]},
        "stop_token_ids[1]",
        "expected an integer, but got a string",
    ),
    "stop_token_ids-boolean": (
        "completions",
        {"stop_token_ids": [True]},
        "stop_token_ids[0]",
        "expected an integer, but got a boolean",
    ),
}


@ASYNC
@pytest.mark.parametrize("case", list(WRONG_TYPES))
async def test_a_value_of_the_wrong_json_type_is_a_400_naming_field_and_type(served, case):
    base, runtime = served
    endpoint, fields, param, words = WRONG_TYPES[case]
    request_id = f"type-{case}"
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(
            f"{base}/v1/{endpoint}", json={**BASES[endpoint], **fields}, headers={"x-request-id": request_id}
        )
    error = _refusal(reply, 400, request_id)
    assert error["param"] == param
    assert f"{param}: {words}" in error["message"]
    (record,) = await rpc_records(runtime, request_id)
    assert record.outcome == "INVALID_ARGUMENT"


# What OpenAI accepts keeps working: an integer where a number is expected, null for any
# optional field (vLLM's extras included), and the extras in their own types.
ACCEPTED: dict[str, tuple[str, dict[str, Any]]] = {
    "integer-numbers": (
        "completions",
        {"temperature": 1, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {"5": 1}},
    ),
    "nulls": (
        "completions",
        {
            "n": None,
            "max_tokens": None,
            "stream": None,
            "stream_options": None,
            "temperature": None,
            "seed": None,
            "stop": None,
            "logprobs": None,
            "user": None,
            "echo": None,
            "top_k": None,
            "min_p": None,
            "stop_token_ids": None,
            "ignore_eos": None,
        },
    ),
    "chat-nulls": ("chat/completions", {"logprobs": None, "top_logprobs": None, "response_format": None, "n": None}),
    "extras": (
        "completions",
        {"top_k": 5, "min_p": 0, "repetition_penalty": 1, "stop_token_ids": [1, 2], "ignore_eos": False},
    ),
    "content-parts": (
        "chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
    ),
    "conversation": (
        "chat/completions",
        {
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello", "tool_calls": []},
                {"role": "user", "content": ""},
            ]
        },
    ),
    "embedding-nulls": ("embeddings", {"dimensions": None, "encoding_format": None, "user": None}),
}


@ASYNC
@pytest.mark.parametrize("case", list(ACCEPTED))
async def test_what_openai_accepts_is_still_accepted(served, case):
    base, _ = served
    endpoint, fields = ACCEPTED[case]
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(f"{base}/v1/{endpoint}", json={**BASES[endpoint], **fields})
    assert reply.status_code == 200, reply.text[:500]
    assert reply.json()["object"] in ("text_completion", "chat.completion", "list")


# -- Content-Type -----------------------------------------------------------------------------

REFUSED_MEDIA_TYPES = {
    "text-plain": "text/plain",
    "form": "application/x-www-form-urlencoded",
    "multipart": "multipart/form-data; boundary=x",
    "json-suffix": "application/merge-patch+json",
    "json-prefix": "application/jsonl",
    "no-subtype": "json",
    "empty": "",
    "missing": None,
}


@ASYNC
@pytest.mark.parametrize("case", list(REFUSED_MEDIA_TYPES))
@pytest.mark.parametrize("endpoint", list(BASES))
async def test_a_body_not_declared_json_is_a_415(served, endpoint, case):
    base, runtime = served
    request_id = f"media-{endpoint.replace('/', '-')}-{case}"
    headers = {"x-request-id": request_id}
    if REFUSED_MEDIA_TYPES[case] is not None:
        headers["content-type"] = REFUSED_MEDIA_TYPES[case]
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(f"{base}/v1/{endpoint}", content=json.dumps(BASES[endpoint]).encode(), headers=headers)
    error = _refusal(reply, 415, request_id)
    assert (error["code"], error["param"]) == ("unsupported_media_type", "content-type")
    assert "must be application/json" in error["message"]
    (record,) = await rpc_records(runtime, request_id)
    assert record.outcome == "INVALID_ARGUMENT"


ACCEPTED_MEDIA_TYPES = [
    "application/json; charset=utf-8",
    "Application/JSON",
    "application/json;charset=UTF-8",
    'application/json; charset="utf8"',
]
REFUSED_CHARSETS = {
    "latin-1": "application/json; charset=latin-1",
    "iso-8859-1": "application/json; charset=ISO-8859-1",
    "utf-16": "application/json; charset=utf-16",
    "unknown": "application/json; charset=no-such-charset",
}


@ASYNC
@pytest.mark.parametrize("case", list(REFUSED_CHARSETS))
async def test_a_json_body_in_another_charset_is_a_415_naming_it(served, case):
    base, runtime = served
    request_id = f"charset-{case}"
    headers = {"x-request-id": request_id, "content-type": REFUSED_CHARSETS[case]}
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(f"{base}/v1/chat/completions", content=json.dumps(CHAT).encode(), headers=headers)
    error = _refusal(reply, 415, request_id)
    assert (error["code"], error["param"]) == ("unsupported_media_type", "content-type")
    charset = REFUSED_CHARSETS[case].split("=", 1)[1]
    assert "charset must be utf-8" in error["message"] and repr(charset) in error["message"]
    (record,) = await rpc_records(runtime, request_id)
    assert record.outcome == "INVALID_ARGUMENT"


@ASYNC
@pytest.mark.parametrize("media_type", ACCEPTED_MEDIA_TYPES)
async def test_json_with_parameters_or_in_any_case_is_accepted(served, media_type):
    base, _ = served
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(
            f"{base}/v1/chat/completions", content=json.dumps(CHAT).encode(), headers={"content-type": media_type}
        )
    assert reply.status_code == 200, reply.text[:500]


@ASYNC
async def test_the_official_openai_sdk_is_accepted(served):
    """The SDK sends ``Content-Type: application/json`` and typed values: nothing here refuses it."""
    base, _ = served
    sdk = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    try:
        completion = await sdk.completions.create(model="m", prompt="hi", max_tokens=1, temperature=0, n=1)
        chat = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1, extra_body={"top_k": 1}
        )
        embedding = await sdk.embeddings.create(model="e", input="hi")
        stream = await sdk.chat.completions.create(model="m", messages=CHAT["messages"], max_tokens=1, stream=True)
        streamed = [chunk async for chunk in stream]
    finally:
        await sdk.close()
    assert completion.choices[0].text == "x"
    assert chat.choices[0].message.content == "x"
    assert embedding.data[0].embedding == [1.0]
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "x"


# -- chat messages ----------------------------------------------------------------------------

MESSAGES: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    "user-without-content": ([{"role": "user"}], "messages[0].content", "is required"),
    "user-null-content": ([{"role": "user", "content": None}], "messages[0].content", "is required"),
    "system-without-content": (
        [{"role": "system"}, {"role": "user", "content": "hi"}],
        "messages[0].content",
        "is required",
    ),
    "developer-without-content": (
        [{"role": "developer", "name": "d"}, {"role": "user", "content": "hi"}],
        "messages[0].content",
        "is required",
    ),
    "tool-without-content": (
        [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1"}],
        "messages[1].content",
        "is required",
    ),
    # OpenAI: an assistant message needs content unless it carries tool_calls/function_call.
    "assistant-without-content": (
        [{"role": "user", "content": "hi"}, {"role": "assistant"}, {"role": "user", "content": "and?"}],
        "messages[1].content",
        "is required",
    ),
    "assistant-with-tool-calls": (
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}]},
        ],
        "messages[1].tool_calls[0].function.arguments",
        "is required",
    ),
    "assistant-with-function-call": (
        [{"role": "user", "content": "hi"}, {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}],
        "messages[1].function_call",
        "not supported",
    ),
    "function-role": (
        [{"role": "user", "content": "hi"}, {"role": "function", "name": "f", "content": "42"}],
        "messages[1].role",
        "not supported",
    ),
    "unknown-role": ([{"role": "wizard", "content": "hi"}], "messages[0].role", "'user'"),
    "role-not-a-string": ([{"role": 1, "content": "hi"}], "messages[0].role", "'assistant'"),
    "missing-role": ([{"content": "hi"}], "messages[0].role", "is required"),
    "message-not-an-object": (["hi"], "messages[0]", "expected an object, but got a string"),
}


@ASYNC
@pytest.mark.parametrize("case", list(MESSAGES))
async def test_a_malformed_chat_message_is_a_400_naming_it(served, case):
    base, runtime = served
    messages, param, words = MESSAGES[case]
    request_id = f"message-{case}"
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(
            f"{base}/v1/chat/completions", json={**CHAT, "messages": messages}, headers={"x-request-id": request_id}
        )
    error = _refusal(reply, 400, request_id)
    assert error["param"] == param
    assert words in error["message"]
    (record,) = await rpc_records(runtime, request_id)
    assert record.outcome == "INVALID_ARGUMENT"


# -- methods ----------------------------------------------------------------------------------

WRONG_METHODS = {
    "get-chat": ("GET", "/v1/chat/completions", "POST"),
    "get-completions": ("GET", "/v1/completions", "POST"),
    "put-embeddings": ("PUT", "/v1/embeddings", "POST"),
    "post-models": ("POST", "/v1/models", "GET"),
    "delete-model": ("DELETE", "/v1/models/m", "GET"),
    "post-health": ("POST", "/health", "GET"),
}


@ASYNC
@pytest.mark.parametrize("case", list(WRONG_METHODS))
async def test_a_known_path_with_another_method_is_a_405_with_allow(served, case):
    base, runtime = served
    method, path, allowed = WRONG_METHODS[case]
    request_id = f"method-{case}"
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.request(method, f"{base}{path}", json={}, headers={"x-request-id": request_id})
    error = _refusal(reply, 405, request_id)
    assert error["code"] == "method_not_allowed"
    assert allowed in [m.strip() for m in reply.headers["allow"].split(",")]
    (record,) = await rpc_records(runtime, request_id)
    assert (record.method, record.outcome) == ("openai/unknown", "UNIMPLEMENTED")


@ASYNC
@pytest.mark.parametrize("path", ["/v1/assistants", "/v1/chat/completions/", "/", "/v1/chat"])
async def test_an_unknown_path_is_still_an_audited_404(served, path):
    base, runtime = served
    request_id = f"unknown-{path.strip('/').replace('/', '-') or 'root'}"
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(f"{base}{path}", json=CHAT, headers={"x-request-id": request_id})
    assert reply.status_code == 404, reply.text[:500]
    assert reply.headers["x-request-id"] == request_id
    assert reply.json()["error"]["type"] == "not_found_error"
    (record,) = await rpc_records(runtime, request_id)
    assert (record.method, record.outcome) == ("openai/unknown", "NOT_FOUND")


@ASYNC
async def test_get_and_head_on_get_routes_are_served(served):
    base, _ = served
    async with httpx.AsyncClient(timeout=60) as http:
        assert (await http.get(f"{base}/v1/models")).status_code == 200
        assert (await http.head(f"{base}/v1/models")).status_code == 200
        assert (await http.get(f"{base}/health/live")).status_code == 200


# NaN and Infinity are not JSON (RFC 8259 section 6), though Python's parser reads them; a
# literal beyond a double's range (1e400) would be read as Infinity.
NON_FINITE = {
    "nan": '"temperature": NaN',
    "infinity": '"temperature": Infinity',
    "minus-infinity": '"top_p": -Infinity',
    "overflow": '"temperature": 1e400',
    "extra-overflow": '"min_p": -1e999',
}


@ASYNC
@pytest.mark.parametrize("case", list(NON_FINITE))
async def test_nan_infinity_and_overflowing_numbers_are_a_400(served, case):
    base, runtime = served
    request_id = f"non-finite-{case}"
    body = '{"model": "m", "prompt": "hi", "max_tokens": 1, ' + NON_FINITE[case] + "}"
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(
            f"{base}/v1/completions",
            content=body.encode(),
            headers={"content-type": "application/json", "x-request-id": request_id},
        )
    error = _refusal(reply, 400, request_id)
    assert error["param"] == "body"
    assert "NaN, Infinity or a number beyond a double" in error["message"]
    (record,) = await rpc_records(runtime, request_id)
    assert record.outcome == "INVALID_ARGUMENT"
