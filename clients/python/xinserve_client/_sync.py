"""The blocking client, over ``grpc`` (sync)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

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
from .errors import NotFoundError, from_rpc_error

T = TypeVar("T")


class ResponseStream(Generic[T]):
    """An iterator over the messages of a server-streaming call.

    Iterate it (``for msg in stream``) to receive messages as they arrive. ``close()`` —
    also called on leaving a ``with`` block and when the object is garbage-collected —
    cancels the RPC, which makes the server abort the engine request at once; iteration then
    simply ends (no exception). A server or transport error raises a
    :class:`~xinserve_client.XinserveError` subclass from ``next()``.

    Attributes:
        request_id: the request id sent as ``x-request-id`` (None if none was sent).
    """

    def __init__(self, call: Any, request_id: str | None) -> None:
        self._call = call
        self._closed = False
        self.request_id = request_id

    def __iter__(self) -> ResponseStream[T]:
        return self

    def __next__(self) -> T:
        if self._closed:
            raise StopIteration
        try:
            return next(self._call)  # type: ignore[no-any-return]
        except grpc.RpcError as exc:
            if self._closed:
                raise StopIteration from None
            raise from_rpc_error(exc, self.request_id) from None

    def close(self) -> None:
        """Cancel the call (idempotent; a no-op once the stream has ended)."""
        self._closed = True
        self._call.cancel()

    cancel = close

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    def __enter__(self) -> ResponseStream[T]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._call.cancel()
        except Exception:  # noqa: S110 - interpreter shutdown
            pass


class XinserveClient(_ClientBase):
    """Blocking client for an xinserve server.

    Example::

        with XinserveClient("127.0.0.1:50051") as client:
            reply = client.generate("xinserve-tiny-llama", "Hello", max_tokens=16, temperature=0.0)
            print(reply.outputs[0].text)
            with client.generate_stream("xinserve-tiny-llama", "Hello", max_tokens=64) as stream:
                for delta in stream:
                    print(delta.text, end="", flush=True)

    Results are the generated ``xinserve.v1`` messages (``GenerateResponse``, ``EmbedResponse``,
    ...) except where a method says otherwise. Every failed call raises a subclass of
    :class:`~xinserve_client.XinserveError`; raw ``grpc.RpcError`` never escapes. Calling a
    method after :meth:`close` raises ``RuntimeError``.

    Args:
        target: ``host:port`` (any gRPC target string). Default ``127.0.0.1:50051``.
        tls: force TLS on (True) or off (False); by default TLS is on when ``ca_cert`` or
            ``client_cert`` is given, else the channel is plaintext.
        ca_cert: PEM of the CA that signed the server certificate (bytes, PEM text or a file
            path); None uses the system roots when TLS is on.
        client_cert, client_key: PEM client certificate chain and private key for mTLS.
        token: bearer token, or a zero-argument callable returning the current one (called
            for every call, so it can refresh; keep it fast). Sent as
            ``authorization: Bearer <token>``: as call credentials over TLS; as plain
            metadata on plaintext channels, which is allowed only to loopback targets
            (127.0.0.0/8, ::1, localhost, unix:) unless ``allow_insecure_token=True``. If the
            callable raises, the call fails with UnavailableError naming the cause.
        server_name: TLS name to verify the server certificate against, when it differs
            from the target host.
        allow_insecure_token: send the token over plaintext to a non-loopback target.
        timeout: default deadline in seconds for inference calls (generate, chat, embed and
            their streams); None (default) = no deadline.
        control_timeout: default deadline in seconds for the other calls (models, server
            info, load, health, tokenize, detokenize, abort). Default 30.
        wait_for_ready: queue calls while the channel connects instead of failing fast with
            UNAVAILABLE.
        max_receive_message_bytes, max_send_message_bytes: message size limits (64 MiB).
        keepalive_time_s, keepalive_timeout_s: HTTP/2 keepalive ping interval (30 s; the
            server permits >= 10 s, with or without calls) and ack timeout (10 s).
        channel_options: extra ``(name, value)`` gRPC channel options, appended last.
        metadata: ``(key, value)`` pairs sent with every call.
        generate_request_ids: when a call has no ``request_id``, send a random one (uuid4
            hex) as ``x-request-id`` so errors and streams carry it.

    Raises:
        ValueError: inconsistent options (cert without key, token over plaintext to a
            remote target, unreadable PEM file, non-positive timeout).
    """

    def _open(self) -> None:
        cfg = self._config
        if cfg.credentials is not None:
            self._channel = grpc.secure_channel(cfg.target, cfg.credentials, options=cfg.options)
        else:
            self._channel = grpc.insecure_channel(cfg.target, options=cfg.options)
        self._inference = inference_pb2_grpc.InferenceServiceStub(self._channel)
        self._models = model_pb2_grpc.ModelServiceStub(self._channel)
        self._server = server_pb2_grpc.ServerServiceStub(self._channel)
        self._health = self._channel.unary_unary(
            HEALTH_CHECK_METHOD,
            request_serializer=encode_health_request,
            response_deserializer=decode_health_response,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the channel, cancelling any call still in flight. Idempotent."""
        if not self._closed:
            self._closed = True
            self._channel.close()

    def __enter__(self) -> XinserveClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        self.close()

    def _unary(self, method: Any, request: Any, kwargs: dict[str, Any], rid: str | None) -> Any:
        try:
            return method(request, **kwargs)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, rid) from None

    def _stream(self, method: Any, request: Any, kwargs: dict[str, Any], rid: str | None) -> Any:
        try:
            call = method(request, **kwargs)
        except grpc.RpcError as exc:  # pragma: no cover - grpc reports errors on iteration
            raise from_rpc_error(exc, rid) from None
        return ResponseStream(call, rid)

    # -- inference ---------------------------------------------------------------------

    def generate(
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
        """
        request = self._generate_request(model, prompt, sampling_params, request_id, sampling)
        kwargs, rid = self._call_args(
            timeout=timeout, control=False, request_id=request_id, traceparent=traceparent,
            tracestate=tracestate, metadata=metadata,
        )  # fmt: skip
        return self._unary(self._inference.Generate, request, kwargs, rid)  # type: ignore[no-any-return]

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
    ) -> ResponseStream[inference_pb2.GenerateStreamResponse]:
        """Generate, streaming deltas as the engine produces them (``GenerateStream``).

        Arguments as :meth:`generate`. The timeout covers the whole stream.

        Returns:
            A :class:`ResponseStream` of ``xinserve.v1.GenerateStreamResponse``: per message
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

    def chat(
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
        return self._unary(self._inference.Chat, request, kwargs, rid)  # type: ignore[no-any-return]

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
    ) -> ResponseStream[inference_pb2.ChatStreamResponse]:
        """Streaming form of :meth:`chat` (``ChatStream``).

        Returns:
            A :class:`ResponseStream` of ``xinserve.v1.ChatStreamResponse`` (fields as in
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

    def embed(
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
        return self._unary(self._inference.Embed, request, kwargs, rid)  # type: ignore[no-any-return]

    def tokenize(
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
        return self._unary(self._inference.Tokenize, request, kwargs, rid)  # type: ignore[no-any-return]

    def detokenize(
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
        response = self._unary(self._inference.Detokenize, request, kwargs, rid)
        return str(response.text)

    def abort(
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
        response = self._unary(self._inference.Abort, inference_pb2.AbortRequest(request_id=request_id), kwargs, rid)
        return bool(response.aborted)

    # -- models and server -------------------------------------------------------------

    def list_models(
        self, *, timeout: Timeout = DEFAULT, metadata: Sequence[tuple[str, str]] | None = None
    ) -> list[model_pb2.Model]:
        """All configured models, served or not (``ListModels``).

        Returns:
            A list of ``xinserve.v1.Model`` (name, kind, state, verification_status, ...).
        """
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        response = self._unary(self._models.ListModels, model_pb2.ListModelsRequest(), kwargs, rid)
        return list(response.models)

    def get_model(
        self, name: str, *, timeout: Timeout = DEFAULT, metadata: Sequence[tuple[str, str]] | None = None
    ) -> model_pb2.Model:
        """One model by served name (``GetModel``).

        Returns:
            The ``xinserve.v1.Model``.

        Raises:
            NotFoundError: no such model.
        """
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        response = self._unary(self._models.GetModel, self._get_model_request(name), kwargs, rid)
        return response.model  # type: ignore[no-any-return]

    def server_info(
        self, *, timeout: Timeout = DEFAULT, metadata: Sequence[tuple[str, str]] | None = None
    ) -> server_pb2.GetServerInfoResponse:
        """Server version, schema revision, backend, devices and capabilities (``GetServerInfo``)."""
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        return self._unary(self._server.GetServerInfo, server_pb2.GetServerInfoRequest(), kwargs, rid)  # type: ignore[no-any-return]

    def attestation(self, nonce: bytes | None = None, *, timeout: Timeout = DEFAULT) -> Any:
        """TEE evidence bound to this TLS channel and the served models (``GetAttestation``).

        Returns an :class:`xinserve_client.attestation.Attestation`; check it with its ``binds``
        and a :class:`~xinserve_client.attestation.Verifier`. ``nonce`` defaults to 32 random bytes.
        Raises FailedPreconditionError (no TEE, or not over TLS), InvalidArgumentError (nonce
        outside 16..64 bytes).
        """
        from .attestation import attestation

        return attestation(self, nonce, timeout=timeout)

    def check_compatibility(self, *, timeout: Timeout = DEFAULT) -> server_pb2.GetServerInfoResponse:
        """Check that the server still supports this client's contract revision.

        Returns:
            The server's ``GetServerInfoResponse``.

        Raises:
            IncompatibleServerError: the server's ``min_client_revision`` is above
                :data:`~xinserve_client.SCHEMA_REVISION`.
            XinserveError: the GetServerInfo call failed.
        """
        info = self.server_info(timeout=timeout)
        check_schema(info)
        return info

    def load(
        self,
        model: str = "",
        *,
        timeout: Timeout = DEFAULT,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> server_pb2.GetLoadResponse:
        """Current load (``GetLoad``): ``running``, ``waiting``, ``kv_cache_usage`` (0..1),
        ``in_flight``, ``queued``. ``model`` limits it to one model ("" = all)."""
        kwargs, rid = self._call_args(timeout=timeout, control=True, metadata=metadata)
        return self._unary(self._server.GetLoad, self._load_request(model), kwargs, rid)  # type: ignore[no-any-return]

    def health(
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
            return str(self._unary(self._health, service, kwargs, rid))
        except NotFoundError:
            return "SERVICE_UNKNOWN"
