"""``/v1/completions`` with a list of prompts, through the official ``openai`` SDK: one choice
per prompt and ``n`` with ``index = prompt * n + i`` (as vLLM's completions server numbers
them), usage summed, streamed alike; each prompt admitted and audited as a Generate call of
its own (request id ``<id>-<i>``); the number of prompts bounded."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import openai
import pytest

from audit import QueryFilter
from audit.records import decode_record
from tests.conftest import TINY
from tests.openai.conftest import extra_http
from xinserve.v1 import server_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")


def client(base_url: str, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120, **kw)


async def test_a_list_of_prompts_is_one_choice_per_prompt_and_n(http_server):
    api = client(http_server.base_url)
    prompts = ["the first prompt", "a second, longer prompt of the batch"]
    singles = [await api.completions.create(model=TINY, prompt=p, max_tokens=6, temperature=0) for p in prompts]
    batch = await api.completions.create(model=TINY, prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in batch.choices] == [0, 1]
    assert [c.text for c in batch.choices] == [s.choices[0].text for s in singles]
    assert batch.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert batch.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    assert batch.usage.total_tokens == batch.usage.prompt_tokens + batch.usage.completion_tokens

    sampled = dict(max_tokens=6, temperature=1.0, seed=11, n=2)
    per_prompt = [await api.completions.create(model=TINY, prompt=p, **sampled) for p in prompts]
    both = await api.completions.create(model=TINY, prompt=prompts, **sampled)
    assert [c.index for c in both.choices] == [0, 1, 2, 3]
    assert [c.text for c in both.choices] == [c.text for r in per_prompt for c in r.choices]

    root = http_server.base_url.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=60) as http:
        ids = [
            (await http.post(f"{root}/tokenize", json={"model": TINY, "prompt": p})).json()["tokens"] for p in prompts
        ]
    by_ids = await api.completions.create(model=TINY, prompt=ids, max_tokens=6, temperature=0)
    assert [c.text for c in by_ids.choices] == [c.text for c in batch.choices]


async def test_a_streamed_batch_sends_every_choice_and_the_summed_usage(http_server):
    api = client(http_server.base_url)
    prompts = ["stream one", "stream two", "stream three"]
    whole = await api.completions.create(model=TINY, prompt=prompts, max_tokens=5, temperature=0)
    stream = await api.completions.create(
        model=TINY, prompt=prompts, max_tokens=5, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    texts: dict[int, str] = {}
    finished: list[int] = []
    usages = []
    async for chunk in stream:
        if chunk.usage is not None:
            usages.append(chunk.usage)
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                finished.append(c.index)
    assert sorted(finished) == [0, 1, 2]
    assert texts == {c.index: c.text for c in whole.choices}
    (usage,) = usages
    assert (usage.prompt_tokens, usage.completion_tokens) == (whole.usage.prompt_tokens, whole.usage.completion_tokens)


async def test_each_prompt_is_audited_as_its_own_call(http_server, live_server):
    since = int(time.time() * 1000) - 1
    api = client(http_server.base_url, default_headers={"x-request-id": "batch-audit"})
    reply = await api.completions.create(model=TINY, prompt=["audit a", "audit b"], max_tokens=3, temperature=0)
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
    records = [decode_record(row.body)[2] for row in rows]
    ends = {r.request_id: r for r in records if r.event != "rpc_begin" and r.request_id.startswith("batch-audit")}
    begins = sorted(r.request_id for r in records if r.event == "rpc_begin" and r.request_id.startswith("batch-audit"))
    assert sorted(ends) == ["batch-audit-0", "batch-audit-1"] == begins
    assert {(r.method, r.outcome, r.model) for r in ends.values()} == {("openai/completions", "OK", TINY)}
    assert sum(r.output_tokens for r in ends.values()) == reply.usage.completion_tokens
    assert ends["batch-audit-0"].prompt_sm3 != ends["batch-audit-1"].prompt_sm3


async def test_the_number_of_prompts_is_bounded_and_a_bad_prompt_named(http_server):
    api = client(http_server.base_url)
    with pytest.raises(openai.BadRequestError) as too_many:
        await api.completions.create(model=TINY, prompt=["x"] * 65, max_tokens=1)
    assert too_many.value.body["param"] == "prompt"
    assert "at most 64 prompts" in too_many.value.body["message"]
    with pytest.raises(openai.BadRequestError) as empty:
        await api.completions.create(model=TINY, prompt=["fine", ""], max_tokens=1)
    assert empty.value.body["param"] == "prompt[1]"
    with pytest.raises(openai.BadRequestError) as huge_id:
        await api.completions.create(model=TINY, prompt=[[1, 2], [3, 2**40]], max_tokens=1)
    assert huge_id.value.body["param"] == "prompt[1]"


async def test_every_prompt_of_a_batch_takes_an_admission_slot(live_server):
    overrides = {"listen": {"http": ["127.0.0.1:0"]}, "admission": {"max_in_flight": 1, "max_queue": 0}}
    async with extra_http(live_server, overrides) as (frontend, runtime):
        api = client(f"http://127.0.0.1:{next(iter(frontend.ports.values()))}/v1")
        one = await api.completions.create(model=TINY, prompt=["only one"], max_tokens=2, temperature=0)
        assert [c.index for c in one.choices] == [0]
        with pytest.raises(openai.RateLimitError) as busy:
            await api.completions.create(model=TINY, prompt=["one", "two"], max_tokens=2, temperature=0)
        assert busy.value.body["code"] == "admission_queue_full"
        for _ in range(600):
            if runtime.admission.in_flight == 0 and not runtime.active_requests:
                break
            await asyncio.sleep(0.05)
        assert (runtime.admission.in_flight, dict(runtime.active_requests)) == (0, {})


async def test_an_abandoned_streamed_batch_aborts_every_prompt(http_server, api, live_server):
    async def running() -> int:
        return (await api.server.GetLoad(server_pb2.GetLoadRequest(model=TINY))).running

    body = {
        "model": TINY,
        "prompt": ["go on and on", "and on and on"],
        "max_tokens": 2000,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    since = int(time.time() * 1000) - 1000
    request_id = f"batch-abandon-{uuid.uuid4().hex[:12]}"
    async with httpx.AsyncClient(timeout=300) as http:
        async with http.stream(
            "POST", f"{http_server.base_url}/completions", json=body, headers={"x-request-id": request_id}
        ) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    break
    for _ in range(1200):
        if await running() == 0 and live_server.runtime.admission.in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert (await running(), live_server.runtime.admission.in_flight) == (0, 0)
    wanted = {f"{request_id}-0", f"{request_id}-1"}
    for _ in range(600):
        rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
        ends = [r for r in (decode_record(row.body)[2] for row in rows) if r.request_id in wanted and r.event == "rpc"]
        if len(ends) == 2:
            break
        await asyncio.sleep(0.1)
    assert sorted(r.request_id for r in ends) == sorted(wanted)
    assert {r.outcome for r in ends} == {"CANCELLED"}
    assert all((r.output_tokens or 0) < 2000 for r in ends)
