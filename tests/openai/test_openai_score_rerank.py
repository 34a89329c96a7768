"""vLLM's ``/score`` and ``/rerank`` (with the ``/v1/score``, ``/v1/rerank``, ``/v2/rerank``
aliases) on the live server's embedding model: cosine similarities of the texts' embeddings,
as vLLM serves them for an embedding model; refusals name the field; one audit record per call.
httpx is used because the ``openai`` SDK has no score or rerank call."""

from __future__ import annotations

import math
import time

import httpx
import openai
import pytest

from audit import QueryFilter
from audit.records import decode_record
from tests.conftest import MINILM, TINY
from tests.openai.conftest import extra_http

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUERY = "What is the capital of France?"
RELATED = "Paris is the capital and largest city of France."
UNRELATED = "The mitochondria is the powerhouse of the cell."
MIDDLE = "France is a country in Western Europe."


def root(base_url: str) -> str:
    return base_url.removesuffix("/v1")


async def post(base_url: str, path: str, body: dict, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=120) as http:
        return await http.post(f"{root(base_url)}{path}", json=body, headers=headers)


async def test_score_of_a_text_with_itself_is_one_and_related_beats_unrelated(http_server, live_server):
    since = int(time.time() * 1000) - 1
    reply = await post(
        http_server.base_url,
        "/v1/score",
        {"model": MINILM, "text_1": QUERY, "text_2": [QUERY, RELATED, UNRELATED]},
        **{"x-request-id": "score-1"},
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["object"], body["model"], body["id"]) == ("list", MINILM, "score-1")
    assert [(d["index"], d["object"]) for d in body["data"]] == [(0, "score"), (1, "score"), (2, "score")]
    same, related, unrelated = (d["score"] for d in body["data"])
    assert math.isclose(same, 1.0, abs_tol=1e-4)
    assert related > unrelated + 0.2
    assert -1.0 <= unrelated < related < 1.0
    vectors = await openai.AsyncOpenAI(base_url=http_server.base_url, api_key="unused").embeddings.create(
        model=MINILM, input=[QUERY, RELATED]
    )
    a, b = (d.embedding for d in vectors.data)
    expected = sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    assert math.isclose(related, expected, abs_tol=1e-4)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    pairwise = await post(
        http_server.base_url, "/score", {"model": MINILM, "queries": [QUERY, QUERY], "documents": [RELATED, UNRELATED]}
    )
    assert [round(d["score"], 4) for d in pairwise.json()["data"]] == [round(related, 4), round(unrelated, 4)]
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
    records = [r for r in (decode_record(row.body)[2] for row in rows) if r.request_id == "score-1"]
    assert [(r.method, r.outcome, r.model, r.prompt_tokens) for r in records] == [
        ("openai/score", "OK", MINILM, body["usage"]["prompt_tokens"])
    ]


async def test_rerank_orders_documents_by_relevance_with_top_n(http_server, live_server):
    docs = [UNRELATED, RELATED, MIDDLE]
    since = int(time.time() * 1000) - 1
    reply = await post(
        http_server.base_url,
        "/v1/rerank",
        {"model": MINILM, "query": QUERY, "documents": docs},
        **{"x-request-id": "rerank-1"},
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert [r["index"] for r in body["results"]] == [1, 2, 0]
    assert [r["document"]["text"] for r in body["results"]] == [RELATED, MIDDLE, UNRELATED]
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    for path in ("/rerank", "/v2/rerank"):
        top = await post(http_server.base_url, path, {"model": MINILM, "query": QUERY, "documents": docs, "top_n": 2})
        assert [r["index"] for r in top.json()["results"]] == [1, 2]
    everything = await post(
        http_server.base_url, "/rerank", {"model": MINILM, "query": QUERY, "documents": docs, "top_n": 9}
    )
    assert len(everything.json()["results"]) == 3
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
    records = [r for r in (decode_record(row.body)[2] for row in rows) if r.request_id == "rerank-1"]
    assert [(r.method, r.outcome) for r in records] == [("openai/rerank", "OK")]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/rerank", {"model": MINILM, "query": QUERY, "documents": [RELATED], "top_n": -1}, "top_n"),
        ("/v1/rerank", {"model": MINILM, "query": QUERY, "documents": [RELATED], "top_n": "2"}, "top_n"),
        ("/v1/rerank", {"model": MINILM, "query": QUERY, "documents": []}, "documents"),
        ("/v1/rerank", {"model": MINILM, "query": QUERY, "documents": [RELATED, ""]}, "documents[1]"),
        ("/v1/rerank", {"model": MINILM, "query": {"content": []}, "documents": [RELATED]}, "query"),
        ("/v1/score", {"model": MINILM, "text_1": [QUERY, QUERY], "text_2": [RELATED]}, "text_2"),
        ("/v1/score", {"model": MINILM, "text_1": QUERY}, "text_2"),
        ("/v1/score", {"model": MINILM}, "text_1"),
        ("/v1/score", {"model": MINILM, "text_1": QUERY, "text_2": [RELATED, 3]}, "text_2[1]"),
        (
            "/v1/score",
            {"model": MINILM, "text_1": QUERY, "text_2": RELATED, "max_tokens_per_doc": 4},
            "max_tokens_per_doc",
        ),
        ("/v1/score", {"model": TINY, "text_1": QUERY, "text_2": RELATED}, "model"),
        ("/v1/rerank", {"model": TINY, "query": QUERY, "documents": [RELATED]}, "model"),
    ],
)
async def test_bad_requests_are_refused_naming_the_field(http_server, path, body, param):
    reply = await post(http_server.base_url, path, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param, error
    if param == "model":
        assert "cross-encoder" in error["message"] and "embedding" in error["message"]
        assert error["code"] == "wrong_model_kind"


async def test_texts_are_bounded_by_max_embed_inputs(live_server):
    overrides = {"listen": {"http": ["127.0.0.1:0"]}, "limits": {"max_embed_inputs": 3}}
    async with extra_http(live_server, overrides) as (frontend, _):
        base = f"http://127.0.0.1:{next(iter(frontend.ports.values()))}"
        fits = await post(base, "/rerank", {"model": MINILM, "query": QUERY, "documents": [RELATED, MIDDLE]})
        assert fits.status_code == 200, fits.text
        over = await post(base, "/rerank", {"model": MINILM, "query": QUERY, "documents": [RELATED, MIDDLE, UNRELATED]})
        assert over.status_code == 400
        assert over.json()["error"]["param"] == "documents"
        assert "at most 3 texts" in over.json()["error"]["message"]
        pairs = await post(base, "/score", {"model": MINILM, "text_1": [QUERY, QUERY], "text_2": [RELATED, MIDDLE]})
        assert pairs.status_code == 400
        assert pairs.json()["error"]["param"] == "text_2"
