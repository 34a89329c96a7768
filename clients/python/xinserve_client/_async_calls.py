"""The calls of both clients, written once: ``_AsyncCalls`` in ``_async_calls.py`` is the
source, and ``_SyncCalls`` in ``_sync_calls.py`` is generated from it by
``scripts/gen-sync-client`` with unasync (``async``/``await`` removed, ``AsyncResponseStream``
read as ``ResponseStream``). Opening and closing the channel are each client's own
(``_async.py``, ``_sync.py``)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any, TypeVar

import grpc

from xinserve.v1 import (
    inference_pb2,
    inference_pb2_grpc,
    model_pb2,
    model_pb2_grpc,
    sampling_pb2,
    server_pb2,
    server_pb2_grpc,
)

from ._base import _ClientBase
from ._common import (
    DEFAULT,
    HEALTH_CHECK_METHOD,
    ChatMessageLike,
    Prompt,
    Timeout,
    ToolChoiceLike,
    ToolLike,
    check_schema,
    decode_health_response,
    encode_health_request,
)
from ._streams import AsyncResponseStream
from .errors import NotFoundError, from_rpc_error

_Client = TypeVar("_Client", bound="_AsyncCalls")


class _AsyncCalls(_ClientBase):
    """Every call of the client, over the stubs of the channel that the client's ``_new_channel`` opens."""

    _channel: Any
    _inference: inference_pb2_grpc.InferenceServiceStub
    _models: model_pb2_grpc.ModelServiceStub
    _server: server_pb2_grpc.ServerServiceStub
    _health: Any

    def _open(self) -> None:
        self._channel = self._new_channel()
        self._inference = inference_pb2_grpc.InferenceServiceStub(self._channel)
        self._models = model_pb2_grpc.ModelServiceStub(self._channel)
        self._server = server_pb2_grpc.ServerServiceStub(self._channel)
        self._health = self._channel.unary_unary(
            HEALTH_CHECK_METHOD,
            request_serializer=encode_health_request,
            response_deserializer=decode_health_response,
        )

    def _new_channel(self) -> Any:
        """The client's channel to ``self._config.target`` (each client defines it)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Close the channel (each client defines it)."""
        raise NotImplementedError

    async def __aenter__(self: _Client) -> _Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        await self.close()

    async def _unary(self, method: Any, request: Any, kwargs: dict[str, Any], rid: str | None) -> Any:
        try:
            return await method(request, **kwargs)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, rid) from None

    def _stream(self, method: Any, request: Any, kwargs: dict[str, Any], rid: str | None) -> Any:
        try:
            call = method(request, **kwargs)
        except grpc.RpcError as exc:  # pragma: no cover - grpc reports errors on iteration
            raise from_rpc_error(exc, rid) from None
        return AsyncResponseStream(call, rid)

    # -- inference ---------------------------------------------------------------------

    async def generate(
        self,
        model: str,
        prompt: Prompt,
        *,
        sampling_params: sampling_pb2.SamplingParams | None = None,
        request_id: str | None = None,
        timeout: Timeout = DEFAULT,
        traceparent: str | None = None,
        tracestate: str | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        **sampling: Any,
    ) -> inference_pb2.GenerateResponse:
        """Generate completions and return them whole (``Generate``).

        Args:
            model: served model name.
            prompt: the prompt text, or a sequence of token ids.
            sampling_params: a prebuilt ``SamplingParams``; keyword sampling arguments are
                applied on top of a copy of it.
            request_id: caller-chosen id (1..128 printable ASCII), sent in the request and
                as ``x-request-id``; usable with :meth:`abort`.
            timeout: deadline in seconds; None = none; default: the client's ``timeout``.
            traceparent, tracestate: W3C trace context passed through as metadata.
            metadata: extra ``(key, value)`` metadata for this call.
            **sampling: vLLM-named sampling parameters (``max_tokens``, ``temperature``,
                ``top_p``, ``top_k``, ``seed``, ``stop``, ``n``, ``logprobs``, ...; see
                :func:`~xinserve_client.build_sampling_params`). None leaves a field unset;
                ``temperature=0.0`` is sent explicitly (greedy).

        Returns:
            ``xinserve.v1.GenerateResponse``: ``outputs[i].text`` / ``.token_ids`` /
            ``.finish_reason``, and ``usage`` (token counts).

        Raises:
            InvalidArgumentError: bad parameters (``field_violations`` names them).
            NotFoundError: unknown model or LoRA adapter.
            ResourceExhaustedError: admission full (``retry_after`` seconds).
            DeadlineExceededError, UnavailableError, XinserveError: other failures.
            TypeError: an unknown sampling keyword.
            ValueError: before sending, a ``request_id`` outside 1..128 printable ASCII without
                spaces, or a ``traceparent``, ``tracestate``, token or ``metadata`` pair that gRPC
                metadata cannot carry.
        """
        request = self._generate_request(model, prompt, sampling_params, request_id, sampling)
        kwargs, rid = self._call_args(
            timeout=timeout, control=False, request_id=request_id, traceparent=traceparent,
            tracestate=tracestate, metadata=metadata,
        )  # fmt: skip
        return await self._unary(self._inference.Generate, request, kwargs, rid)  # type: ignore[no-any-return]

    def generate_stream(
        self,
        model: str,
        prompt: Prompt,
        *,
        sampling_params: sampling_pb2.SamplingParams | None = None,
        request_id: str | None = None,
        timeout: Timeout = DEFAULT,
        traceparent: str | None = None,
        tracestate: str | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        **sampling: Any,
    ) -> AsyncResponseStream[inference_pb2.GenerateStreamResponse]:
        """Generate, streaming deltas as the engine produces them (``GenerateStream``).

        Arguments as :meth:`generate`. The timeout covers the whole stream.

        Returns:
            A stream of ``xinserve.v1.GenerateStreamResponse`` (an :class:`AsyncResponseStream` from
            the asyncio client, a :class:`ResponseStream` from the blocking one): per message
            ``index``, ``text`` and ``token_ids`` deltas; ``finish_reason`` once per index on
            its last message; ``usage`` on the final message. ``close()`` cancels the call.

        Raises:
            (while iterating) the exceptions listed for :meth:`generate`.
        """
        request = self._generate_request(model, prompt, sampling_params, request_id, sampling)
        kwargs, rid = self._call_args(
            timeout=timeout, control=False, request_id=request_id, traceparent=traceparent,
            tracestate=tracestate, metadata=metadata,
        )  # fmt: skip
        return self._stream(self._inference.GenerateStream, request, kwargs, rid)  # type: ignore[no-any-return]

    async def chat(
        self,
        model: str,
        messages: Sequence[ChatMessageLike],
        *,
        add_generation_prompt: bool | None = None,
        allow_special_tokens: bool | None = None,
        tools: Sequence[ToolLike] | None = None,
        tool_choice: ToolChoiceLike | None = None,
        parallel_tool_calls: bool | None = None,
        sampling_params: sampling_pb2.SamplingParams | None = None,
        request_id: str | None = None,
        timeout: Timeout = DEFAULT,
        traceparent: str | None = None,
        tracestate: str | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        **sampling: Any,
    ) -> inference_pb2.ChatResponse:
        """Reply to a conversation; the server applies the model's chat template (``Chat``).

        Args:
            messages: ``ChatMessage`` protos, ``{"role": ..., "content": ...}`` dicts or
                ``(role, content)`` tuples; role is system/user/assistant/tool.
            add_generation_prompt: append the assistant-turn opener (server default: true).
            allow_special_tokens: let contents carry the tokenizer's special-token strings as
                control tokens (server default: false, such content is INVALID_ARGUMENT).
            tools: functions the model may call (``Tool`` protos or OpenAI ``tools`` dicts),
                shown to the chat template. An assistant message's calls go in its dict as
                ``"tool_calls": [{"id", "name", "arguments"}]`` (arguments: JSON text), a tool
                result as ``{"role": "tool", "tool_call_id", "content"}``.
            tool_choice: ``"none"``, ``"auto"`` (needs the model's tool-call parser),
                ``"required"`` or ``{"type": "function", "function": {"name": ...}}``; the last
                two are forced by structured output: the reply's text is then vLLM's
                ``[{"name", "parameters"}]`` JSON, or the named function's arguments object,
                and ``outputs[i].tool_calls`` the calls read from it.
            parallel_tool_calls: false limits ``"required"`` to one call.
            Others: as :meth:`generate`.

        Returns:
            ``xinserve.v1.ChatResponse`` (``outputs``, ``usage``).

        Raises:
            As :meth:`generate`; FailedPreconditionError for a model that cannot chat.
        """
        request = self._chat_request(
            model, messages, sampling_params, request_id, add_generation_prompt, sampling, allow_special_tokens,
            tools, tool_choice, parallel_tool_calls,
        )  # fmt: skip
        kwargs, rid = self._call_args(
            timeout=timeout, control=False, request_id=request_id, traceparent=traceparent,
            tracestate=tracestate, metadata=metadata,
        )  # fmt: skip
        return await self._unary(self._inference.Chat, request, kwargs, rid)  # type: ignore[no-any-return]

    def chat_stream(
        self,
        model: str,
        messages: Sequence[ChatMessageLike],
        *,
        add_generation_prompt: bool | None = None,
        allow_special_tokens: bool | None = None,
        tools: Sequence[ToolLike] | None = None,
        tool_choice: ToolChoiceLike | None = None,
        parallel_tool_calls: bool | None = None,
        sampling_params: sampling_pb2.SamplingParams | None = None,
        request_id: str | None = None,
        timeout: Timeout = DEFAULT,
        traceparent: str | None = None,
        tracestate: str | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        **sampling: Any,
    ) -> AsyncResponseStream[inference_pb2.ChatStreamResponse]:
        """Streaming form of :meth:`chat` (``ChatStream``).

        Returns:
            A stream of ``xinserve.v1.ChatStreamResponse`` (stream and fields as in
            :meth:`generate_stream`). ``close()`` cancels the call.
        """
        request = self._chat_request(
            model, messages, sampling_params, request_id, add_generation_prompt, sampling, allow_special_tokens,
            tools, tool_choice, parallel_tool_calls,
        )  # fmt: skip
        kwargs, rid = self._call_args(
            timeout=timeout, control=False, request_id=request_id, traceparent=traceparent,
            tracestate=tracestate, metadata=metadata,
        )  # fmt: skip
        return self._stream(self._inference.ChatStream, request, kwargs, rid)  # type: ignore[no-any-return]

    async def embed(
        self,
        model: str,
        inputs: str | Sequence[str],
        *,
        normalize: bool | None = None,
        request_id: str | None = None,
        timeout: Timeout = DEFAULT,
        traceparent: str | None = None,
        tracestate: str | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> inference_pb2.EmbedResponse:
        """Embed one text or several (``Embed``).

        Args:
            model: served embedding model name.
            inputs: a string or a sequence of 1..1024 non-empty strings.
            normalize: L2-normalise the vectors (None = the model's default, true for
                sentence-transformers models).
            Others: as :meth:`generate`.

        Returns:
            ``xinserve.v1.EmbedResponse``: ``embeddings[i].values`` (floats, the model's
            hidden size, e.g. 384) in input order, and ``usage.prompt_tokens``.

        Raises:
            InvalidArgumentError, NotFoundError, FailedPreconditionError (not an embedding
            model), and the others listed for :meth:`generate`.
        """
        request = self._embed_request(model, inputs, normalize, request_id)
        kwargs, rid = self._call_args(
            timeout=timeout, control=False, request_id=request_id, traceparent=traceparent,
            tracestate=tracestate, metadata=metadata,
        )  # fmt: skip
        return await self._unary(self._inference.Embed, request, kwargs, rid)  # type: ignore[no-any-return]

    async def tokenize(
        self,
        model: str,
        text: str,
        *,
        add_special_tokens: bool | None = None,
        timeout: Timeout = DEFAULT,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> inference_pb2.TokenizeResponse:
        """Tokenize text with the model's tokenizer (``Tokenize``).

        Returns:
            ``xinserve.v1.TokenizeResponse``: ``token_ids`` and ``max_model_len`` (tokens).

        Raises:
            NotFoundError, InvalidArgumentError, XinserveError.
        """
        request = self._tokenize_request(model, text, add_special_tokens)
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        return await self._unary(self._inference.Tokenize, request, kwargs, rid)  # type: ignore[no-any-return]

    async def detokenize(
        self,
        model: str,
        token_ids: Sequence[int],
        *,
        skip_special_tokens: bool | None = None,
        timeout: Timeout = DEFAULT,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> str:
        """Turn token ids back into text (``Detokenize``).

        Returns:
            The text.

        Raises:
            NotFoundError, InvalidArgumentError (an id outside the vocabulary), XinserveError.
        """
        request = self._detokenize_request(model, token_ids, skip_special_tokens)
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        response = await self._unary(self._inference.Detokenize, request, kwargs, rid)
        return str(response.text)

    async def abort(
        self,
        request_id: str,
        *,
        timeout: Timeout = DEFAULT,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> bool:
        """Abort a running request by its id (``Abort``; idempotent).

        Returns:
            True if a running request was found and aborted; False for an unknown or
            finished id.
        """
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        response = await self._unary(
            self._inference.Abort, inference_pb2.AbortRequest(request_id=request_id), kwargs, rid
        )
        return bool(response.aborted)

    # -- models and server -------------------------------------------------------------

    async def list_models(
        self, *, timeout: Timeout = DEFAULT, metadata: Sequence[tuple[str, str]] | None = None
    ) -> list[model_pb2.Model]:
        """The configured models the caller's roles grant, served or not (``ListModels``).

        Returns:
            A list of ``xinserve.v1.Model`` (name, kind, state, verification_status, ...).
        """
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        response = await self._unary(self._models.ListModels, model_pb2.ListModelsRequest(), kwargs, rid)
        return list(response.models)

    async def get_model(
        self, name: str, *, timeout: Timeout = DEFAULT, metadata: Sequence[tuple[str, str]] | None = None
    ) -> model_pb2.Model:
        """One model by served name (``GetModel``).

        Returns:
            The ``xinserve.v1.Model``.

        Raises:
            PermissionDeniedError: no role of the caller grants the model, whether or not it
                exists (UnauthenticatedError when anonymous).
            NotFoundError: no such model.
        """
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        response = await self._unary(self._models.GetModel, self._get_model_request(name), kwargs, rid)
        return response.model  # type: ignore[no-any-return]

    async def server_info(
        self, *, timeout: Timeout = DEFAULT, metadata: Sequence[tuple[str, str]] | None = None
    ) -> server_pb2.GetServerInfoResponse:
        """Server version, schema revision, backend, devices and capabilities (``GetServerInfo``)."""
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        return await self._unary(self._server.GetServerInfo, server_pb2.GetServerInfoRequest(), kwargs, rid)  # type: ignore[no-any-return]

    async def check_compatibility(self, *, timeout: Timeout = DEFAULT) -> server_pb2.GetServerInfoResponse:
        """Check that the server still supports this client's contract revision.

        Returns:
            The server's ``GetServerInfoResponse``.

        Raises:
            IncompatibleServerError: the server's ``min_client_revision`` is above
                :data:`~xinserve_client.SCHEMA_REVISION`.
            XinserveError: the GetServerInfo call failed.
        """
        info = await self.server_info(timeout=timeout)
        check_schema(info)
        return info

    async def load(
        self,
        model: str = "",
        *,
        timeout: Timeout = DEFAULT,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> server_pb2.GetLoadResponse:
        """Current load (``GetLoad``): ``running``, ``waiting``, ``kv_cache_usage`` (0..1),
        ``in_flight``, ``queued``. ``model`` limits it to one model ("" = all)."""
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        return await self._unary(self._server.GetLoad, self._load_request(model), kwargs, rid)  # type: ignore[no-any-return]

    async def health(
        self,
        service: str = "",
        *,
        timeout: Timeout = DEFAULT,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> str:
        """Standard ``grpc.health.v1.Health/Check``.

        Args:
            service: ``""`` for the whole server, or e.g. ``"xinserve.v1.InferenceService"``.

        Returns:
            ``"SERVING"``, ``"NOT_SERVING"``, ``"UNKNOWN"``, or ``"SERVICE_UNKNOWN"`` when the
            server does not know ``service`` (the health protocol answers that with NOT_FOUND).

        Raises:
            UnavailableError: the server cannot be reached.
        """
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        try:
            return str(await self._unary(self._health, service, kwargs, rid))
        except NotFoundError:
            return "SERVICE_UNKNOWN"
