"""Helpers shared by the trust tests (a module of its own: ``conftest`` names clash across test dirs)."""

from __future__ import annotations

import os
from pathlib import Path


def make_model(root: Path) -> Path:
    """A small model-like directory: nested files, an empty file, a non-ASCII name."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (root / "tokenizer.json").write_text('{"model": {}}')
    (root / "model-00001-of-00002.safetensors").write_bytes(os.urandom(300_000))
    (root / "model-00002-of-00002.safetensors").write_bytes(os.urandom(200_000))
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "empty.txt").write_bytes(b"")
    (root / "sub" / "说明.md").write_text("模型说明")
    return root
