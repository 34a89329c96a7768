"""The OpenAI front end shares the call core with gRPC: the same tokens for the same greedy
request, one audit record per call with the same fields, the same admission, request ids,
and a client that goes away aborts its engine request."""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import openai
import pytest

from audit import QueryFilter
from audit.records import decode_record
from tests.conftest import MINILM, TINY
from tests.openai.conftest import extra_http
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2, server_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")


def client(http_server, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=http_server.base_url, api_key="unused", max_retries=0, timeout=120, **kw)


async def test_greedy_completion_matches_grpc_generate(http_server, api):
    prompt = "parity of the two front ends"
    grpc_reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY,
            prompt=prompt,
            sampling_params=sampling_pb2.SamplingParams(max_tokens=16, temperature=0.0, logprobs=1),
        )
    )
    http_reply = await client(http_server).completions.create(
        model=TINY, prompt=prompt, max_tokens=16, temperature=0, logprobs=1
    )
    out = grpc_reply.outputs[0]
    assert http_reply.choices[0].text == out.text
    assert http_reply.usage.completion_tokens == len(out.token_ids)
    assert http_reply.usage.prompt_tokens == grpc_reply.usage.prompt_tokens
    # Token by token: one logprobs position per generated token, with the same logprob.
    grpc_lps = [
        next(c.logprob for c in pos.candidates if c.token_id == t)
        for t, pos in zip(out.token_ids, out.logprobs, strict=True)
    ]
    assert http_reply.choices[0].logprobs.token_logprobs == pytest.approx(grpc_lps, abs=1e-4)


async def test_greedy_chat_matches_grpc_chat(http_server, api):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "parity"}]
    grpc_reply = await api.inference.Chat(
        inference_pb2.ChatRequest(
            model=TINY,
            messages=[common_pb2.ChatMessage(**m) for m in messages],
            sampling_params=sampling_pb2.SamplingParams(max_tokens=16, temperature=0.0),
        )
    )
    http_reply = await client(http_server).chat.completions.create(
        model=TINY, messages=messages, max_tokens=16, temperature=0
    )
    assert http_reply.choices[0].message.content == grpc_reply.outputs[0].text
    assert http_reply.usage.completion_tokens == grpc_reply.usage.completion_tokens


async def _records(live_server, since_ms: int) -> list:
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since_ms))
    return [decode_record(row.body)[2] for row in rows]


async def test_one_audit_record_per_call_with_the_grpc_fields(http_server, api, live_server):
    import time

    since = int(time.time() * 1000) - 1
    rid_http, rid_grpc = "openai-audit-1", "grpc-audit-1"
    http = client(http_server, default_headers={"x-request-id": rid_http})
    reply = await http.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "audit me"}], max_tokens=5, temperature=0
    )
    await api.inference.Chat(
        inference_pb2.ChatRequest(
            model=TINY,
            messages=[common_pb2.ChatMessage(role="user", content="audit me")],
            sampling_params=sampling_pb2.SamplingParams(max_tokens=5, temperature=0.0),
        ),
        metadata=(("x-request-id", rid_grpc),),
    )
    stream = await client(http_server, default_headers={"x-request-id": "openai-audit-2"}).completions.create(
        model=TINY, prompt="streamed", max_tokens=3, temperature=0, stream=True
    )
    async for _ in stream:
        pass
    with pytest.raises(openai.BadRequestError):
        await client(http_server, default_headers={"x-request-id": "openai-audit-3"}).embeddings.create(
            model=MINILM, input="x", dimensions=3
        )
    records = await _records(live_server, since)
    by_id: dict[str, list] = {}
    begins: dict[str, int] = {}
    for r in records:
        if r.event == "rpc_begin":
            begins[r.request_id] = begins.get(r.request_id, 0) + 1
        else:
            by_id.setdefault(r.request_id, []).append(r)
    # Calls that produce output have one begin record each; a refused call none.
    assert [begins.get(i, 0) for i in (rid_http, rid_grpc, "openai-audit-2", "openai-audit-3")] == [1, 1, 1, 0]
    (h,) = by_id[rid_http]
    (g,) = by_id[rid_grpc]
    assert h.method == "openai/chat.completions" and g.method == "/xinserve.v1.InferenceService/Chat"
    same = (
        "event",
        "outcome",
        "principal",
        "auth_method",
        "model",
        "manifest_digest",
        "prompt_tokens",
        "output_tokens",
    )
    assert {f: getattr(h, f) for f in same} == {f: getattr(g, f) for f in same}
    assert h.output_tokens == reply.usage.completion_tokens
    assert h.prompt_sm3 == g.prompt_sm3 and h.output_sm3 == g.output_sm3
    (s,) = by_id["openai-audit-2"]
    assert (s.method, s.outcome, s.output_tokens) == ("openai/completions", "OK", 3)
    (e,) = by_id["openai-audit-3"]
    assert (e.method, e.outcome) == ("openai/embeddings", "INVALID_ARGUMENT")


async def test_abandoned_stream_aborts_the_engine_request(http_server, api, live_server):
    import time
    import uuid

    async def running() -> int:
        return (await api.server.GetLoad(server_pb2.GetLoadRequest(model=TINY))).running

    body = {
        "model": TINY,
        "prompt": "go on and on",
        "max_tokens": 2000,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    since = int(time.time() * 1000) - 1000
    abandoned = None
    # The client leaves after the first chunk. On a loaded machine that chunk may already hold
    # the whole answer (vLLM merges the deltas a slow consumer has not taken): then nothing was
    # left to abort, and the request is made again.
    for _ in range(5):
        request_id = f"abandon-{uuid.uuid4().hex[:12]}"
        async with httpx.AsyncClient(timeout=300) as http:
            async with http.stream(
                "POST", f"{http_server.base_url}/completions", json=body, headers={"x-request-id": request_id}
            ) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        break
        if '"finish_reason":null' in line:
            abandoned = request_id
            break
    assert abandoned is not None, "every attempt's first chunk already held the whole answer"
    # The connection is closed: the engine request must go away, before its 2000 tokens.
    for _ in range(1200):
        if await running() == 0 and live_server.runtime.admission.in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert await running() == 0
    assert live_server.runtime.admission.in_flight == 0
    for _ in range(600):
        final = [r for r in await _records(live_server, since) if r.request_id == abandoned and r.event == "rpc"]
        if final:
            break
        await asyncio.sleep(0.1)
    (record,) = final
    assert record.outcome == "CANCELLED"
    assert record.output_tokens is not None and record.output_tokens < 2000


async def test_request_id_header_on_success_and_error(http_server):
    async with httpx.AsyncClient(timeout=60) as http:
        ok = await http.post(
            f"{http_server.base_url}/completions",
            json={"model": TINY, "prompt": "id", "max_tokens": 1},
            headers={"x-request-id": "mine-1"},
        )
        assert ok.status_code == 200 and ok.headers["x-request-id"] == "mine-1"
        assert ok.json()["id"] == "cmpl-mine-1"
        bad = await http.post(f"{http_server.base_url}/completions", json={"model": TINY, "prompt": "id", "top_p": 7})
        assert bad.status_code == 400 and len(bad.headers["x-request-id"]) == 32
        assert bad.json()["error"]["param"] == "top_p"
        spaced = await http.post(
            f"{http_server.base_url}/completions",
            json={"model": TINY, "prompt": "id"},
            headers={"x-request-id": "has space"},
        )
        assert spaced.status_code == 400 and spaced.json()["error"]["param"] == "x-request-id"
        garbage = await http.post(
            f"{http_server.base_url}/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert garbage.status_code == 400 and garbage.json()["error"]["type"] == "invalid_request_error"
        wrong_type = await http.post(
            f"{http_server.base_url}/chat/completions", json={"model": TINY, "messages": "not a list"}
        )
        assert wrong_type.status_code == 400 and wrong_type.json()["error"]["param"] == "messages"


async def test_health_follows_the_grpc_health_state(http_server, live_server):
    root = http_server.base_url.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=30) as http:
        ready = await http.get(f"{root}/health")
        assert (ready.status_code, ready.json()["status"]) == (200, "SERVING")
        assert (await http.get(f"{root}/health/live")).status_code == 200


async def test_body_limit_and_admission_queue_full(live_server):
    overrides = {
        "listen": {"http": ["127.0.0.1:0"]},
        "admission": {"max_in_flight": 1, "max_queue": 0, "retry_after_ms": 2500},
        "limits": {"max_http_body_bytes": 4096},
    }
    async with extra_http(live_server, overrides) as (frontend, runtime):
        base = f"http://127.0.0.1:{next(iter(frontend.ports.values()))}/v1"
        async with httpx.AsyncClient(timeout=120) as http:
            big = await http.post(f"{base}/completions", json={"model": TINY, "prompt": "x" * 5000})
            assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
            long = {"model": TINY, "prompt": "hold", "max_tokens": 1500, "ignore_eos": True, "stream": True}
            async with http.stream("POST", f"{base}/completions", json=long) as holding:
                async for line in holding.aiter_lines():
                    if line.startswith("data: "):
                        break
                busy = await http.post(f"{base}/completions", json={"model": TINY, "prompt": "x", "max_tokens": 1})
                assert busy.status_code == 429
                assert busy.headers["retry-after"] == "3"
                assert busy.json()["error"]["type"] == "rate_limit_error"
        for _ in range(600):
            if runtime.admission.in_flight == 0:
                break
            await asyncio.sleep(0.05)
        assert runtime.admission.in_flight == 0


async def test_draining_is_503_with_retry_after(live_server):
    async with extra_http(live_server, {"listen": {"http": ["127.0.0.1:0"]}}) as (frontend, runtime):
        base = f"http://127.0.0.1:{next(iter(frontend.ports.values()))}"
        await runtime.start_drain()
        async with httpx.AsyncClient(timeout=60) as http:
            reply = await http.post(f"{base}/v1/completions", json={"model": TINY, "prompt": "x", "max_tokens": 1})
            health = await http.get(f"{base}/health")
        assert reply.status_code == 503 and "retry-after" in reply.headers
        assert reply.json()["error"]["code"] == "draining"
        assert (health.status_code, health.json()["status"]) == (503, "NOT_SERVING")


async def test_grpc_returns_the_request_id_in_header_and_trailer(api):
    request = inference_pb2.TokenizeRequest(model=TINY, text="hi")
    call = api.inference.Tokenize(request, metadata=(("x-request-id", "meta-1"),))
    await call
    assert ("x-request-id", "meta-1") in tuple(await call.initial_metadata())
    assert ("x-request-id", "meta-1") in tuple(await call.trailing_metadata())
    failing = api.inference.Generate(
        inference_pb2.GenerateRequest(model="nope", prompt="x"), metadata=(("x-request-id", "meta-2"),)
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await failing
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert ("x-request-id", "meta-2") in tuple(err.value.initial_metadata())
    assert ("x-request-id", "meta-2") in tuple(err.value.trailing_metadata())
    stream = api.inference.GenerateStream(
        inference_pb2.GenerateRequest(model=TINY, prompt="x", sampling_params=sampling_pb2.SamplingParams(max_tokens=2))
    )
    async for _ in stream:
        pass
    (_, generated) = next(kv for kv in tuple(await stream.initial_metadata()) if kv[0] == "x-request-id")
    assert len(generated) == 32 and ("x-request-id", generated) in tuple(await stream.trailing_metadata())
    assert json.dumps(generated)


async def test_unknown_endpoint_is_an_audited_openai_404(http_server, live_server):
    import time

    since = int(time.time() * 1000) - 1
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.post(f"{http_server.base_url}/assistants", json={}, headers={"x-request-id": "probe-404"})
    assert reply.status_code == 404 and reply.json()["error"]["type"] == "not_found_error"
    (record,) = [r for r in await _records(live_server, since) if r.request_id == "probe-404"]
    assert (record.method, record.outcome) == ("openai/unknown", "NOT_FOUND")


async def test_hostile_json_is_400_not_500(http_server):
    """Nesting past the JSON parser's recursion limit, and an integer longer than Python's
    int conversion limit (4300 digits), are the client's mistakes: 400, never 500."""
    head = json.dumps({"model": TINY, "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]})[:-1]
    deep = head + ', "max_tokens": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}"
    long_number = head + ', "max_tokens": ' + "9" * 5000 + "}"
    async with httpx.AsyncClient(timeout=60) as http:
        for path in ("/completions", "/chat/completions"):
            for body, words in ((deep, "too deeply"), (long_number, "too many digits")):
                reply = await http.post(
                    f"{http_server.base_url}{path}", content=body.encode(), headers={"content-type": "application/json"}
                )
                assert reply.status_code == 400, (path, reply.status_code, reply.text[:200])
                error = reply.json()["error"]
                assert error["type"] == "invalid_request_error" and words in error["message"]
                assert reply.headers["x-request-id"]


async def test_a_known_path_with_another_method_is_an_audited_openai_405(http_server, live_server):
    import time

    since = int(time.time() * 1000) - 1
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.request("OPTIONS", f"{http_server.base_url}/models", headers={"x-request-id": "probe-405"})
    assert reply.status_code == 405, reply.text[:200]
    assert reply.json()["error"]["code"] == "method_not_allowed"
    assert reply.headers["x-request-id"] == "probe-405"
    assert "GET" in reply.headers["allow"]
    (record,) = [r for r in await _records(live_server, since) if r.request_id == "probe-405"]
    assert (record.method, record.outcome) == ("openai/unknown", "UNIMPLEMENTED")
