"""Embedding ``dimensions`` (OpenAI's field, vLLM's ``PoolingParams.dimensions``): applied for a
Matryoshka model (a copy of all-MiniLM-L6-v2 whose config declares ``matryoshka_dimensions``,
so vLLM's ``ModelConfig.is_matryoshka`` holds) as vLLM's pooler does it (the first d values,
then normalized), refused naming ``dimensions`` for a size the model does not list, and for
a model without Matryoshka embeddings."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from engine_backends.builtin_models import minilm_dir
from engine_backends.errors import InvalidRequestError
from engine_backends.platforms import resolve_device
from engine_backends.vllm_compat import dimensions_refusal
from engine_backends.vllm_engine import VllmEngine
from tests.conftest import _data_dir

_OPTIONS = {"kv_cache_memory_bytes": 64 << 20, "max_model_len": 256, "max_num_seqs": 4, "max_num_batched_tokens": 512}


def test_dimensions_refusal_follows_vllms_pooling_params_checks():
    assert dimensions_refusal(128, 384, True, None) is None
    assert dimensions_refusal(128, 384, True, (128, 256)) is None
    assert "Matryoshka" in (dimensions_refusal(128, 384, False, None) or "")
    assert "[1, 384]" in (dimensions_refusal(385, 384, True, None) or "")
    assert "[128, 256]" in (dimensions_refusal(100, 384, True, (128, 256)) or "")


def _matryoshka_copy(tmp_path: Path) -> Path:
    path = tmp_path / "minilm-matryoshka"
    shutil.copytree(minilm_dir(_data_dir()), path)
    config = json.loads((path / "config.json").read_text())
    config["matryoshka_dimensions"] = [64, 128, 384]
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.engine
@pytest.mark.asyncio(loop_scope="session")
async def test_dimensions_applied_for_a_matryoshka_model(tmp_path):
    engine = VllmEngine("minilm-matryoshka", "embed", _matryoshka_copy(tmp_path), resolve_device("cpu", None), _OPTIONS)
    await engine.start()
    try:
        text = "matryoshka embeddings keep their first dimensions"
        (full,) = (await engine.embed("mrl-full", [text], normalize=False)).vectors
        (cut,) = (await engine.embed("mrl-cut", [text], normalize=True, dimensions=128)).vectors
        assert len(full) == 384 and len(cut) == 128
        norm = math.sqrt(sum(x * x for x in full[:128]))
        assert all(math.isclose(c, f / norm, abs_tol=1e-5) for c, f in zip(cut, full[:128], strict=True))
        with pytest.raises(InvalidRequestError) as unlisted:
            await engine.embed("mrl-bad", [text], normalize=None, dimensions=100)
        assert unlisted.value.field == "dimensions" and "[64, 128, 384]" in unlisted.value.description
    finally:
        await engine.shutdown()
