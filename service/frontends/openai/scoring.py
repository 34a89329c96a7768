"""vLLM's score and rerank APIs (``POST /score``, ``/v1/score``; ``POST /rerank``,
``/v1/rerank``, ``/v2/rerank``, Jina/Cohere style) for embedding models, as vLLM 0.32 serves
them for an embedding model (``BiEncoderIOProcessor``): every text is embedded once and a pair's
score is the cosine similarity of its two embeddings, in ``[-1, 1]``. Cross-encoder
(sequence-classification) models are not served here.

Request bodies follow vLLM 0.32's ``ScoreRequest`` (one pair of fields: ``text_1``/``text_2``,
``queries``/``documents``, ``queries``/``items`` or ``data_1``/``data_2``, each a string or a
list of strings; 1:1, 1:N or N:N) and ``RerankRequest`` (``query``, ``documents``, ``top_n``:
0 for all). Replies follow ``ScoreResponse`` (``data[i].index/object/score``, ``usage``) and
``RerankResponse`` (``results[i].index/document/relevance_score`` sorted by relevance, at most
``top_n``, ``usage``); ``usage.prompt_tokens`` counts the tokens of every embedded text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from service.access.policy import AccessPolicy
from service.core.call_context import CallRecord
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError, invalid_argument
from service.frontends.openai.schemas import _Body, parse_body
from service.operations.inference import Inference
from service.runtime.model_entry import ModelEntry
from xinserve.v1 import inference_pb2

_PAIRS = (("text_1", "text_2"), ("queries", "documents"), ("queries", "items"), ("data_1", "data_2"))
"""The field pairs of vLLM 0.32's ``ScoreRequest`` forms."""

_UNSUPPORTED = (
    "truncate_prompt_tokens",
    "max_tokens_per_query",
    "max_tokens_per_doc",
    "instruction",
    "chat_template_kwargs",
    "use_activation",
    "padding",
    "truncation_side",
)
"""vLLM scoring fields that would change the texts or the score; refused when set."""

CROSS_ENCODER_NOTE = (
    "scores are served for embedding models only (cosine similarity of embeddings); "
    "cross-encoder models cannot be served here"
)

_Texts = str | list[Any] | dict[str, Any]


class ScoreBody(_Body):
    """vLLM 0.32's ``ScoreRequest``: ``model`` and one pair of text fields (``_PAIRS``)."""

    model: str
    text_1: _Texts | None = None
    text_2: _Texts | None = None
    queries: _Texts | None = None
    documents: _Texts | None = None
    items: _Texts | None = None
    data_1: _Texts | None = None
    data_2: _Texts | None = None
    user: str | None = None


class RerankBody(_Body):
    """vLLM 0.32's ``RerankRequest``: ``model``, ``query``, ``documents``, ``top_n`` (0: all)."""

    model: str
    query: _Texts
    documents: _Texts
    top_n: int = Field(default=0, ge=0)
    user: str | None = None


def _refuse(field: str, description: str) -> RpcError:
    return invalid_argument([FieldViolation(field, description)])


def _texts(value: Any, field: str) -> list[str]:
    """The strings of a score input (a string or a list of strings).

    Raises:
        RpcError: INVALID_ARGUMENT naming ``field`` or ``field[i]`` for a multimodal or other
            non-string input.
    """
    items = value if isinstance(value, list) else [value]
    for i, item in enumerate(items):
        if not isinstance(item, str):
            name = f"{field}[{i}]" if isinstance(value, list) else field
            raise _refuse(name, "must be a string (only text is scored)")
    return list(items)


def _check_unsupported(extra: dict[str, Any] | None) -> None:
    for name in _UNSUPPORTED:
        value = (extra or {}).get(name)
        if value not in (None, 0):
            raise _refuse(name, "is not supported: texts are embedded whole and scored by cosine similarity")


def score_pairs(body: ScoreBody) -> tuple[str, list[str], str, list[str]]:
    """The two fields' names and texts of a score body.

    Raises:
        RpcError: INVALID_ARGUMENT naming the field: no pair or more than one pair given, an
            empty list, lengths other than 1:1, 1:N or N:N (vLLM's rule), a non-string input,
            or a vLLM option that is not offered (``_UNSUPPORTED``).
    """
    _check_unsupported(body.model_extra)
    if body.documents is not None and body.items is not None:
        raise _refuse("items", "cannot be combined with documents")
    pairs = [p for p in _PAIRS if p != (("queries", "documents") if body.items is not None else ("queries", "items"))]
    given = [(a, b) for a, b in pairs if getattr(body, a) is not None or getattr(body, b) is not None]
    if not given:
        raise _refuse("text_1", "is required (with text_2; or queries with documents)")
    if len(given) > 1:
        raise _refuse(given[1][0], f"cannot be combined with {given[0][0]}")
    name_1, name_2 = given[0]
    for name in (name_1, name_2):
        if getattr(body, name) is None:
            raise _refuse(name, "is required")
    texts_1 = _texts(getattr(body, name_1), name_1)
    texts_2 = _texts(getattr(body, name_2), name_2)
    if not texts_1:
        raise _refuse(name_1, "at least one text is required")
    if not texts_2:
        raise _refuse(name_2, "at least one text is required")
    if len(texts_1) > 1 and len(texts_1) != len(texts_2):
        raise _refuse(
            name_2,
            f"must have as many texts as {name_1} ({len(texts_1)}) or {name_1} one text "
            f"(1:1, 1:N or N:N), got {len(texts_2)}",
        )
    return name_1, texts_1, name_2, texts_2


def rerank_texts(body: RerankBody) -> tuple[str, list[str]]:
    """The query and the documents of a rerank body.

    Raises:
        RpcError: INVALID_ARGUMENT naming ``query``, ``documents`` or ``documents[i]`` (not a
            string, no document) or an option that is not offered.
    """
    _check_unsupported(body.model_extra)
    if not isinstance(body.query, str):
        raise _refuse("query", "must be a string (only text is scored)")
    documents = _texts(body.documents, "documents")
    if not documents:
        raise _refuse("documents", "at least one document is required")
    return body.query, documents


def embed_inputs(
    model: str, name_1: str, texts_1: list[str], name_2: str, texts_2: list[str], max_inputs: int
) -> tuple[inference_pb2.EmbedRequest, list[str]]:
    """The ``EmbedRequest`` embedding ``texts_1`` then ``texts_2`` (normalized), and each
    input's field path (``text_2[1]``) to name it in a refusal.

    Raises:
        RpcError: INVALID_ARGUMENT naming ``name_2`` when the texts together pass
            ``limits.max_embed_inputs`` (``max_inputs``).
    """
    total = len(texts_1) + len(texts_2)
    if total > max_inputs:
        raise _refuse(name_2, f"at most {max_inputs} texts in {name_1} and {name_2} together, got {total}")
    paths = [f"{name_1}[{i}]" for i in range(len(texts_1))] + [f"{name_2}[{i}]" for i in range(len(texts_2))]
    request = inference_pb2.EmbedRequest(model=model, inputs=[*texts_1, *texts_2], normalize=True)
    return request, paths


def renamed(err: RpcError, paths: Sequence[str], name_2: str) -> RpcError:
    """``err`` of the Embed operation with its ``inputs[i]`` violations named by the score
    request's own fields (``paths``), ``inputs`` by ``name_2``."""
    if not err.violations:
        return err
    named: list[FieldViolation] = []
    for v in err.violations:
        field = v.field
        if field.startswith("inputs["):
            index = field[len("inputs[") :].split("]", 1)[0]
            if index.isdigit() and int(index) < len(paths):
                field = paths[int(index)]
        elif field == "inputs":
            field = name_2
        named.append(FieldViolation(field, v.description))
    return invalid_argument(named, err.reason)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0.0 when either is all zeros)."""
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    if norm == 0.0:
        return 0.0
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / norm


def pair_scores(reply: inference_pb2.EmbedResponse, count_1: int) -> list[float]:
    """The scores of the pairs (text_1[i or 0], text_2[i]) from the embeddings of all texts,
    ``count_1`` of the first field followed by those of the second."""
    vectors = [list(e.values) for e in reply.embeddings]
    first, second = vectors[:count_1], vectors[count_1:]
    if len(first) == 1:
        first = first * len(second)
    return [cosine(a, b) for a, b in zip(first, second, strict=True)]


def score_response(reply: inference_pb2.EmbedResponse, count_1: int, model: str, request_id: str) -> dict[str, Any]:
    """vLLM 0.32's ``ScoreResponse`` for the pairs' scores."""
    tokens = reply.usage.prompt_tokens
    return {
        "id": request_id,
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(pair_scores(reply, count_1))],
        "usage": {
            "prompt_tokens": tokens,
            "total_tokens": tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
        },
    }


def rerank_response(
    reply: inference_pb2.EmbedResponse, documents: list[str], top_n: int, model: str, request_id: str
) -> dict[str, Any]:
    """vLLM 0.32's ``RerankResponse``: documents sorted by relevance (stable for ties), the
    first ``top_n`` of them (all when 0)."""
    scores = pair_scores(reply, 1)
    order = sorted(range(len(documents)), key=lambda i: scores[i], reverse=True)
    if 0 < top_n < len(order):
        order = order[:top_n]
    results: list[dict[str, Any]] = [
        {"index": i, "document": {"text": documents[i], "multi_modal": None}, "relevance_score": scores[i]}
        for i in order
    ]
    tokens = reply.usage.prompt_tokens
    return {
        "id": request_id,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "results": results,
    }


def check_embedding_model(
    policy: AccessPolicy, models: Mapping[str, ModelEntry], record: CallRecord, model: str
) -> None:
    """Refuse ``model`` unless it is an embedding model, after authorizing it (so that its
    kind is told only to a caller it is granted to).

    Raises:
        RpcError: PERMISSION_DENIED/UNAUTHENTICATED (not granted); INVALID_ARGUMENT naming
            ``model``, reason WRONG_MODEL_KIND, for a generative model.
    """
    if not model:
        return
    record.model = model[:128]
    policy.authorize_model(record.principal, record.method, model)
    entry = models.get(model)
    if entry is not None and entry.kind != "embed":
        violation = FieldViolation("model", f"{model[:128]!r} is a generative model; {CROSS_ENCODER_NOTE}")
        raise invalid_argument([violation], Reason.WRONG_MODEL_KIND)


async def score(
    ops: Inference,
    policy: AccessPolicy,
    models: Mapping[str, ModelEntry],
    record: CallRecord,
    data: Any,
    max_inputs: int,
) -> Any:
    """``POST /v1/score``: the body (parsed JSON) scored by the Embed operation.

    Raises:
        RpcError: as ``score_pairs``, ``check_embedding_model`` and ``Inference.embed`` (its
            input violations named by this request's fields).
    """
    body = parse_body(ScoreBody, data)
    name_1, texts_1, name_2, texts_2 = score_pairs(body)
    check_embedding_model(policy, models, record, body.model)
    request, paths = embed_inputs(body.model, name_1, texts_1, name_2, texts_2, max_inputs)
    try:
        reply = await ops.embed(request, record)
    except RpcError as err:
        raise renamed(err, paths, name_2) from None
    return score_response(reply, len(texts_1), body.model, record.request_id or "")


async def rerank(
    ops: Inference,
    policy: AccessPolicy,
    models: Mapping[str, ModelEntry],
    record: CallRecord,
    data: Any,
    max_inputs: int,
) -> Any:
    """``POST /v1/rerank``: the documents ranked by their score against the query.

    Raises:
        RpcError: as ``rerank_texts`` (and ``top_n`` below 0 or not an integer), ``check_embedding_model``
            and ``Inference.embed`` (its input violations named ``query``/``documents[i]``).
    """
    body = parse_body(RerankBody, data)
    query, documents = rerank_texts(body)
    check_embedding_model(policy, models, record, body.model)
    request, paths = embed_inputs(body.model, "query", [query], "documents", documents, max_inputs)
    paths[0] = "query"
    try:
        reply = await ops.embed(request, record)
    except RpcError as err:
        raise renamed(err, paths, "documents") from None
    return rerank_response(reply, documents, body.top_n, body.model, record.request_id or "")
