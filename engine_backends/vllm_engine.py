"""The vLLM backend: one in-process ``AsyncLLM`` (V1) per served model.

Implements ``engine_backends.protocol.Engine``. All vLLM calls go through
``engine_backends.vllm_compat``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine_backends import vllm_compat as vc
from engine_backends.errors import (
    EngineAbortedError,
    EngineDeadError,
    EngineFailureError,
    EngineUnavailableError,
    InvalidRequestError,
    UnknownLoraError,
)
from engine_backends.logprob_positions import logprob_positions
from engine_backends.platforms import PlatformProfile
from engine_backends.protocol import (
    CompletionChunk,
    EmbedResult,
    EngineLoad,
    GenerateInput,
    GenerationUpdate,
    ModelInfo,
    ModelKind,
    SamplingOptions,
)
from engine_backends.special_tokens import SpecialTokenGuard
from engine_backends.tool_calls import AutoToolCalls

log = logging.getLogger(__name__)

# Texts longer than this are tokenized in a worker thread, off the event loop.
_INLINE_TOKENIZE_CHARS = 4096


class _LoadRecorder(vc.StatLoggerBase):
    """A vLLM stat logger that keeps only the latest scheduler stats."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0):
        if scheduler_stats is not None:
            self.running = int(scheduler_stats.num_running_reqs)
            self.waiting = int(scheduler_stats.num_waiting_reqs)
            self.kv_cache_usage = float(scheduler_stats.kv_cache_usage)

    def log_engine_initialized(self) -> None:
        pass


class VllmEngine:
    """A model served by vLLM.

    Args:
        name: served model name.
        kind: "generate" or "embed".
        path: local model directory (Hugging Face layout).
        profile: the platform profile of the device it runs on.
        options: ``AsyncEngineArgs`` overrides (dtype, max_model_len, kv_cache_memory_bytes ...).
        lora_modules: LoRA adapter name -> local directory.
        tool_call_parser: vLLM tool parser for ``tool_choice: "auto"`` (``models[].tool_call_parser``).
    """

    def __init__(
        self,
        name: str,
        kind: ModelKind,
        path: Path,
        profile: PlatformProfile,
        options: Mapping[str, Any] | None = None,
        lora_modules: Mapping[str, Path] | None = None,
        tool_call_parser: str | None = None,
    ) -> None:
        self._name = name
        self._tool_call_parser = tool_call_parser
        self._kind: ModelKind = kind
        self._path = path
        self._profile = profile
        self._options = {**profile.engine_defaults, **(options or {})}
        self._loras = dict(lora_modules or {})
        if self._loras:
            self._options.setdefault("enable_lora", True)
        self._llm: vc.AsyncLLM | None = None
        self._tokenizer: Any = None
        self._special_tokens = SpecialTokenGuard(None)
        self._recorder: _LoadRecorder | None = None
        self._defaults: dict[str, Any] = {}
        self._active: Counter[str] = Counter()
        self._embed_ids: dict[str, list[str]] = {}  # an Embed's request id -> its per-input ids
        self._aborted: set[str] = set()
        self._info: ModelInfo | None = None
        self._structured_check: vc.StructuredOutputCheck | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def use_files(self, model_path: Path, lora_adapters: Mapping[str, Path]) -> None:
        """Before ``start``: load ``model_path`` and serve exactly ``lora_adapters`` (vLLM
        reads an adapter's files when a request first names it, so these must stay as they are)."""
        if self._llm is not None:
            raise RuntimeError("use_files() must be called before start()")
        self._path = model_path
        self._loras = dict(lora_adapters)
        if self._loras:
            self._options.setdefault("enable_lora", True)

    @property
    def info(self) -> ModelInfo:
        if self._info is None:
            raise EngineUnavailableError(f"model {self._name!r} is not loaded")
        return self._info

    async def start(self) -> None:
        """Load the model (30 s or more: runs in a worker thread, the event loop stays free).

        Cancelled, it stops the engine being started before it re-raises: SIGTERM to its
        engine-core process, SIGKILL after ``vllm_compat.ENGINE_STOP_GRACE_S`` seconds
        (``vllm_compat.start_engine``)."""

        def factory(vllm_config: Any, engine_index: int = 0) -> _LoadRecorder:
            self._recorder = _LoadRecorder(vllm_config, engine_index)
            return self._recorder

        try:
            llm = await vc.start_engine(str(self._path), self._name, self._kind, self._options, factory)
        except Exception as exc:
            why = vc.explain_engine_error(exc, self._options)
            log.error("engine for model %s failed to start: %s", self._name, why or type(exc).__name__)
            raise EngineFailureError(
                f"model {self._name!r} failed to load: {why}"
                if why
                else f"model {self._name!r} failed to load ({type(exc).__name__})"
            ) from exc
        self._llm = llm
        self._tokenizer = llm.get_tokenizer()
        self._special_tokens = SpecialTokenGuard.from_tokenizer(self._tokenizer)
        self._defaults = vc.model_sampling_defaults(llm)
        self._structured_check = vc.StructuredOutputCheck(self._tokenizer, int(llm.model_config.get_vocab_size()))
        mc = llm.model_config
        cache = llm.vllm_config.cache_config
        self._info = ModelInfo(
            name=self._name,
            kind=self._kind,
            max_model_len=int(mc.max_model_len),
            vocab_size=int(mc.get_vocab_size()),
            dtype=str(mc.dtype).removeprefix("torch."),
            backend="vllm",
            backend_version=vc.engine_version(),
            device=self._profile.device,
            max_logprobs=int(mc.max_logprobs),
            lora_adapters=tuple(sorted(self._loras)),
            prefix_caching=bool(getattr(cache, "enable_prefix_caching", False)),
            tool_call_parser=self._tool_call_parser,
        )

    def auto_tool_calls(self, tools: Sequence[Mapping[str, Any]]) -> AutoToolCalls | None:
        """vLLM's ``tool_call_parser`` over this model's tokenizer, for one reply; None without one."""
        if self._tool_call_parser is None:
            return None
        self._require()
        return AutoToolCalls(self._tool_call_parser, self._tokenizer, tools)

    async def shutdown(self) -> None:
        """Stop the engine: its output handler first, then ``AsyncLLM.shutdown``.

        ``AsyncLLM.shutdown`` stops the engine-core client before it cancels the output handler
        task; the client then hands that handler an ``EngineDeadError``, which vLLM logs as
        "AsyncLLM output_handler failed" with its stack. Cancelling the handler first, on this
        event loop, makes a clean stop log no error.
        """
        llm, self._llm = self._llm, None
        if llm is not None:
            handler = getattr(llm, "output_handler", None)
            if isinstance(handler, asyncio.Task) and not handler.done():
                handler.cancel()
                await asyncio.wait({handler})
            await asyncio.to_thread(llm.shutdown)
            vc.release_engine_metrics(self._name)

    async def check_health(self) -> None:
        """Raise EngineDeadError once vLLM reports its engine dead (``AsyncLLM.check_health``:
        the engine-core process exited, or the output handler stopped)."""
        llm = self._require()
        try:
            await llm.check_health()
        except Exception as exc:
            raise EngineDeadError(f"model {self._name!r}: the engine is dead") from exc

    def process_ids(self) -> list[int]:
        """Process ids of this engine's vLLM engine-core processes (empty when not running)."""
        return vc.engine_process_ids(self._llm) if self._llm is not None else []

    def load(self) -> EngineLoad:
        active = sum(1 for c in self._active.values() if c)
        rec = self._recorder
        if rec is None or active == 0:
            return EngineLoad(running=0, waiting=0, kv_cache_usage=rec.kv_cache_usage if rec else 0.0)
        waiting = min(rec.waiting, active)
        return EngineLoad(running=active - waiting, waiting=waiting, kv_cache_usage=rec.kv_cache_usage)

    def _require(self) -> vc.AsyncLLM:
        llm = self._llm
        if llm is None:
            raise EngineUnavailableError(f"model {self._name!r} is not running")
        if llm.errored:
            raise EngineDeadError(f"model {self._name!r}: the engine is dead")
        return llm

    # -- tokenizer ---------------------------------------------------------------------

    async def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self._require()
        tok = self._tokenizer

        def run() -> list[int]:
            return list(tok(text, add_special_tokens=add_special_tokens)["input_ids"])

        return run() if len(text) <= _INLINE_TOKENIZE_CHARS else await asyncio.to_thread(run)

    async def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        self._require()
        self._check_ids("token_ids", token_ids)
        ids = list(token_ids)
        tok = self._tokenizer

        def run() -> str:
            return str(tok.decode(ids, skip_special_tokens=skip_special_tokens))

        return run() if len(ids) <= _INLINE_TOKENIZE_CHARS // 4 else await asyncio.to_thread(run)

    def _check_ids(self, field: str, ids: Sequence[int]) -> None:
        vocab = self.info.vocab_size
        for i, tid in enumerate(ids):
            if not 0 <= tid < vocab:
                raise InvalidRequestError(f"{field}[{i}]", f"token id {tid} is outside the vocabulary [0, {vocab})")

    async def _refuse_special_tokens(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        """Raise InvalidRequestError naming the field (``messages[i].content``,
        ``messages[i].tool_calls[j].arguments``, ``tools[i]``) when a text the chat template
        renders holds one of the tokenizer's special-token strings (it would become a control
        token in the rendered conversation)."""
        guard = self._special_tokens
        texts: list[tuple[str, str]] = []
        for i, message in enumerate(messages):
            texts.append((f"messages[{i}].content", message.get("content") or ""))
            for j, call in enumerate(message.get("tool_calls") or ()):
                function = call.get("function", {})
                rendered = json.dumps(function.get("arguments", {}), ensure_ascii=False)
                texts.append((f"messages[{i}].tool_calls[{j}].arguments", rendered))
                texts.append((f"messages[{i}].tool_calls[{j}].name", function.get("name", "")))
                texts.append((f"messages[{i}].tool_calls[{j}].id", call.get("id", "")))
            if message.get("tool_call_id"):
                texts.append((f"messages[{i}].tool_call_id", message["tool_call_id"]))
        for i, tool in enumerate(tools or ()):
            texts.append((f"tools[{i}]", json.dumps(tool, ensure_ascii=False)))

        def scan() -> tuple[str, str] | None:
            for field, text in texts:
                found = guard.find(text)
                if found is not None:
                    return field, found
            return None

        size = sum(len(text) for _, text in texts)
        hit = scan() if size <= _INLINE_TOKENIZE_CHARS else await asyncio.to_thread(scan)
        if hit is not None:
            field, found = hit
            raise InvalidRequestError(
                field,
                f"contains the special token {found!r}; set allow_special_tokens to pass it as a control token",
            )

    async def _refuse_prompt_special_tokens(self, prompt: str) -> None:
        """Raise InvalidRequestError on ``prompt`` when the text holds one of the tokenizer's
        special-token strings (tokenized, it would become that control token)."""
        guard = self._special_tokens
        small = len(prompt) <= _INLINE_TOKENIZE_CHARS
        found = guard.find(prompt) if small else await asyncio.to_thread(guard.find, prompt)
        if found is not None:
            raise InvalidRequestError(
                "prompt",
                f"contains the special token {found!r}; this server refuses special tokens in prompt text "
                "(limits.refuse_special_tokens_in_prompt)",
            )

    async def _prompt_ids(self, request: GenerateInput) -> list[int]:
        if request.messages is not None:
            tok = self._tokenizer
            if not getattr(tok, "chat_template", None):
                raise InvalidRequestError("model", "this model has no chat template")
            messages = [dict(m) for m in request.messages]
            tools = [dict(t) for t in request.tools] if request.tools else None
            if not request.allow_special_tokens:
                await self._refuse_special_tokens(messages, tools)

            def render() -> str:
                return str(
                    tok.apply_chat_template(
                        messages, tools=tools, tokenize=False, add_generation_prompt=request.add_generation_prompt
                    )
                )

            try:
                text = await asyncio.to_thread(render)
            except Exception as exc:
                raise InvalidRequestError("messages", "the model's chat template rejected the messages") from exc
            ids = await self.tokenize(text, add_special_tokens=False)
            field = "messages"
        elif request.prompt_token_ids is not None:
            ids = list(request.prompt_token_ids)
            self._check_ids("prompt_token_ids", ids)
            field = "prompt_token_ids"
        else:
            prompt = request.prompt or ""
            if request.refuse_prompt_special_tokens:
                await self._refuse_prompt_special_tokens(prompt)
            ids = await self.tokenize(prompt, add_special_tokens=True)
            field = "prompt"
        limit = self.info.max_model_len
        if len(ids) >= limit:
            raise InvalidRequestError(field, f"the prompt is {len(ids)} tokens; the model's context is {limit} tokens")
        max_tokens = request.sampling.max_tokens
        if max_tokens is not None and len(ids) + max_tokens > limit:
            raise InvalidRequestError(
                "sampling_params.max_tokens",
                f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds the context of {limit} tokens",
            )
        return ids

    # -- generation --------------------------------------------------------------------

    def _lora(self, name: str | None) -> Any:
        if not name:
            return None
        path = self._loras.get(name)
        if path is None:
            raise UnknownLoraError(f"LoRA adapter {name!r} is not loaded for model {self._name!r}")
        lora_id = sorted(self._loras).index(name) + 1
        return vc.LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=str(path))

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        llm = self._require()
        if self._kind != "generate":
            raise InvalidRequestError("model", f"model {self._name!r} is an embedding model")
        lora = self._lora(request.sampling.lora_name)
        ids = await self._prompt_ids(request)
        so = request.sampling.structured_output
        rejected_field = f"sampling_params.{so.kind}" if so is not None else "sampling_params"
        check = self._structured_check
        if so is not None and check is not None and not await asyncio.to_thread(check.can_start, so.kind, so.value):
            raise InvalidRequestError(
                rejected_field, "the constraint admits no output (e.g. a schema that only refers to itself)"
            )
        sampling = request.sampling
        if sampling.max_tokens is None:
            default = vc.default_max_tokens(
                chat=request.messages is not None,
                context=self.info.max_model_len,
                prompt_tokens=len(ids),
                defaults=self._defaults,
            )
            sampling = dataclasses.replace(sampling, max_tokens=default)
        try:
            params = vc.make_sampling_params(sampling, self._defaults, request.stream)
        except (ValueError, vc.VLLMClientError) as exc:
            # vLLM's VLLMValidationError names the parameter it refused, in ``parameter`` or
            # as the first word of its message ("min_tokens must be less than ...").
            field = rejected_field
            named = getattr(exc, "parameter", None) or str(exc).split(" ", 1)[0]
            if named in {f.name for f in dataclasses.fields(SamplingOptions)}:
                field = f"sampling_params.{named}"
            raise InvalidRequestError(field, _REJECTED) from exc
        engine_input = await vc.render_token_prompt(llm, ids)
        rid = request.request_id
        stream = llm.generate(
            engine_input, params, rid, lora_request=lora, trace_headers=dict(request.trace_headers or {})
        )
        prompt_logprobs_sent = False
        prompt_tokens: int | None = None
        rejected = InvalidRequestError(rejected_field, _REJECTED)
        try:
            with self._running(rid, rejected, (vc.VLLMClientError, ValueError)):
                async for out in stream:
                    # Per output (a step's delta, or several merged by vLLM when this
                    # consumer was behind): finish fields only on a completion's last
                    # output, logprobs only when asked for, read lazily (LogprobPositions:
                    # the reply is built from them a bounded slice per event-loop iteration,
                    # never n x tokens x candidates objects made up front).
                    chunks = []
                    for c in out.outputs:
                        reason = c.finish_reason
                        if reason is None:
                            chunk = CompletionChunk(int(c.index), c.text, list(c.token_ids))
                        else:
                            if reason == "error":
                                raise EngineFailureError("the engine ended a completion with an error")
                            stop = c.stop_reason
                            chunk = CompletionChunk(
                                int(c.index),
                                c.text,
                                list(c.token_ids),
                                finish_reason=vc.finish_reason(reason, stop),
                                stop_string=stop if isinstance(stop, str) else None,
                                stop_token_id=stop if isinstance(stop, int) else None,
                            )
                        if c.logprobs is not None:
                            chunk.logprobs = logprob_positions(c.logprobs)
                            chunk.cumulative_logprob = c.cumulative_logprob
                        chunks.append(chunk)
                    prompt_lp = None
                    if not prompt_logprobs_sent and out.prompt_logprobs is not None:
                        prompt_lp = logprob_positions(out.prompt_logprobs)
                        prompt_logprobs_sent = True
                    if prompt_tokens is None:
                        prompt_tokens = len(out.prompt_token_ids or ids)
                    yield GenerationUpdate(
                        request_id=rid,
                        completions=chunks,
                        prompt_tokens=prompt_tokens,
                        cached_tokens=int(out.num_cached_tokens or 0),
                        finished=bool(out.finished),
                        prompt_logprobs=prompt_lp,
                    )
        finally:
            await stream.aclose()

    async def abort(self, request_id: str) -> bool:
        """Abort a running generation or embedding; False if ``request_id`` is not running."""
        llm = self._llm
        if llm is None or request_id not in self._active:
            return False
        parts = self._embed_ids.get(request_id)
        if parts is not None:
            self._aborted.add(request_id)
            await llm.abort(parts)
        else:
            await llm.abort(request_id)
        return True

    @contextmanager
    def _running(
        self, request_id: str, rejected: InvalidRequestError, client_errors: tuple[type[BaseException], ...]
    ) -> Iterator[None]:
        """Count ``request_id`` as active (for load and Abort) and map vLLM's errors to ours;
        ``client_errors`` become ``rejected`` (never with vLLM's own text)."""
        self._active[request_id] += 1
        try:
            yield
        except client_errors as exc:
            raise rejected from exc
        except vc.EngineDeadError as exc:
            raise EngineDeadError(f"model {self._name!r}: the engine died") from exc
        except vc.EngineGenerateError as exc:
            raise EngineFailureError("the engine failed this request") from exc
        finally:
            self._active[request_id] -= 1
            if self._active[request_id] <= 0:
                del self._active[request_id]

    # -- embeddings --------------------------------------------------------------------

    async def embed(
        self,
        request_id: str,
        inputs: Sequence[str | Sequence[int]],
        normalize: bool | None,
        dimensions: int | None = None,
    ) -> EmbedResult:
        llm = self._require()
        if self._kind != "embed":
            raise InvalidRequestError("model", f"model {self._name!r} is not an embedding model")
        if dimensions is not None:
            why = vc.dimensions_refusal(dimensions, *vc.matryoshka_dimensions(llm))
            if why is not None:
                raise InvalidRequestError("dimensions", why)
        params = vc.make_pooling_params(normalize, dimensions)
        limit = self.info.max_model_len
        encoded: list[list[int]] = []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                ids = await self.tokenize(item, add_special_tokens=True)
            else:
                ids = list(item)
                self._check_ids(f"inputs[{i}]", ids)
            if len(ids) > limit:
                raise InvalidRequestError(f"inputs[{i}]", f"the input is {len(ids)} tokens; the limit is {limit}")
            encoded.append(ids)

        parts = [f"{request_id}-{i}" for i in range(len(encoded))]
        aborted = EngineAbortedError(f"request {request_id!r} was aborted")

        async def one(i: int, ids: list[int]) -> list[float]:
            engine_input = await vc.render_token_prompt(llm, ids)
            result = None
            async for out in llm.encode(engine_input, params, parts[i]):
                result = out
            if request_id in self._aborted:  # vLLM ends an aborted pooling request with an empty output
                raise aborted
            if result is None:
                raise EngineFailureError("the engine returned no embedding")
            return [float(x) for x in result.outputs.data.tolist()]

        rejected = InvalidRequestError("inputs", "the engine rejected the inputs")
        self._embed_ids[request_id] = parts
        try:
            with self._running(request_id, rejected, (vc.VLLMClientError,)):
                vectors = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(encoded)))
            if request_id in self._aborted:
                raise aborted
        finally:
            self._embed_ids.pop(request_id, None)
            self._aborted.discard(request_id)
        return EmbedResult(vectors=list(vectors), prompt_tokens=sum(len(e) for e in encoded))


# Engine exception text is never passed on (it may quote library internals or the input).
_REJECTED = "the engine rejected this value (for structured outputs: the constraint does not compile)"
