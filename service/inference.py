"""The inference operations, transport-neutral: validate a request (in the contract's
message types) into the engine's ``GenerateInput``, drive the engine, build the replies.

Both front ends call these with the call's ``CallRecord``, which the operations fill in
(model, request id, token counts, prompt and output for the audit digest). The OpenAI
front end maps its JSON to the same request messages first, so both get the same checks.

Cancellation: when the front end cancels the task running an operation (client cancel,
deadline, HTTP disconnect), the engine's async iterator is closed from inside that task,
which aborts the engine request at once (vLLM ``AsyncLLM.generate`` aborts on
CancelledError/GeneratorExit).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import grpc

from engine_backends.protocol import Engine, GenerateInput, GenerationUpdate
from service import metrics
from service.call_context import CallRecord
from service.convert import completion_output, fill_stream_message, positions
from service.policy import AccessPolicy
from service.runtime import Runtime
from service.status import RpcError
from service.validation import (
    Violations,
    check_chat_messages,
    check_model_name,
    check_text_size,
    resolve_request_id,
    sampling_options,
)
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

_EMPTY_SAMPLING = sampling_pb2.SamplingParams()


def _audited_prompt(prompt: str | None, ids: list[int] | None, messages: list[dict[str, str]] | None) -> str | bytes:
    """What the audit log digests as the prompt: the text, the token ids, or the messages as JSON."""
    if messages is not None:
        return json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    if ids is not None:
        return ",".join(map(str, ids))
    return prompt or ""


class Inference:
    """The operations of ``xinserve.v1.InferenceService``, each taking the call's record.

    Args:
        runtime: models and their engines, limits, the running-requests table.
        policy: authorizes the model a call names.
    """

    def __init__(self, runtime: Runtime, policy: AccessPolicy) -> None:
        self._rt = runtime
        self._policy = policy
        self._limits = runtime.settings.limits
        # request id -> engine running it (shared by all front ends), for Abort and
        # for refusing duplicate ids.
        self.active = runtime.active_requests

    # -- request preparation -----------------------------------------------------------

    def prepare(self, request, info: CallRecord, *, chat: bool, stream: bool) -> tuple[Engine, GenerateInput]:
        """Validate a Generate or Chat request into the engine's input (all field violations
        at once, then the model's status).

        Raises:
            RpcError: INVALID_ARGUMENT, PERMISSION_DENIED (model not granted), NOT_FOUND,
                UNAVAILABLE, FAILED_PRECONDITION, ALREADY_EXISTS (request id running).
        """
        v = Violations()
        check_model_name(request.model, v)
        rid = resolve_request_id(request.request_id, info.request_id, v)
        info.request_id = rid
        info.model = request.model or None
        messages = None
        prompt = None
        prompt_ids = None
        if chat:
            messages = check_chat_messages(request.messages, self._limits, v)
            size = sum(len(m.content.encode("utf-8")) for m in request.messages)
            check_text_size(v, "messages", size, self._limits)
        else:
            check_text_size(v, "prompt", len(request.prompt.encode("utf-8")), self._limits)
            if request.prompt and request.prompt_token_ids:
                v.add("prompt", "set exactly one of prompt and prompt_token_ids, not both")
            elif not request.prompt and not request.prompt_token_ids:
                v.add("prompt", "one of prompt and prompt_token_ids is required")
            prompt = request.prompt or None
            prompt_ids = list(request.prompt_token_ids) or None
        # Sampling bounds are checked against the model; every field violation is reported
        # before the model's own status (unknown, loading, wrong kind).
        try:
            if request.model:
                self._policy.authorize_model(info.principal, info.method, request.model)
            engine = self._rt.engine_for(request.model, "generate")
        except RpcError:
            v.raise_if_any()
            raise
        sp = request.sampling_params if request.HasField("sampling_params") else _EMPTY_SAMPLING
        options = sampling_options(sp, engine.info, self._limits, v)
        if chat and sp.HasField("prompt_logprobs"):
            v.add("sampling_params.prompt_logprobs", "is not supported by Chat (the prompt is the rendered template)")
        v.raise_if_any()
        info.manifest_digest = self._rt.models[request.model].manifest_digest or None
        adapter = self._rt.adapter_for(request.model, options.lora_name)
        if adapter is not None:
            info.audit_detail.update(adapter.audit_detail())
        info.prompt = _audited_prompt(prompt, prompt_ids, messages)
        if rid in self.active:
            raise RpcError(
                grpc.StatusCode.ALREADY_EXISTS, f"request id {rid!r} is already running", "DUPLICATE_REQUEST_ID"
            )
        add_generation_prompt = (
            request.add_generation_prompt if chat and request.HasField("add_generation_prompt") else True
        )
        gen = GenerateInput(
            request_id=rid,
            sampling=options,
            prompt=prompt,
            prompt_token_ids=prompt_ids,
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            allow_special_tokens=bool(chat and request.allow_special_tokens),
            stream=stream,
            trace_headers=dict(info.trace_headers) or None,
        )
        return engine, gen

    async def run(self, engine: Engine, gen: GenerateInput, info: CallRecord) -> AsyncIterator[GenerationUpdate]:
        """The engine's updates, counted into the record and the metrics; closing this
        iterator aborts the engine request.

        The call's ``rpc_begin`` audit record (``AuditTrail.record_begin``) is appended while
        the engine starts and is durable before the first update is passed on, so a call
        that produces output always has a begin record ahead of it and of its ``rpc`` record.

        Raises:
            RpcError: UNAVAILABLE when the begin record cannot be written (fail-closed).
        """
        self.active[gen.request_id] = (engine, info.principal.name)
        model = engine.info.name
        started = time.monotonic()
        last_token_at: float | None = None
        audit = self._rt.audit
        begin = asyncio.ensure_future(audit.record_begin(info)) if audit is not None else None
        iterator = engine.generate(gen)
        try:
            async for update in iterator:
                if begin is not None:
                    pending, begin = begin, None
                    await pending
                produced = sum(len(c.token_ids) for c in update.completions)
                if produced:
                    now = time.monotonic()
                    if last_token_at is None:
                        metrics.TIME_TO_FIRST_TOKEN.labels(model).observe(now - started)
                    elif gen.stream:
                        metrics.INTER_TOKEN_LATENCY.labels(model).observe(now - last_token_at)
                    last_token_at = now
                    info.completion_tokens += produced
                    metrics.GENERATION_TOKENS.labels(model).inc(produced)
                for c in update.completions:
                    if c.text:
                        if gen.stream:
                            info.output_parts.setdefault(c.index, []).append(c.text)
                        else:
                            info.output_parts[c.index] = [c.text]
                if not info.prompt_tokens:
                    info.prompt_tokens = update.prompt_tokens
                    metrics.PROMPT_TOKENS.labels(model).inc(update.prompt_tokens)
                yield update
        finally:
            self.active.pop(gen.request_id, None)
            await iterator.aclose()  # type: ignore[attr-defined]
            if begin is not None:
                # The engine failed or the call was cancelled before any output: the begin
                # record still precedes the call's end record. Its own failure is reported
                # by that end record (the store is unwritable for it too).
                with contextlib.suppress(RpcError):
                    await begin

    @staticmethod
    def _usage(update: GenerationUpdate, info: CallRecord) -> common_pb2.Usage:
        return common_pb2.Usage(
            prompt_tokens=update.prompt_tokens,
            completion_tokens=info.completion_tokens,
            cached_tokens=update.cached_tokens,
        )

    # -- unary -------------------------------------------------------------------------

    async def _unary(self, request, info: CallRecord, response_cls, *, chat: bool):
        engine, gen = self.prepare(request, info, chat=chat, stream=False)
        final: GenerationUpdate | None = None
        by_index = {}
        async for update in self.run(engine, gen, info):
            for chunk in update.completions:
                by_index[chunk.index] = chunk
            final = update
        if final is None:
            raise RpcError(grpc.StatusCode.INTERNAL, "the engine returned no output", "ENGINE_NO_OUTPUT")
        response = response_cls(
            request_id=gen.request_id,
            outputs=[completion_output(by_index[i]) for i in sorted(by_index)],
            usage=self._usage(final, info),
        )
        if not chat and final.prompt_logprobs:
            response.prompt_logprobs.extend(positions(final.prompt_logprobs))
        return response

    async def generate(
        self, request: inference_pb2.GenerateRequest, info: CallRecord
    ) -> inference_pb2.GenerateResponse:
        """``Generate``: the whole completion(s)."""
        return await self._unary(request, info, inference_pb2.GenerateResponse, chat=False)

    async def chat(self, request: inference_pb2.ChatRequest, info: CallRecord) -> inference_pb2.ChatResponse:
        """``Chat``: the whole reply (or replies, for n > 1)."""
        return await self._unary(request, info, inference_pb2.ChatResponse, chat=True)

    # -- streaming ---------------------------------------------------------------------

    async def _stream(self, request, info: CallRecord, message_cls, *, chat: bool):
        engine, gen = self.prepare(request, info, chat=chat, stream=True)
        finished: set[int] = set()
        first = True
        async for update in self.run(engine, gen, info):
            messages = []
            for chunk in update.completions:
                final_for_index = chunk.finish_reason is not None and chunk.index not in finished
                if final_for_index:
                    finished.add(chunk.index)
                if not chunk.text and not chunk.token_ids and not final_for_index:
                    continue
                msg = message_cls()
                fill_stream_message(msg, gen.request_id, chunk, final_for_index)
                messages.append(msg)
            if first and not chat and update.prompt_logprobs:
                if not messages:
                    messages.append(message_cls(request_id=gen.request_id))
                messages[0].prompt_logprobs.extend(positions(update.prompt_logprobs))
            if update.finished:
                if not messages:
                    messages.append(message_cls(request_id=gen.request_id))
                messages[-1].usage.CopyFrom(self._usage(update, info))
            if messages:
                first = False
            for msg in messages:
                yield msg

    def generate_stream(
        self, request: inference_pb2.GenerateRequest, info: CallRecord
    ) -> AsyncIterator[inference_pb2.GenerateStreamResponse]:
        """``GenerateStream``: deltas; ``finish_reason`` once per index; usage on the last message."""
        return self._stream(request, info, inference_pb2.GenerateStreamResponse, chat=False)

    def chat_stream(
        self, request: inference_pb2.ChatRequest, info: CallRecord
    ) -> AsyncIterator[inference_pb2.ChatStreamResponse]:
        """``ChatStream``: as ``generate_stream`` for a chat."""
        return self._stream(request, info, inference_pb2.ChatStreamResponse, chat=True)

    # -- embeddings, tokenizer, abort ----------------------------------------------------

    async def embed(self, request: inference_pb2.EmbedRequest, info: CallRecord) -> inference_pb2.EmbedResponse:
        """``Embed``: one vector per input, in input order."""
        v = Violations()
        check_model_name(request.model, v)
        rid = resolve_request_id(request.request_id, info.request_id, v)
        info.request_id = rid
        info.model = request.model or None
        if not request.inputs:
            v.add("inputs", "at least one input is required")
        elif len(request.inputs) > self._limits.max_embed_inputs:
            v.add("inputs", f"at most {self._limits.max_embed_inputs} inputs, got {len(request.inputs)}")
        else:
            for i, text in enumerate(request.inputs):
                if not text:
                    v.add(f"inputs[{i}]", "must not be empty")
            check_text_size(v, "inputs", sum(len(t.encode("utf-8")) for t in request.inputs), self._limits)
        v.raise_if_any()
        self._policy.authorize_model(info.principal, info.method, request.model)
        engine = self._rt.engine_for(request.model, "embed")
        info.manifest_digest = self._rt.models[request.model].manifest_digest or None
        info.prompt = "\x1e".join(request.inputs)
        normalize = request.normalize if request.HasField("normalize") else None
        with self._rt.running_request(rid, engine, info.principal.name):
            result = await engine.embed(rid, list(request.inputs), normalize)
        info.prompt_tokens = result.prompt_tokens
        metrics.PROMPT_TOKENS.labels(engine.info.name).inc(result.prompt_tokens)
        return inference_pb2.EmbedResponse(
            request_id=rid,
            embeddings=[inference_pb2.Embedding(index=i, values=vec) for i, vec in enumerate(result.vectors)],
            usage=common_pb2.Usage(prompt_tokens=result.prompt_tokens),
        )

    async def tokenize(
        self, request: inference_pb2.TokenizeRequest, info: CallRecord
    ) -> inference_pb2.TokenizeResponse:
        v = Violations()
        check_model_name(request.model, v)
        check_text_size(v, "text", len(request.text.encode("utf-8")), self._limits)
        v.raise_if_any()
        info.model = request.model
        self._policy.authorize_model(info.principal, info.method, request.model)
        engine = self._rt.engine_for(request.model)
        add_special = request.add_special_tokens if request.HasField("add_special_tokens") else True
        ids = await engine.tokenize(request.text, add_special)
        return inference_pb2.TokenizeResponse(token_ids=ids, max_model_len=engine.info.max_model_len)

    async def detokenize(
        self, request: inference_pb2.DetokenizeRequest, info: CallRecord
    ) -> inference_pb2.DetokenizeResponse:
        v = Violations()
        check_model_name(request.model, v)
        v.raise_if_any()
        info.model = request.model
        self._policy.authorize_model(info.principal, info.method, request.model)
        engine = self._rt.engine_for(request.model)
        skip = request.skip_special_tokens if request.HasField("skip_special_tokens") else True
        text = await engine.detokenize(list(request.token_ids), skip)
        return inference_pb2.DetokenizeResponse(text=text)

    async def abort(self, request: inference_pb2.AbortRequest, info: CallRecord) -> inference_pb2.AbortResponse:
        """Abort a running request of the caller's (or anyone's, for a role that may act for others)."""
        v = Violations()
        if not request.request_id:
            v.add("request_id", "is required")
        elif len(request.request_id) > 128:
            v.add("request_id", "is longer than 128 characters")
        v.raise_if_any()
        info.request_id = request.request_id
        running = self.active.get(request.request_id)
        # Only the caller that started a request (or an admin) may abort it; to anyone else
        # it looks like an unknown id, so ids of other principals' requests do not leak.
        if running is None or (
            running[1] != info.principal.name and not self._policy.may_act_for_others(info.principal)
        ):
            return inference_pb2.AbortResponse(aborted=False)
        aborted = await running[0].abort(request.request_id)
        return inference_pb2.AbortResponse(aborted=aborted)
