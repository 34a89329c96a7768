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
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from engine_backends.protocol import Engine, GenerateInput, GenerationUpdate
from service.access.login_throttle import peer_host
from service.access.policy import AccessPolicy
from service.core import metrics
from service.core.call_context import CallRecord
from service.core.convert import extend_positions_bounded, fill_completion_output_bounded, fill_stream_message
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError
from service.operations.tools import (
    AutoReading,
    ToolDelta,
    ToolPlan,
    add_history_tool_fields,
    check_auto,
    check_tools,
    forced_calls,
)
from service.operations.validation import (
    REQUEST_ID,
    REQUEST_ID_RULE,
    Violations,
    check_chat_messages,
    check_model_name,
    check_text_size,
    check_token_ids,
    resolve_request_id,
    sampling_options,
)
from service.runtime.state import Runtime
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

_EMPTY_SAMPLING = sampling_pb2.SamplingParams()


def _audited_prompt(
    prompt: str | None, ids: list[int] | None, messages: list[dict[str, Any]] | None, tools: list[dict[str, Any]] | None
) -> str | bytes:
    """What the audit log digests as the prompt: the text, the token ids, or the messages as
    JSON (with tools: ``{"messages": [...], "tools": [...]}`` as JSON)."""
    if messages is not None:
        shown: Any = {"messages": messages, "tools": tools} if tools else messages
        return json.dumps(shown, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    if ids is not None:
        return ",".join(map(str, ids))
    return prompt or ""


def _count_tokens(update: GenerationUpdate, info: CallRecord, model: str) -> int:
    """Add ``update``'s generated tokens (and, once, its prompt tokens) to the call's record
    and, once, its prompt tokens to the prompt-token counter; returns the tokens it generated.
    The generated-token counter is advanced once per call, by ``Inference.run``."""
    produced = 0
    for c in update.completions:
        produced += len(c.token_ids)
    info.completion_tokens += produced
    if not info.prompt_tokens:
        info.prompt_tokens = update.prompt_tokens
        metrics.PROMPT_TOKENS.labels(model).inc(update.prompt_tokens)
    return produced


# A cancelled unary call waits at most this long for its aborted engine request's last
# update, asking the engine to abort again every _ABORT_RETRY_S (the request may not have
# reached the engine's scheduler when the first abort was sent).
_ABORTED_OUTPUT_WAIT_S = 5.0
_ABORT_RETRY_S = 0.25


async def _counted_on_cancel(
    engine: Engine, request_id: str, iterator: AsyncIterator[GenerationUpdate], info: CallRecord
) -> AsyncIterator[GenerationUpdate]:
    """``iterator``'s updates for a unary call, whose engine sends its output only when the
    request ends (vLLM ``RequestOutputKind.FINAL_ONLY``). When the call is cancelled (deadline,
    client cancel, end of the drain grace) the engine request is aborted with
    ``Engine.abort`` first: the engine then ends ``iterator`` with what it had generated (as
    after an ``Abort`` call), whose tokens are counted into ``info`` (not its text: the client
    never receives it). Each update is awaited in a task of its own, so the cancellation
    reaches this generator and not the engine's iterator.

    Raises:
        asyncio.CancelledError: re-raised once the aborted request is counted.
    """
    model = engine.info.name
    while True:
        step = asyncio.ensure_future(_next_update(iterator))
        try:
            update = await asyncio.shield(step)
        except asyncio.CancelledError:
            last = await _aborted_output(engine, request_id, step)
            if last is not None:
                _count_tokens(last, info, model)
            raise
        if update is None:
            return
        yield update


async def _next_update(iterator: AsyncIterator[GenerationUpdate]) -> GenerationUpdate | None:
    """The iterator's next update, or None at its end."""
    return await anext(iterator, None)


async def _aborted_output(engine: Engine, request_id: str, step: asyncio.Future) -> GenerationUpdate | None:
    """Abort ``request_id`` and return what ``step`` (the iterator's pending next update)
    yields then: the request's output so far. None when the engine had no such request
    running (it had not reached the engine, or just ended), could not be asked, or did
    not answer within ``_ABORTED_OUTPUT_WAIT_S`` (``step`` is then cancelled, and the
    engine request with it)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + _ABORTED_OUTPUT_WAIT_S
    try:
        while not step.done() and loop.time() < until:
            try:
                if not await engine.abort(request_id):
                    break
            except Exception:  # a dead engine: nothing more to count
                break
            await asyncio.wait({step}, timeout=_ABORT_RETRY_S)
    finally:
        if not step.done():
            step.cancel()
            await asyncio.wait({step})
    if step.cancelled() or step.exception() is not None:
        return None
    return step.result()


def request_owner(info: CallRecord) -> str:
    """Whose a running request id is (``Runtime.claim_request``): the principal's name; for
    an anonymous caller, ``anonymous@<peer host>`` (``login_throttle.peer_host``), so
    anonymous callers on different hosts neither collide nor abort each other's requests."""
    if info.principal.auth_method == "anonymous":
        return f"{info.principal.name}@{peer_host(info.peer)}"
    return info.principal.name


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

    # -- request preparation -----------------------------------------------------------

    def prepare(self, request, info: CallRecord, *, chat: bool, stream: bool) -> tuple[Engine, GenerateInput]:
        """As ``_prepare``, without the tool plan."""
        engine, gen, _ = self._prepare(request, info, chat=chat, stream=stream)
        return engine, gen

    def _prepare(
        self, request, info: CallRecord, *, chat: bool, stream: bool
    ) -> tuple[Engine, GenerateInput, ToolPlan]:
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
        plan = ToolPlan(None, "none")
        if chat:
            messages = check_chat_messages(request.messages, self._limits, v)
            size = sum(len(m.content.encode("utf-8")) for m in request.messages)
            size += add_history_tool_fields(request, messages, v)
            check_text_size(v, "messages", size, self._limits)
            plan = check_tools(request, v, self._limits)
        else:
            check_text_size(v, "prompt", len(request.prompt.encode("utf-8")), self._limits)
            if request.prompt and request.prompt_token_ids:
                v.add("prompt", "set exactly one of prompt and prompt_token_ids, not both")
            elif not request.prompt and not request.prompt_token_ids:
                v.add("prompt", "one of prompt and prompt_token_ids is required")
            check_token_ids(v, "prompt_token_ids", len(request.prompt_token_ids), self._limits)
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
        check_auto(plan, engine.info.tool_call_parser, v)
        if plan.mode == "auto" and not sp.HasField("skip_special_tokens"):
            # As vLLM's tool parsers adjust the request: tool-call markers may be special tokens.
            kept = sampling_pb2.SamplingParams()
            kept.CopyFrom(sp)
            kept.skip_special_tokens = False
            sp = kept
        if plan.schema is not None:
            if sp.WhichOneof("structured_output") is not None:
                v.add("tool_choice", f"{plan.mode} tool choice cannot be combined with structured output")
            else:
                forced = sampling_pb2.SamplingParams()
                forced.CopyFrom(sp)
                forced.json_schema = plan.schema
                sp = forced
        options = sampling_options(sp, engine.info, self._limits, v)
        if plan.schema is not None:
            # The forced schema's own bounds: a refusal of it is one of the tools' together.
            forced_field = "sampling_params.json_schema"
            v.items = [
                FieldViolation("tools", f"the schema forced from them (tool_choice {plan.mode}) {item.description}")
                if item.field == forced_field
                else item
                for item in v.items
            ]
        if chat and sp.HasField("prompt_logprobs"):
            v.add("sampling_params.prompt_logprobs", "is not supported by Chat (the prompt is the rendered template)")
        v.raise_if_any()
        info.manifest_digest = self._rt.models[request.model].manifest_digest or None
        adapter = self._rt.adapter_for(request.model, options.lora_name)
        if adapter is not None:
            info.audit_detail.update(adapter.audit_detail())
        info.prompt = _audited_prompt(prompt, prompt_ids, messages, plan.tools)
        if self._rt.running_for(rid, request_owner(info)):
            raise RpcError(
                grpc.StatusCode.ALREADY_EXISTS, f"request id {rid!r} is already running", Reason.DUPLICATE_REQUEST_ID
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
            tools=plan.tools,
            add_generation_prompt=add_generation_prompt,
            allow_special_tokens=bool(chat and request.allow_special_tokens),
            refuse_prompt_special_tokens=self._limits.refuse_special_tokens_in_prompt,
            stream=stream,
            trace_headers=dict(info.trace_headers) or None,
        )
        return engine, gen, plan

    async def run(self, engine: Engine, gen: GenerateInput, info: CallRecord) -> AsyncIterator[GenerationUpdate]:
        """The engine's updates, counted into the record and the metrics; closing this
        iterator aborts the engine request.

        The call's ``rpc_begin`` audit record (``AuditTrail.record_begin``) is appended while
        the engine starts and is durable before the first update is passed on, so a call
        that produces output always has a begin record ahead of it and of its ``rpc`` record.

        Per update, only what must be: the record's token count, the generated text kept for
        the audit digest (a list of deltas per completion, joined once when the call ends),
        time to first token and, when streaming, the inter-token latency (one histogram
        child looked up per call). The generated-token counter is advanced once, when the
        call ends (completed, failed or cancelled), by the tokens the record counted.

        Raises:
            RpcError: UNAVAILABLE when the begin record cannot be written (fail-closed).
        """
        rid, owner = gen.request_id, request_owner(info)
        engine_id = self._rt.claim_request(rid, engine, owner)
        if engine_id != rid:
            gen = dataclasses.replace(gen, request_id=engine_id)
        model = engine.info.name
        stream = gen.stream
        inter_token = metrics.INTER_TOKEN_LATENCY.labels(model) if stream else None
        counted_before = info.completion_tokens
        started = time.monotonic()
        last_token_at: float | None = None
        outputs = info.output_parts
        audit = self._rt.audit
        begin = asyncio.ensure_future(audit.record_begin(info)) if audit is not None else None
        iterator = engine.generate(gen)
        updates = iterator if stream else _counted_on_cancel(engine, gen.request_id, iterator, info)
        try:
            async for update in updates:
                if begin is not None:
                    pending, begin = begin, None
                    await pending
                if _count_tokens(update, info, model):
                    now = time.monotonic()
                    if last_token_at is None:
                        metrics.TIME_TO_FIRST_TOKEN.labels(model).observe(now - started)
                    elif inter_token is not None:
                        inter_token.observe(now - last_token_at)
                    last_token_at = now
                for c in update.completions:
                    if c.text:
                        parts = outputs.get(c.index)
                        if parts is None:
                            outputs[c.index] = [c.text]
                        elif stream:
                            parts.append(c.text)
                        else:
                            parts[:] = [c.text]
                yield update
        finally:
            generated = info.completion_tokens - counted_before
            if generated:
                metrics.GENERATION_TOKENS.labels(model).inc(generated)
            self._rt.release_request(rid, owner)
            if updates is not iterator:
                await updates.aclose()  # type: ignore[attr-defined]
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

    @staticmethod
    def _auto_reading(engine: Engine, plan: ToolPlan) -> AutoReading | None:
        """The reading of ``tool_choice: "auto"`` replies by the model's tool-call parser
        (``_prepare`` refused ``auto`` without one); None for another tool choice."""
        if plan.mode != "auto" or plan.tools is None or engine.info.tool_call_parser is None:
            return None
        tools = plan.tools
        return AutoReading(lambda: engine.auto_tool_calls(tools))

    async def _unary(self, request, info: CallRecord, response_cls, *, chat: bool):
        """The whole reply and, per index, its content as the tool-call parser read it (the
        text itself without ``tool_choice: "auto"`` or without calls)."""
        engine, gen, plan = self._prepare(request, info, chat=chat, stream=False)
        auto = self._auto_reading(engine, plan)
        final: GenerationUpdate | None = None
        by_index = {}
        async for update in self.run(engine, gen, info):
            for chunk in update.completions:
                by_index[chunk.index] = chunk
            final = update
        if final is None:
            raise RpcError(grpc.StatusCode.INTERNAL, "the engine returned no output", Reason.ENGINE_NO_OUTPUT)
        response = response_cls(request_id=info.request_id or gen.request_id, usage=self._usage(final, info))
        contents: dict[int, str | None] = {}
        for i in sorted(by_index):
            output = response.outputs.add()
            await fill_completion_output_bounded(output, by_index[i])
            if auto is not None:
                contents[output.index], calls = auto.whole(output.text)
            else:
                contents[output.index], calls = output.text, forced_calls(output.text, plan)
            output.tool_calls.extend(calls)
        if not chat and final.prompt_logprobs:
            await extend_positions_bounded(response.prompt_logprobs, final.prompt_logprobs)
        return response, contents

    async def generate(
        self, request: inference_pb2.GenerateRequest, info: CallRecord
    ) -> inference_pb2.GenerateResponse:
        """``Generate``: the whole completion(s)."""
        response, _ = await self._unary(request, info, inference_pb2.GenerateResponse, chat=False)
        return response  # type: ignore[no-any-return]

    async def chat(self, request: inference_pb2.ChatRequest, info: CallRecord) -> inference_pb2.ChatResponse:
        """``Chat``: the whole reply (or replies, for n > 1). Each output's ``tool_calls``: the
        calls forced by a required or named ``tool_choice``, or those the model's tool-call
        parser read for ``auto``; ``text`` stays the model's whole output."""
        response, _ = await self._unary(request, info, inference_pb2.ChatResponse, chat=True)
        return response  # type: ignore[no-any-return]

    async def chat_contents(
        self, request: inference_pb2.ChatRequest, info: CallRecord
    ) -> tuple[inference_pb2.ChatResponse, dict[int, str | None]]:
        """As ``chat``, with each index's content as OpenAI's chat API returns it beside the
        tool calls: for ``tool_choice: "auto"`` what the tool-call parser left of the text
        once it read calls (None: nothing), else the text."""
        return await self._unary(request, info, inference_pb2.ChatResponse, chat=True)  # type: ignore[no-any-return]

    # -- streaming ---------------------------------------------------------------------

    async def _stream(self, request, info: CallRecord, message_cls, *, chat: bool, read_deltas: bool = False):
        """Pairs ``(message, reading)``: one message per completion index that has something
        to say in an update: its delta (text, token ids, logprobs), its finish reason and
        tool calls once, the prompt logprobs on the first message, usage on the last;
        ``reading``: with ``read_deltas`` and ``tool_choice: "auto"``, the tool-call parser's
        ``ToolDelta`` of a message with text, token ids or a finish reason, else None.

        An update holds what the engine produced since the previous one was taken: when the
        client (or this event loop) is behind, the vLLM backend's DELTA outputs are merged
        by vLLM's ``RequestOutputCollector`` while this generator waits for the previous
        message to be sent, so several tokens leave as one message; the deltas still
        concatenate to the unary answer."""
        engine, gen, plan = self._prepare(request, info, chat=chat, stream=True)
        auto = self._auto_reading(engine, plan)
        deltas = auto if read_deltas else None
        keep_text = plan.schema is not None or auto is not None
        texts: dict[int, list[str]] = {}
        rid = info.request_id or gen.request_id
        finished: set[int] = set()
        first = True
        async for update in self.run(engine, gen, info):
            messages = []
            for chunk in update.completions:
                final_for_index = chunk.finish_reason is not None and chunk.index not in finished
                if keep_text and chunk.text:
                    texts.setdefault(chunk.index, []).append(chunk.text)
                if final_for_index:
                    finished.add(chunk.index)
                    msg = message_cls()
                    fill_stream_message(msg, rid, chunk, True)
                    if keep_text:
                        whole = "".join(texts.pop(chunk.index, []))
                        calls = auto.whole(whole)[1] if auto is not None else forced_calls(whole, plan)
                        msg.tool_calls.extend(calls)
                elif not chunk.text and not chunk.token_ids:
                    continue
                elif chunk.logprobs:
                    msg = message_cls()
                    fill_stream_message(msg, rid, chunk, False)
                else:
                    msg = message_cls(request_id=rid, index=chunk.index, text=chunk.text, token_ids=chunk.token_ids)
                reading: ToolDelta | None = None
                if deltas is not None:
                    reading = deltas.delta(chunk.index, chunk.text, chunk.token_ids, final_for_index)
                messages.append((msg, reading))
            if first and not chat and update.prompt_logprobs:
                if not messages:
                    messages.append((message_cls(request_id=rid), None))
                await extend_positions_bounded(messages[0][0].prompt_logprobs, update.prompt_logprobs)
            if update.finished:
                if not messages:
                    messages.append((message_cls(request_id=rid), None))
                messages[-1][0].usage.CopyFrom(self._usage(update, info))
            if messages:
                first = False
            for pair in messages:
                yield pair

    async def _messages(self, request, info: CallRecord, message_cls, *, chat: bool):
        """``_stream``'s messages alone; closing this generator closes ``_stream`` at once
        (and with it the engine request)."""
        async with contextlib.aclosing(self._stream(request, info, message_cls, chat=chat)) as pairs:
            async for msg, _ in pairs:
                yield msg

    def generate_stream(
        self, request: inference_pb2.GenerateRequest, info: CallRecord
    ) -> AsyncIterator[inference_pb2.GenerateStreamResponse]:
        """``GenerateStream``: deltas; ``finish_reason`` once per index; usage on the last message."""
        return self._messages(request, info, inference_pb2.GenerateStreamResponse, chat=False)

    def chat_stream(
        self, request: inference_pb2.ChatRequest, info: CallRecord
    ) -> AsyncIterator[inference_pb2.ChatStreamResponse]:
        """``ChatStream``: as ``generate_stream`` for a chat; the message with an index's
        finish reason carries its tool calls (as ``chat``'s ``tool_calls``)."""
        return self._messages(request, info, inference_pb2.ChatStreamResponse, chat=True)

    def chat_stream_read(
        self, request: inference_pb2.ChatRequest, info: CallRecord
    ) -> AsyncIterator[tuple[inference_pb2.ChatStreamResponse, ToolDelta | None]]:
        """As ``chat_stream``, each message paired with the tool-call parser's ``ToolDelta``
        (``tool_choice: "auto"``; None otherwise), which OpenAI's streamed tool-call deltas
        are made of."""
        return self._stream(request, info, inference_pb2.ChatStreamResponse, chat=True, read_deltas=True)

    # -- embeddings, tokenizer, abort ----------------------------------------------------

    async def embed(
        self,
        request: inference_pb2.EmbedRequest,
        info: CallRecord,
        token_inputs: list[list[int]] | None = None,
        dimensions: int | None = None,
    ) -> inference_pb2.EmbedResponse:
        """``Embed``: one vector per input, in input order.

        Args:
            request: the call; its ``inputs`` are the texts unless ``token_inputs`` is given.
            token_inputs: token-id lists to embed instead of texts (OpenAI's token-id
                ``input``), bounded by ``limits.max_token_ids`` in all.
            dimensions: keep the first that many dimensions (OpenAI's ``dimensions``), for
                Matryoshka models only (the engine refuses it for others).

        Raises:
            RpcError: INVALID_ARGUMENT naming ``inputs``/``inputs[i]`` (none, too many, empty,
                too large, too long for the context, a token id outside the vocabulary) or
                ``dimensions``; PERMISSION_DENIED, NOT_FOUND, UNAVAILABLE for the model.
        """
        v = Violations()
        check_model_name(request.model, v)
        rid = resolve_request_id(request.request_id, info.request_id, v)
        info.request_id = rid
        info.model = request.model or None
        inputs: list[str | list[int]] = list(token_inputs) if token_inputs is not None else list(request.inputs)
        if not inputs:
            v.add("inputs", "at least one input is required")
        elif len(inputs) > self._limits.max_embed_inputs:
            v.add("inputs", f"at most {self._limits.max_embed_inputs} inputs, got {len(inputs)}")
        else:
            for i, item in enumerate(inputs):
                if not item:
                    v.add(f"inputs[{i}]", "must not be empty")
            if token_inputs is not None:
                check_token_ids(v, "inputs", sum(len(ids) for ids in token_inputs), self._limits)
            else:
                check_text_size(v, "inputs", sum(len(t.encode("utf-8")) for t in request.inputs), self._limits)
        if dimensions is not None and dimensions < 1:
            v.add("dimensions", f"must be at least 1, got {dimensions}")
        v.raise_if_any()
        self._policy.authorize_model(info.principal, info.method, request.model)
        engine = self._rt.engine_for(request.model, "embed")
        info.manifest_digest = self._rt.models[request.model].manifest_digest or None
        info.prompt = "\x1e".join(item if isinstance(item, str) else ",".join(map(str, item)) for item in inputs)
        normalize = request.normalize if request.HasField("normalize") else None
        with self._rt.running_request(rid, engine, request_owner(info)) as engine_id:
            result = await engine.embed(engine_id, inputs, normalize, dimensions)
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
        """The model tokenizer's ids for ``request.text``.

        Raises:
            RpcError: INVALID_ARGUMENT naming ``text`` past ``limits.max_tokenize_bytes`` (or
                ``max_prompt_bytes`` when lower) UTF-8 bytes, ``model`` when empty.
        """
        v = Violations()
        check_model_name(request.model, v)
        limits = self._limits
        if limits.max_tokenize_bytes < limits.max_prompt_bytes:
            check_text_size(
                v, "text", len(request.text.encode("utf-8")), limits, limits.max_tokenize_bytes, "max_tokenize_bytes"
            )
        else:
            check_text_size(v, "text", len(request.text.encode("utf-8")), limits)
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
        """The model tokenizer's text for ``request.token_ids``.

        Raises:
            RpcError: INVALID_ARGUMENT naming ``token_ids`` past ``limits.max_token_ids`` ids,
                ``model`` when empty.
        """
        v = Violations()
        check_model_name(request.model, v)
        check_token_ids(v, "token_ids", len(request.token_ids), self._limits)
        v.raise_if_any()
        info.model = request.model
        self._policy.authorize_model(info.principal, info.method, request.model)
        engine = self._rt.engine_for(request.model)
        skip = request.skip_special_tokens if request.HasField("skip_special_tokens") else True
        text = await engine.detokenize(list(request.token_ids), skip)
        return inference_pb2.DetokenizeResponse(text=text)

    async def abort(self, request: inference_pb2.AbortRequest, info: CallRecord) -> inference_pb2.AbortResponse:
        """Abort a running request of the caller's (or anyone's, for a role that may act for others).

        Raises:
            RpcError: INVALID_ARGUMENT naming ``request_id`` when it is empty or not a request
                id (``validation.REQUEST_ID``: 1..128 printable ASCII characters, no spaces).
        """
        v = Violations()
        if not request.request_id:
            v.add("request_id", "is required")
        elif not REQUEST_ID.match(request.request_id):
            v.add("request_id", REQUEST_ID_RULE)
        v.raise_if_any()
        info.request_id = request.request_id
        # Only the owner that started a request (``request_owner``: an anonymous caller from
        # the same peer host), or a role acting for others, may abort it; to anyone else it
        # looks like an unknown id, so ids of other callers' requests do not leak.
        owner = None if self._policy.may_act_for_others(info.principal) else request_owner(info)
        aborted = False
        for engine, engine_id in self._rt.running_for(request.request_id, owner):
            aborted = await engine.abort(engine_id) or aborted
        return inference_pb2.AbortResponse(aborted=aborted)
