"""``/v1/embeddings`` with token-id input (one list of ids, or a list of them, as LangChain's
``OpenAIEmbeddings`` sends through the ``openai`` SDK), bounded by ``limits.max_token_ids``,
and ``dimensions``: refused, naming it, for a model without Matryoshka embeddings."""

from __future__ import annotations

import math
import time

import httpx
import openai
import pytest

from audit import QueryFilter
from audit.records import decode_record
from tests.conftest import MINILM
from tests.openai.conftest import extra_http

pytestmark = pytest.mark.asyncio(loop_scope="session")

TEXTS = ["token ids are embedded as given", "a second input"]


def client(base_url: str, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120, **kw)


async def _ids(base_url: str, text: str) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(f"{base_url.removesuffix('/v1')}/tokenize", json={"model": MINILM, "prompt": text})
    return reply.json()["tokens"]


async def test_token_id_inputs_embed_as_their_text(http_server, live_server):
    api = client(http_server.base_url)
    ids = [await _ids(http_server.base_url, t) for t in TEXTS]
    by_text = await api.embeddings.create(model=MINILM, input=TEXTS)
    since = int(time.time() * 1000) - 1
    tagged = client(http_server.base_url, default_headers={"x-request-id": "embed-ids-1"})
    by_ids = await tagged.embeddings.create(model=MINILM, input=ids)
    one = await api.embeddings.create(model=MINILM, input=ids[0], encoding_format="float")
    assert [d.index for d in by_ids.data] == [0, 1]
    for text_vec, id_vec in zip(by_text.data, by_ids.data, strict=True):
        assert len(id_vec.embedding) == 384
        assert all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(text_vec.embedding, id_vec.embedding, strict=True))
    assert all(
        math.isclose(a, b, abs_tol=1e-5) for a, b in zip(one.data[0].embedding, by_text.data[0].embedding, strict=True)
    )
    assert by_ids.usage.prompt_tokens == sum(len(i) for i in ids) == by_text.usage.prompt_tokens
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
    (record,) = [r for r in (decode_record(row.body)[2] for row in rows) if r.request_id == "embed-ids-1"]
    assert (record.method, record.outcome, record.prompt_tokens) == (
        "openai/embeddings",
        "OK",
        by_ids.usage.prompt_tokens,
    )


async def test_token_id_inputs_are_checked_and_bounded(http_server, live_server):
    api = client(http_server.base_url)
    with pytest.raises(openai.BadRequestError) as outside:
        await api.embeddings.create(model=MINILM, input=[[101, 10**9, 102]])
    assert outside.value.body["param"] == "input[0][1]"
    with pytest.raises(openai.BadRequestError) as empty:
        await api.embeddings.create(model=MINILM, input=[[101, 102], []])
    assert empty.value.body["param"] == "input[1]"
    async with extra_http(live_server, {"listen": {"http": ["127.0.0.1:0"]}, "limits": {"max_token_ids": 8}}) as (
        frontend,
        _,
    ):
        small = client(f"http://127.0.0.1:{next(iter(frontend.ports.values()))}/v1")
        fits = await small.embeddings.create(model=MINILM, input=[[101, 2000, 102], [101, 2001, 2002, 102]])
        assert len(fits.data) == 2
        with pytest.raises(openai.BadRequestError) as too_many:
            await small.embeddings.create(model=MINILM, input=[[101, 2000, 2001, 102], [101, 2001, 2002, 2003, 102]])
        assert too_many.value.body["param"] == "input"
        assert "limits.max_token_ids" in too_many.value.body["message"]


async def test_dimensions_is_refused_naming_it_for_a_model_without_matryoshka(http_server):
    api = client(http_server.base_url)
    with pytest.raises(openai.BadRequestError) as refused:
        await api.embeddings.create(model=MINILM, input="x", dimensions=128)
    assert refused.value.body["param"] == "dimensions"
    assert "Matryoshka" in refused.value.body["message"] and "384" in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as zero:
        await api.embeddings.create(model=MINILM, input="x", dimensions=0)
    assert zero.value.body["param"] == "dimensions"
