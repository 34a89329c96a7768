"""The vLLM engine arguments a model will be started with, each with where it came from and why.

Layers, later wins: the device profile's recommendations (``platforms.PROFILES``), the
large-model rule below, a model's own options (built-in models set ``max_model_len`` and
batch limits), the configuration (``engine.*`` in the config file, ``XINSERVE_ENGINE__*``,
flags), then a configured model's own ``models[].engine`` section. The server starts each
model with ``engine_options(plan_engine_args(...))`` and ``xinserve serve
--print-engine-args`` prints the same plan.

Large-model rule (the seed articles' and vLLM's tuning guide): above ~30 B parameters, chunked
prefill with a 512-token batch budget keeps decode latency steady while long prompts prefill.
The parameter count is estimated from the model directory's safetensors size and dtype width.
The rule is not applied where the device profile sets ``enable_chunked_prefill`` itself (Kunlun:
vLLM-Kunlun's guidance turns it off for every model size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_backends.platforms import PlatformProfile, check_quantization

LARGE_MODEL_PARAMETERS = 30e9
_BYTES_PER_PARAMETER = 2  # bf16/fp16 checkpoints


@dataclass(frozen=True)
class PlannedArg:
    """One engine argument: its value, the layer that set it, and why."""

    name: str
    value: Any
    source: str
    why: str


def estimated_parameters(model_dir: Path) -> float | None:
    """Parameters estimated from ``*.safetensors`` sizes (2 bytes each); None without any."""
    try:
        sizes = [p.stat().st_size for p in model_dir.glob("*.safetensors")]
    except OSError:
        return None
    return sum(sizes) / _BYTES_PER_PARAMETER if sizes else None


def plan_engine_args(
    profile: PlatformProfile,
    configured: Mapping[str, Any],
    model_options: Mapping[str, Any] | None = None,
    model_dir: Path | None = None,
    model_configured: Mapping[str, Any] | None = None,
) -> list[PlannedArg]:
    """The merged engine arguments, sorted by name, each with its source and reason.

    Args:
        profile: the device's profile (its recommended arguments and quantization kernels).
        configured: ``engine.*`` arguments that are set (``EngineArgsSettings.engine_args()``).
        model_options: the model's own serving options (a built-in model's limits).
        model_dir: the model's directory, for the large-model rule (None: rule not applied).
        model_configured: the model's ``models[].engine`` arguments that are set.

    Raises:
        PlatformError: the configured ``quantization`` has no kernel on this device.
    """
    plan: dict[str, PlannedArg] = {}
    for name, value in profile.engine_defaults.items():
        plan[name] = PlannedArg(
            name, value, f"{profile.name} profile", profile.engine_reasons.get(name, "recommended on this device")
        )
    params = estimated_parameters(model_dir) if model_dir is not None else None
    # A profile that sets chunked prefill itself (off on Kunlun, per the vendor) keeps it.
    if params is not None and params > LARGE_MODEL_PARAMETERS and "enable_chunked_prefill" not in plan:
        why = f"~{params / 1e9:.0f} B parameters (> 30 B): chunked prefill with a 512-token budget keeps decode steady"
        plan["enable_chunked_prefill"] = PlannedArg("enable_chunked_prefill", True, "large-model rule", why)
        plan["max_num_batched_tokens"] = PlannedArg("max_num_batched_tokens", 512, "large-model rule", why)
    for name, value in (model_options or {}).items():
        plan[name] = PlannedArg(name, value, "model", "the model's own serving options")
    for name, value in configured.items():
        plan[name] = PlannedArg(name, value, "configuration", "set in the configuration (overrides the above)")
    for name, value in (model_configured or {}).items():
        plan[name] = PlannedArg(
            name, value, "model configuration", "set for this model (models[].engine, overrides engine.*)"
        )
    quantization = plan.get("quantization")
    check_quantization(profile, quantization.value if quantization else None)
    return [plan[name] for name in sorted(plan)]


def engine_options(plan: list[PlannedArg]) -> dict[str, Any]:
    """The plan as ``AsyncEngineArgs`` keyword arguments (name -> value)."""
    return {arg.name: arg.value for arg in plan}
