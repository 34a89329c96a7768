"""The OpenAI-compatible HTTP front end: a Starlette app whose routes are thin adapters over
the call core (``service.pipeline.call_core``) and the inference operations (``service.operations.inference``).

Routes (OpenAI API reference): ``GET /v1/models``, ``GET /v1/models/{model}``,
``POST /v1/completions``, ``POST /v1/chat/completions`` (``stream: true`` → Server-Sent
Events ending in ``data: [DONE]``; ``stream_options.include_usage`` adds a usage chunk),
``POST /v1/embeddings``, ``POST /score`` and ``POST /rerank`` (vLLM's, with its
``/v1/score``, ``/v1/rerank`` and ``/v2/rerank`` aliases: ``service.frontends.openai.scoring``),
``POST /v1/responses`` (OpenAI's Responses API for text, as one
Chat call: ``service.frontends.openai.responses``); ``GET /health`` (200 while the gRPC health of ``""`` is SERVING,
else 503; ``/ping`` the same) and ``GET /health/live`` (200 while the process runs); none is
audited, each answers with an ``x-request-id`` like every reply.
A POST body must be declared ``Content-Type: application/json`` (else 415) and is validated
as strictly as OpenAI's API does (``service.frontends.openai.schemas``); a known path called with
another method is 405 with ``Allow``, any other path 404. The body's bytes are received
before admission, at most ``limits.max_http_body_bytes`` (else 413) within
``limits.http_body_timeout_s`` seconds (else 408, connection closed; uvicorn has no timeout
of its own for a request body), so a slow client never holds an admission slot; a client
that disconnects while sending it is recorded as CANCELLED.

Each call is one record in the audit log with method ``openai/<endpoint>`` (e.g.
``openai/chat.completions``; each prompt of a batched completions request is a call of its
own), counted by the same admission as gRPC, and answered with its
request id in the ``x-request-id`` header. A client that disconnects cancels the task
running its call, which aborts the engine request at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service.access.login_throttle import peer_host
from service.core.call_context import CallRecord
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError, invalid_argument
from service.frontends.openai import scoring
from service.frontends.openai.body import parse_json, read_body
from service.frontends.openai.connections import response_request_id
from service.frontends.openai.errors import http_error
from service.frontends.openai.reply_mapping import (
    StreamChunks,
    add_usage,
    chat_response,
    completion_response,
    embedding_response,
    merged_completions,
    tokenize_response,
)
from service.frontends.openai.request_mapping import (
    chat_request,
    completion_requests,
    detokenize_request,
    embed_request,
    embed_token_inputs,
    forced_tool,
    tokenize_request,
)
from service.frontends.openai.responses import (
    ResponsesBody,
    StreamEvents,
    response_object,
    responses_error,
)
from service.frontends.openai.responses import chat_request as responses_chat_request
from service.frontends.openai.schemas import (
    ChatBody,
    CompletionBody,
    DetokenizeBody,
    EmbeddingBody,
    TokenizeBody,
    parse_body,
)
from service.frontends.openai.sse import EventStream, sse_data, sse_event, unless_disconnected
from service.operations.inference import Inference
from service.operations.model_visibility import visible_model, visible_models
from service.pipeline.call_core import CallCore, Started, Transport
from service.runtime.state import Runtime
from xinserve.v1 import common_pb2, inference_pb2

CLIENT_CERT_STATE = "xinserve_client_cert_pem"
"""Key of the verified client certificate (PEM) in the ASGI scope's ``state``, set per
connection by ``service.frontends.openai.listener``."""
REQUEST_ID_HEADER = "x-request-id"


def transport_of(request: Request) -> Transport:
    """The call core's view of an HTTP request: headers (every value), peer, client cert."""
    headers: dict[str, list[str]] = {}
    for key, value in request.headers.items():
        headers.setdefault(key.lower(), []).append(value)
    client = request.client
    peer = ""
    if client is not None:
        family = "ipv6" if ":" in client.host else "ipv4"
        peer = f"{family}:{f'[{client.host}]' if family == 'ipv6' else client.host}:{client.port}"
    pem = (request.scope.get("state") or {}).get(CLIENT_CERT_STATE)
    return Transport("openai", peer, headers, {"x509_pem_cert": [pem]} if pem else {})


def _cancelled() -> grpc.StatusCode:
    return grpc.StatusCode.CANCELLED


def _unaudited_id(request: Request) -> dict[str, str]:
    """The ``x-request-id`` header of a reply that is no call (health probes): the client's
    valid id echoed, else a new one, by the rule calls follow (``response_request_id``)."""
    return {REQUEST_ID_HEADER: response_request_id(request.headers.getlist(REQUEST_ID_HEADER))}


class OpenAIRoutes:
    """The routes, over one call core and the inference operations.

    Args:
        core: the call core shared with the gRPC front end.
        inference: the inference operations.
        max_body_bytes: largest request body (``limits.max_http_body_bytes``).
        body_timeout_s: seconds a request body may take to arrive in full
            (``limits.http_body_timeout_s``).
    """

    def __init__(self, core: CallCore, inference: Inference, max_body_bytes: int, body_timeout_s: float) -> None:
        self.core = core
        self.ops = inference
        self.runtime: Runtime = core.runtime
        self.max_body = max_body_bytes
        self.body_timeout_s = body_timeout_s

    def app(self) -> Starlette:
        """The ASGI app. A path no route matches is Starlette's 404, a known path called with
        another method its 405 with ``Allow``; both reach ``_routing_error``, which answers
        in OpenAI's error shape and audits the call. A trailing slash is not redirected
        (``/v1/completions/`` is an unknown path, as on OpenAI's API)."""
        app = Starlette(
            routes=[
                Route("/v1/models", self.list_models, methods=["GET"]),
                Route("/v1/models/{model:path}", self.get_model, methods=["GET"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
                Route("/score", self.score, methods=["POST"]),
                Route("/v1/score", self.score, methods=["POST"]),
                Route("/rerank", self.rerank, methods=["POST"]),
                Route("/v1/rerank", self.rerank, methods=["POST"]),
                Route("/v2/rerank", self.rerank, methods=["POST"]),
                Route("/v1/responses", self.responses, methods=["POST"]),
                Route("/tokenize", self.tokenize, methods=["POST"]),
                Route("/detokenize", self.detokenize, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/ping", self.health, methods=["GET", "POST"]),
                Route("/health/live", self.live, methods=["GET"]),
            ],
            exception_handlers={HTTPException: self._routing_error},
        )
        app.router.redirect_slashes = False
        return app

    # -- helpers ---------------------------------------------------------------------------

    def _transport(self, request: Request) -> Transport:
        return transport_of(request)

    @staticmethod
    def _error(err: RpcError, record: CallRecord, chat: bool = False) -> JSONResponse:
        status, body, headers = http_error(err, chat=chat, token_refused=record.principal.auth_method == "token")
        if status == 408:  # the rest of the body may still arrive: the connection cannot be reused
            headers = {**headers, "connection": "close"}
        return JSONResponse(body, status, {**headers, REQUEST_ID_HEADER: record.request_id or ""})

    async def _receive(self, request: Request, started: Started) -> bytes | RpcError:
        """The body's bytes (``read_body``), or the error that refuses the call: received
        before the call is admitted, so waiting for a slow client holds no admission slot, in
        one of ``Runtime.body_reception``'s slots (bounded in all, per client address and per
        identified principal, else RESOURCE_EXHAUSTED, 429). A refused body's call is audited
        in aggregate (``BodyReception.refused``). Nothing is read for a caller whose identity
        was already refused."""
        if started.refusal is not None:
            return b""
        record = started.record
        peer = peer_host(record.peer)
        principal = record.principal.name if record.principal.auth_method != "anonymous" else None
        limits = self.runtime.settings.limits
        try:
            with self.runtime.body_reception.slot(peer, principal):
                return await read_body(
                    request,
                    self.max_body,
                    self.body_timeout_s,
                    limits.http_body_min_rate_bytes_per_s,
                    limits.http_body_rate_grace_s,
                )
        except RpcError as err:
            unaudited = self.runtime.body_reception.refused(peer, err.reason)
            if unaudited is None:
                record.audited = False
            elif unaudited:
                record.audit_detail["similar_refusals_not_audited"] = unaudited
            return err

    @staticmethod
    def _ok(body: Any, record: CallRecord) -> JSONResponse:
        return JSONResponse(body, 200, {REQUEST_ID_HEADER: record.request_id or ""})

    async def _call(
        self,
        request: Request,
        method: str,
        admitted: bool,
        operation: Callable[[CallRecord, Any], Awaitable[Any]],
    ) -> Response:
        """Run a unary call through the core: ``operation(record, json_body)`` (the body is
        None for GET)."""
        started = self.core.begin(method, self._transport(request))
        raw = await self._receive(request, started) if request.method == "POST" else b""
        try:
            # A body that did not arrive is refused after identity and authorization, unadmitted.
            admit = admitted and not isinstance(raw, RpcError)
            async with self.core.run(started, admitted=admit, cancel_code=_cancelled) as record:
                if isinstance(raw, RpcError):
                    raise raw
                data = parse_json(request, raw) if request.method == "POST" else None
                body = await unless_disconnected(request, operation(record, data))
        except RpcError as err:
            return self._error(err, started.record)
        return self._ok(body, started.record)

    # -- routes ----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        status = self.runtime.health_status()
        serving = status == health_pb2.HealthCheckResponse.SERVING
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(status or 0)
        return JSONResponse({"status": name}, 200 if serving else 503, _unaudited_id(request))

    async def unknown(self, request: Request) -> Response:
        """A path no route matches: 404 in OpenAI's error shape, audited (who probed for what)."""
        started = self.core.begin("openai/unknown", self._transport(request))
        path = request.url.path[:256]
        err = await self.core.refuse(
            started,
            RpcError(
                grpc.StatusCode.NOT_FOUND,
                f"no such endpoint: {request.method} {path}",
                Reason.UNIMPLEMENTED,
                metadata={"method": request.method[:128], "path": path[:128]},
            ),
        )
        return self._error(err, started.record)

    async def _routing_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's own routing refusals (a known path with another method: 405; anything
        else it refuses) in OpenAI's error shape with a request id, audited like ``unknown``."""
        status = exc.status_code if isinstance(exc, HTTPException) else 400
        if status != 405:
            return await self.unknown(request)
        started = self.core.begin("openai/unknown", self._transport(request))
        path = request.url.path[:256]
        refusal = f"{request.method[:16]} is not allowed on {path}"
        err = await self.core.refuse(
            started,
            RpcError(
                grpc.StatusCode.UNIMPLEMENTED,
                refusal,
                Reason.METHOD_NOT_ALLOWED,
                metadata={"method": request.method[:128], "path": path[:128]},
            ),
        )
        response = self._error(err, started.record)
        allow = (exc.headers or {}).get("Allow") if isinstance(exc, HTTPException) else None
        if allow:
            response.headers["allow"] = allow
        return response

    async def live(self, request: Request) -> Response:
        return JSONResponse({"status": "alive"}, 200, _unaudited_id(request))

    def _model_object(self, name: str) -> dict[str, Any]:
        """OpenAI's model object, with vLLM's ``max_model_len`` (clients size prompts by it);
        ``created``: when the model last became READY."""
        entry = self.runtime.models[name]
        model: dict[str, Any] = {"id": name, "object": "model", "created": entry.ready_since, "owned_by": "xinserve"}
        if entry.engine is not None:
            model["max_model_len"] = entry.engine.info.max_model_len
        return model

    async def list_models(self, request: Request) -> Response:
        async def op(record: CallRecord, _: Any) -> Any:
            entries = visible_models(
                self.core.policy, record.principal, record.method, self.runtime.models, ready_only=True
            )
            return {"object": "list", "data": [self._model_object(e.name) for e in entries]}

        return await self._call(request, "openai/models", False, op)

    async def get_model(self, request: Request) -> Response:
        name = request.path_params["model"]

        async def op(record: CallRecord, _: Any) -> Any:
            record.model = name[:128] or None
            visible_model(self.core.policy, record.principal, record.method, self.runtime.models, name, ready_only=True)
            return self._model_object(name)

        return await self._call(request, "openai/models.retrieve", False, op)

    async def embeddings(self, request: Request) -> Response:
        async def op(record: CallRecord, data: Any) -> Any:
            body = parse_body(EmbeddingBody, data)
            tokens = embed_token_inputs(body)
            reply = await self.ops.embed(embed_request(body, ""), record, tokens, body.dimensions)
            return embedding_response(reply, body.model, body.encoding_format or "float")

        return await self._call(request, "openai/embeddings", True, op)

    async def score(self, request: Request) -> Response:
        """vLLM's ``POST /score`` (and ``/v1/score``) for embedding models: cosine similarities
        of the texts' embeddings (``service.frontends.openai.scoring``), audited ``openai/score``."""

        async def op(record: CallRecord, data: Any) -> Any:
            limit = self.runtime.settings.limits.max_embed_inputs
            return await scoring.score(self.ops, self.core.policy, self.runtime.models, record, data, limit)

        return await self._call(request, "openai/score", True, op)

    async def rerank(self, request: Request) -> Response:
        """vLLM's ``POST /rerank`` (and ``/v1/rerank``, ``/v2/rerank``) for embedding models,
        audited ``openai/rerank``."""

        async def op(record: CallRecord, data: Any) -> Any:
            limit = self.runtime.settings.limits.max_embed_inputs
            return await scoring.rerank(self.ops, self.core.policy, self.runtime.models, record, data, limit)

        return await self._call(request, "openai/rerank", True, op)

    async def responses(self, request: Request) -> Response:
        """OpenAI's ``POST /v1/responses`` for text (``service.frontends.openai.responses``):
        one Chat call to the call core, admitted and audited as ``openai/responses``."""
        started = self.core.begin("openai/responses", self._transport(request))
        record = started.record
        events = self._response_events(request, started, await self._receive(request, started))
        try:
            first = await events.__anext__()
        except RpcError as err:
            return self._error(err, record, chat=True)
        if isinstance(first, dict):
            return self._ok(first, record)
        return EventStream(first, events, {REQUEST_ID_HEADER: record.request_id or ""})  # type: ignore[arg-type]

    async def _response_events(self, request: Request, started: Started, raw: bytes | RpcError) -> AsyncIterator[Any]:
        """The ``response`` object (a dict) when not streamed, else the SSE events; an error
        before the first event is raised as ``RpcError``, a later one sent as an ``error``
        event."""
        stream: StreamEvents | None = None
        result: dict[str, Any] | None = None
        try:
            async with self.core.run(started, admitted=not isinstance(raw, RpcError), cancel_code=_cancelled) as record:
                if isinstance(raw, RpcError):
                    raise raw
                body = parse_body(ResponsesBody, parse_json(request, raw))
                proto = responses_chat_request(body)
                try:
                    if not body.stream:
                        reply = await unless_disconnected(request, self.ops.chat(proto, record))
                        result = response_object(reply, body)
                    else:
                        stream = StreamEvents(body, record.request_id or "")
                        messages = self.ops.chat_stream(proto, record)
                        async with contextlib.aclosing(messages):  # type: ignore[type-var]
                            async for msg in messages:
                                for event in stream.events(msg):
                                    yield sse_event(event)
                except RpcError as err:
                    raise responses_error(err, body) from None
        except RpcError as err:
            if stream is None or not stream.started:
                raise
            _, error_body, _ = http_error(err, chat=True)
            yield sse_event(stream.error(error_body))
            return
        if result is not None:
            yield result

    async def tokenize(self, request: Request) -> Response:
        """vLLM's ``POST /tokenize`` (prompt form), as gRPC ``Tokenize``: admitted, audited."""

        async def op(record: CallRecord, data: Any) -> Any:
            reply = await self.ops.tokenize(tokenize_request(parse_body(TokenizeBody, data)), record)
            return tokenize_response(reply)

        return await self._call(request, "openai/tokenize", True, op)

    async def detokenize(self, request: Request) -> Response:
        """vLLM's ``POST /detokenize``, as gRPC ``Detokenize``: admitted, audited."""

        async def op(record: CallRecord, data: Any) -> Any:
            reply = await self.ops.detokenize(detokenize_request(parse_body(DetokenizeBody, data)), record)
            return {"prompt": reply.text}

        return await self._call(request, "openai/detokenize", True, op)

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions`` with one prompt or a batch (``_completion_events``)."""
        started = self.core.begin("openai/completions", self._transport(request))
        record = started.record
        events = self._completion_events(request, started, await self._receive(request, started))
        try:
            first = await events.__anext__()
        except RpcError as err:
            return self._error(err, record)
        if isinstance(first, dict):
            return self._ok(first, record)
        return EventStream(first, events, {REQUEST_ID_HEADER: record.request_id or ""})  # type: ignore[arg-type]

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions`` (``_chat_events``)."""
        started = self.core.begin("openai/chat.completions", self._transport(request))
        record = started.record
        events = self._chat_events(request, started)
        try:
            first = await events.__anext__()
        except RpcError as err:
            return self._error(err, record, chat=True)
        if isinstance(first, dict):  # not streamed: the whole reply
            return self._ok(first, record)
        return EventStream(first, events, {REQUEST_ID_HEADER: record.request_id or ""})  # type: ignore[arg-type]

    async def _chat_events(self, request: Request, started: Started) -> AsyncIterator[Any]:
        """One dict (the reply) for a unary chat request; SSE strings for a stream. Errors
        before the first item raise ``RpcError``; later ones become an error event."""
        sent = False
        raw = await self._receive(request, started)
        try:
            # A body that did not arrive is refused after identity and authorization, unadmitted.
            admit = not isinstance(raw, RpcError)
            async with self.core.run(started, admitted=admit, cancel_code=_cancelled) as record:
                if isinstance(raw, RpcError):
                    raise raw
                body = parse_body(ChatBody, parse_json(request, raw))
                top_n = body.top_logprobs or 0
                proto = chat_request(body, "")
                forced = forced_tool(body)
                if not body.stream:
                    reply, contents = await unless_disconnected(request, self.ops.chat_contents(proto, record))
                    result = chat_response(reply, body.model, top_n, forced, contents)
                else:
                    include_usage = bool(body.stream_options and body.stream_options.include_usage)
                    mapper = StreamChunks(
                        chat=True,
                        model=body.model,
                        request_id=record.request_id or "",
                        include_usage=include_usage,
                        top_n=top_n,
                        forced=forced,
                    )
                    messages = self.ops.chat_stream_read(proto, record)
                    async with contextlib.aclosing(messages):  # type: ignore[type-var]
                        async for msg, reading in messages:
                            for chunk in mapper.chunks(msg, reading):
                                sent = True
                                yield sse_data(chunk)
                    result = None
        except RpcError as err:
            if not sent:
                raise
            _, error_body, _ = http_error(err, chat=True)
            yield sse_data(error_body)
            yield "data: [DONE]\n\n"
            return
        if result is not None:
            yield result
        else:
            yield "data: [DONE]\n\n"

    def _prompt_calls(self, started: Started, count: int) -> list[Started]:
        """The calls a completions request runs: itself for one prompt; for a batch, one call
        per prompt with the caller's identity and request id ``<id>-<i>`` (as vLLM names a
        batch's engine requests), each authorized, admitted and audited by the call core as one
        Generate call."""
        if count == 1:
            return [started]
        record = started.record
        return [
            Started(
                dataclasses.replace(
                    record,
                    request_id=f"{record.request_id}-{i}",
                    started=time.monotonic(),
                    trace_headers=dict(record.trace_headers),
                    output_parts={},
                    audit_detail={},
                ),
                None,
                True,
            )
            for i in range(count)
        ]

    async def _prompt_reply(self, call: Started, proto: inference_pb2.GenerateRequest, index: int | None) -> Any:
        try:
            async with self.core.run(call, admitted=True, cancel_code=_cancelled) as record:
                return await self.ops.generate(proto, record)
        except RpcError as err:
            raise _in_prompt(err, index) from None

    async def _prompt_stream(
        self, call: Started, proto: inference_pb2.GenerateRequest, index: int | None, queue: asyncio.Queue
    ) -> None:
        """Put ``(index, message)`` for each message of one prompt's stream on ``queue``, then
        ``(index, None)``, or ``(index, error)`` when the call fails."""
        try:
            async with self.core.run(call, admitted=True, cancel_code=_cancelled) as record:
                async with contextlib.aclosing(self.ops.generate_stream(proto, record)) as messages:  # type: ignore[type-var]
                    async for msg in messages:
                        await queue.put((index, msg))
        except RpcError as err:
            await queue.put((index, _in_prompt(err, index)))
            return
        await queue.put((index, None))

    async def _completion_events(self, request: Request, started: Started, raw: bytes | RpcError) -> AsyncIterator[Any]:
        """``/v1/completions``: one dict (the reply) when not streamed, else SSE strings; an
        error before the first item is raised as ``RpcError``, a later one sent as an error
        event. A refusal of the request as a whole (identity, body, JSON, fields) is one call
        of the request's id; otherwise each prompt is a call of its own (``_prompt_calls``),
        run concurrently, the first to fail cancelling the others. Choices and stream chunks
        are indexed ``prompt * n + i``, usage summed, as vLLM's completions server answers
        (``OpenAIServingCompletion``)."""
        refusal: RpcError | None = raw if isinstance(raw, RpcError) else None
        protos: list[inference_pb2.GenerateRequest] = []
        body: CompletionBody | None = None
        if refusal is None and started.refusal is None and started.request_id_ok:
            try:
                body = parse_body(CompletionBody, parse_json(request, raw))  # type: ignore[arg-type]
                protos = completion_requests(body, self.runtime.settings.limits.max_completion_prompts)
                self.core.policy.authorize(started.record.principal, started.record.method)
            except RpcError as err:
                refusal = err
        if body is None or refusal is not None or not protos:
            async with self.core.run(started, admitted=False, cancel_code=_cancelled):
                raise refusal or invalid_argument([FieldViolation("prompt", "is required")])
        assert body is not None
        batch = len(protos) > 1
        calls = self._prompt_calls(started, len(protos))
        n = body.n or 1
        top_n = body.logprobs or 0
        rid = started.record.request_id or ""
        if not body.stream:
            replies = await unless_disconnected(
                request,
                _first_error(
                    [
                        self._prompt_reply(c, p, i if batch else None)
                        for i, (c, p) in enumerate(zip(calls, protos, strict=True))
                    ]
                ),
            )
            yield completion_response(merged_completions(replies, n, rid) if batch else replies[0], body.model, top_n)
            return
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        mapper = StreamChunks(chat=False, model=body.model, request_id=rid, include_usage=include_usage, top_n=top_n)
        queue: asyncio.Queue = asyncio.Queue(maxsize=2 * len(protos))
        producers = [
            asyncio.ensure_future(self._prompt_stream(c, p, i if batch else None, queue))
            for i, (c, p) in enumerate(zip(calls, protos, strict=True))
        ]
        total = common_pb2.Usage()
        running = len(producers)
        sent = False
        try:
            while running:
                index, item = await queue.get()
                if item is None:
                    running -= 1
                    continue
                if isinstance(item, RpcError):
                    raise item
                if index:
                    item.index += index * n
                if item.HasField("usage"):
                    add_usage(total, item.usage)
                    item.ClearField("usage")
                for chunk in mapper.chunks(item):
                    sent = True
                    yield sse_data(chunk)
        except RpcError as err:
            if not sent:
                raise
            _, error_body, _ = http_error(err)
            yield sse_data(error_body)
            yield "data: [DONE]\n\n"
            return
        finally:
            for producer in producers:
                producer.cancel()
            await asyncio.gather(*producers, return_exceptions=True)
        for chunk in mapper.chunks(inference_pb2.GenerateStreamResponse(request_id=rid, usage=total)):
            yield sse_data(chunk)
        yield "data: [DONE]\n\n"


def _in_prompt(err: RpcError, index: int | None) -> RpcError:
    """``err`` of a batch's prompt ``index``: a violation of the prompt names ``prompt[index]``."""
    if index is None or not err.violations:
        return err
    named = [
        FieldViolation(f"prompt[{index}]", v.description) if v.field in ("prompt", "prompt_token_ids") else v
        for v in err.violations
    ]
    return dataclasses.replace(invalid_argument(named, err.reason), code=err.code, metadata=err.metadata)


_T = TypeVar("_T")


async def _first_error(calls: list[Awaitable[_T]]) -> list[_T]:
    """The results of ``calls``, run concurrently, in order; the first to fail (the lowest
    index among those failing together) cancels the rest and its error is raised. Cancelled
    from outside, it cancels them all and waits for their cleanup."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task in done and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
