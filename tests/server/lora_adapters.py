"""LoRA adapters for the built-in tiny Llama, written in PEFT's on-disk layout
(``adapter_config.json`` + ``adapter_model.safetensors``, the layout vLLM's LoRA loader reads).

The weights are random with a fixed seed and large enough to change greedy output, so a
test can tell whether an adapter was applied."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

_HIDDEN = 128
_OUT = {"q_proj": 128, "v_proj": 64}  # 4 heads x 32; 2 KV heads x 32
_LAYERS = 2


def write_lora_adapter(target: Path, seed: int, rank: int = 8, scale: float = 0.5) -> Path:
    """Write a rank-``rank`` adapter on q_proj and v_proj of every layer into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for layer in range(_LAYERS):
        for module, out in _OUT.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, _HIDDEN, generator=gen) * scale
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out, rank, generator=gen) * scale
    save_file(tensors, str(target / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": sorted(_OUT),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
        "base_model_name_or_path": "xinserve-tiny-llama",
    }
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return target
