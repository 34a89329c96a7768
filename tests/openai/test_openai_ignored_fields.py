"""Request details the OpenAI front end used to drop silently are refused with a 400 naming
them: chat ``echo``, ``prompt_logprobs`` (computed by the engine but never returned over
HTTP), ``stream_options.continuous_usage_stats``, a JSON object that names a key twice
(parsers differ on which value wins, so a gateway that reads the first sees another request
than the engine), and a ``Content-Encoding`` other than ``identity`` (415; no coding is
decoded). Real uvicorn listener, call core and audit log over a fake engine."""

from __future__ import annotations

import httpx
import pytest

from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records

ASYNC = pytest.mark.asyncio(loop_scope="session")
JSON = {"content-type": "application/json"}


@ASYNC
async def test_a_duplicate_json_key_is_refused_naming_it(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m"), FakeEngine("other")]) as (port, runtime):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            cases = {
                "/v1/chat/completions": b'{"model": "m", "model": "other", "messages": []}',
                "/v1/completions": b'{"model": "m", "prompt": "a", "max_tokens": 2, "max_tokens": 3}',
                "/v1/embeddings": b'{"model": "m", "input": "a", "input": "b"}',
            }
            for path, body in cases.items():
                reply = await client.post(path, content=body, headers=JSON)
                assert reply.status_code == 400, path
                error = reply.json()["error"]
                assert error["type"] == "invalid_request_error"
                assert error["param"] in ("model", "max_tokens", "input"), error
                assert "more than once" in error["message"]
                records = await rpc_records(runtime, reply.headers["x-request-id"])
                assert records[0].outcome == "INVALID_ARGUMENT"
            # Nested objects too.
            nested = b'{"model": "m", "messages": [{"role": "user", "role": "system", "content": "hi"}]}'
            reply = await client.post("/v1/chat/completions", content=nested, headers=JSON)
            assert (reply.status_code, reply.json()["error"]["param"]) == (400, "role")
            # The same bodies without the repetition are served.
            reply = await client.post(
                "/v1/chat/completions",
                content=b'{"model": "other", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
                headers=JSON,
            )
            assert reply.status_code == 200, reply.text


@ASYNC
async def test_a_content_encoding_other_than_identity_is_refused_naming_it(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, runtime):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            body = b'{"model": "m", "prompt": "a", "max_tokens": 2}'
            for coding in ("gzip", "identity, br"):
                reply = await client.post("/v1/completions", content=body, headers={**JSON, "content-encoding": coding})
                assert reply.status_code == 415, coding
                error = reply.json()["error"]
                assert error["param"] == "content-encoding"
                assert "identity" in error["message"]
                records = await rpc_records(runtime, reply.headers["x-request-id"])
                assert records[0].outcome == "INVALID_ARGUMENT"
            reply = await client.post("/v1/completions", content=body, headers={**JSON, "content-encoding": "identity"})
            assert reply.status_code == 200, reply.text


@ASYNC
async def test_fields_the_front_end_would_not_honour_are_refused_naming_them(tmp_path):
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    completion = {"model": "m", "prompt": "a", "max_tokens": 2}
    cases = [
        ("/v1/chat/completions", {**chat, "echo": True}, "echo"),
        ("/v1/completions", {**completion, "prompt_logprobs": 1}, "prompt_logprobs"),
        ("/v1/chat/completions", {**chat, "prompt_logprobs": 0}, "prompt_logprobs"),
        (
            "/v1/completions",
            {**completion, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
            "stream_options.continuous_usage_stats",
        ),
        (
            "/v1/chat/completions",
            {**chat, "stream": True, "stream_options": {"continuous_usage_stats": True}},
            "stream_options.continuous_usage_stats",
        ),
    ]
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, runtime):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for path, body, field in cases:
                reply = await client.post(path, json=body)
                assert reply.status_code == 400, (path, field, reply.text)
                error = reply.json()["error"]
                assert (error["type"], error["param"]) == ("invalid_request_error", field), error
                records = await rpc_records(runtime, reply.headers["x-request-id"])
                assert [r.outcome for r in records] == ["INVALID_ARGUMENT"]
            # Their off values are served.
            for path, body in (
                ("/v1/chat/completions", {**chat, "echo": False, "stream_options": {"continuous_usage_stats": False}}),
                ("/v1/completions", {**completion, "prompt_logprobs": None}),
            ):
                reply = await client.post(path, json=body)
                assert reply.status_code == 200, (path, reply.text)
