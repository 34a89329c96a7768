"""Constructor options and request building shared by the sync and asyncio clients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xinserve.v1 import inference_pb2, model_pb2, sampling_pb2, server_pb2

from ._common import (
    ChatMessageLike,
    MiB,
    PemSource,
    Prompt,
    Timeout,
    TokenSource,
    ToolChoiceLike,
    ToolLike,
    build_sampling_params,
    call_metadata,
    channel_config,
    chat_messages,
    resolve_timeout,
    set_prompt,
    tool_choice_proto,
    tool_protos,
)

DEFAULT_TARGET = "127.0.0.1:50051"


class _ClientBase:
    """Options common to both clients: the constructor of XinserveClient and AsyncXinserveClient."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        tls: bool | None = None,
        ca_cert: PemSource | None = None,
        client_cert: PemSource | None = None,
        client_key: PemSource | None = None,
        token: TokenSource | None = None,
        server_name: str | None = None,
        allow_insecure_token: bool = False,
        timeout: float | None = None,
        control_timeout: float | None = 30.0,
        wait_for_ready: bool = False,
        max_receive_message_bytes: int = 64 * MiB,
        max_send_message_bytes: int = 64 * MiB,
        keepalive_time_s: float = 30.0,
        keepalive_timeout_s: float = 10.0,
        channel_options: Sequence[tuple[str, Any]] = (),
        metadata: Sequence[tuple[str, str]] | None = None,
        generate_request_ids: bool = True,
    ) -> None:
        """Check the options and create the channel.

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
        for name, value in (("timeout", timeout), ("control_timeout", control_timeout)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 seconds or None")
        self._config = channel_config(
            target,
            tls=tls,
            ca_cert=ca_cert,
            client_cert=client_cert,
            client_key=client_key,
            token=token,
            server_name=server_name,
            allow_insecure_token=allow_insecure_token,
            max_receive_message_bytes=max_receive_message_bytes,
            max_send_message_bytes=max_send_message_bytes,
            keepalive_time_s=keepalive_time_s,
            keepalive_timeout_s=keepalive_timeout_s,
            channel_options=channel_options,
            metadata=metadata,
        )
        self.target = target
        self.timeout = timeout
        self.control_timeout = control_timeout
        self._wait_for_ready = wait_for_ready
        self._generate_request_ids = generate_request_ids
        self._closed = False
        self._open()

    def _open(self) -> None:
        raise NotImplementedError

    # -- per-call plumbing -----------------------------------------------------------------

    def _call_args(
        self,
        *,
        timeout: Timeout,
        control: bool,
        request_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        if self._closed:
            raise RuntimeError("the xinserve client is closed")
        md, rid = call_metadata(
            self._config,
            request_id=request_id,
            traceparent=traceparent,
            tracestate=tracestate,
            metadata=metadata,
            generate_request_id=self._generate_request_ids,
        )
        kwargs: dict[str, Any] = {
            "timeout": resolve_timeout(timeout, self.control_timeout if control else self.timeout),
            "metadata": md,
        }
        if self._wait_for_ready:
            kwargs["wait_for_ready"] = True
        return kwargs, rid

    # -- request builders ----------------------------------------------------------------

    @staticmethod
    def _generate_request(
        model: str,
        prompt: Prompt,
        sampling_params: sampling_pb2.SamplingParams | None,
        request_id: str | None,
        sampling: dict[str, Any],
    ) -> inference_pb2.GenerateRequest:
        request = inference_pb2.GenerateRequest(model=model, request_id=request_id or "")
        set_prompt(request, prompt)
        params = build_sampling_params(sampling_params, **sampling)
        if params is not None:
            request.sampling_params.CopyFrom(params)
        return request

    @staticmethod
    def _chat_request(
        model: str,
        messages: Sequence[ChatMessageLike],
        sampling_params: sampling_pb2.SamplingParams | None,
        request_id: str | None,
        add_generation_prompt: bool | None,
        sampling: dict[str, Any],
        allow_special_tokens: bool | None = None,
        tools: Sequence[ToolLike] | None = None,
        tool_choice: ToolChoiceLike | None = None,
        parallel_tool_calls: bool | None = None,
    ) -> inference_pb2.ChatRequest:
        request = inference_pb2.ChatRequest(model=model, messages=chat_messages(messages), request_id=request_id or "")
        if tools:
            request.tools.extend(tool_protos(tools))
        if tool_choice is not None:
            request.tool_choice.CopyFrom(tool_choice_proto(tool_choice))
        if parallel_tool_calls is not None:
            request.parallel_tool_calls = parallel_tool_calls
        if add_generation_prompt is not None:
            request.add_generation_prompt = add_generation_prompt
        if allow_special_tokens is not None:
            request.allow_special_tokens = allow_special_tokens
        params = build_sampling_params(sampling_params, **sampling)
        if params is not None:
            request.sampling_params.CopyFrom(params)
        return request

    @staticmethod
    def _embed_request(
        model: str, inputs: str | Sequence[str], normalize: bool | None, request_id: str | None
    ) -> inference_pb2.EmbedRequest:
        request = inference_pb2.EmbedRequest(
            model=model,
            inputs=[inputs] if isinstance(inputs, str) else list(inputs),
            request_id=request_id or "",
        )
        if normalize is not None:
            request.normalize = normalize
        return request

    @staticmethod
    def _tokenize_request(model: str, text: str, add_special_tokens: bool | None) -> inference_pb2.TokenizeRequest:
        request = inference_pb2.TokenizeRequest(model=model, text=text)
        if add_special_tokens is not None:
            request.add_special_tokens = add_special_tokens
        return request

    @staticmethod
    def _detokenize_request(
        model: str, token_ids: Sequence[int], skip_special_tokens: bool | None
    ) -> inference_pb2.DetokenizeRequest:
        request = inference_pb2.DetokenizeRequest(model=model, token_ids=[int(t) for t in token_ids])
        if skip_special_tokens is not None:
            request.skip_special_tokens = skip_special_tokens
        return request

    @staticmethod
    def _get_model_request(name: str) -> model_pb2.GetModelRequest:
        return model_pb2.GetModelRequest(name=name)

    @staticmethod
    def _load_request(model: str) -> server_pb2.GetLoadRequest:
        return server_pb2.GetLoadRequest(model=model)
