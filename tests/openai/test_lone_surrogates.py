"""A JSON string may hold a ``\\uD800``-style escape of a lone surrogate (U+D800..U+DFFF), which
is no Unicode scalar value and cannot be encoded as UTF-8 (RFC 8259 section 8.2). The OpenAI
front end refuses it in any string of the body (value or object key) with 400
``invalid_request_error`` naming the field, and audits the call as INVALID_ARGUMENT.

Real uvicorn listener and call core, raw request bodies (``json.dumps`` of Python strings with
a surrogate would escape it the same way, but the bytes are written out so the test shows what
goes on the wire); the engines are fakes (the refusal happens before any engine is called).
"""

from __future__ import annotations

import httpx
import pytest

from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records

ASYNC = pytest.mark.asyncio(loop_scope="session")

# (endpoint, raw JSON body, OpenAI param named in the error); raw strings: the JSON text holds
# the six characters of the escape (\ud800), as a client sends it.
CASES = {
    "prompt": ("completions", r'{"model":"m","prompt":"\ud800","max_tokens":2}', "prompt"),
    "prompt-list": ("completions", r'{"model":"m","prompt":["ok","a\udfffb"],"max_tokens":2}', "prompt[1]"),
    "chat-content": (
        "chat/completions",
        r'{"model":"m","messages":[{"role":"user","content":"\ud800"}],"max_tokens":2}',
        "messages[0].content",
    ),
    "chat-content-part": (
        "chat/completions",
        r'{"model":"m","messages":[{"role":"user","content":"hi"},'
        r'{"role":"user","content":[{"type":"text","text":"\ud800"}]}],"max_tokens":2}',
        "messages[1].content[0].text",
    ),
    "model": ("completions", r'{"model":"m\ud800","prompt":"x","max_tokens":2}', "model"),
    "stop": ("completions", r'{"model":"m","prompt":"x","stop":["a","\ud800"],"max_tokens":2}', "stop[1]"),
    "stop-string": ("chat/completions", r'{"model":"m","messages":[],"stop":"\udfff"}', "stop"),
    "embeddings-input": ("embeddings", r'{"model":"e","input":"\ud800"}', "input"),
    "embeddings-input-list": ("embeddings", r'{"model":"e","input":["x","\udfff"]}', "input[1]"),
    "user": ("completions", r'{"model":"m","prompt":"x","max_tokens":2,"user":"\ud800"}', "user"),
    "embeddings-user": ("embeddings", r'{"model":"e","input":"x","user":"\udfff"}', "user"),
    "logit-bias-key": ("completions", r'{"model":"m","prompt":"x","logit_bias":{"\ud800":1}}', "logit_bias"),
    "unknown-field": ("completions", r'{"model":"m","prompt":"x","metadata":{"k":["\ud800"]}}', "metadata.k[0]"),
}


@pytest.fixture
async def http_port(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m"), FakeEngine("e", "embed")]) as served:
        yield served


@ASYNC
@pytest.mark.parametrize("case", list(CASES))
async def test_lone_surrogate_is_a_400_naming_the_field(http_port, case):
    port, runtime = http_port
    endpoint, body, param = CASES[case]
    request_id = f"surrogate-{case}"
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(
            f"http://127.0.0.1:{port}/v1/{endpoint}",
            content=body.encode("ascii"),
            headers={"content-type": "application/json", "x-request-id": request_id},
        )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_argument"
    assert error["param"] == param
    assert "surrogate" in error["message"]
    (record,) = await rpc_records(runtime, request_id)
    assert record.outcome == "INVALID_ARGUMENT"


@ASYNC
async def test_a_surrogate_pair_is_one_valid_character(http_port):
    """``\\ud83d\\ude00`` is the escape of U+1F600 (a pair, not a lone surrogate): accepted."""
    port, runtime = http_port
    body = '{"model":"m","prompt":"\\ud83d\\ude00","max_tokens":1,"user":"\\ud83d\\ude00"}'
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(
            f"http://127.0.0.1:{port}/v1/completions",
            content=body.encode("ascii"),
            headers={"content-type": "application/json", "x-request-id": "surrogate-pair"},
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"] == "x"
    (record,) = await rpc_records(runtime, "surrogate-pair")
    assert record.outcome == "OK"
