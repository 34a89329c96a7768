"""The server sets the vLLM environment it configures before any engine is built:
``engine.xgrammar_cache_mb`` becomes ``VLLM_XGRAMMAR_CACHE_MB``, the per-process budget of
vLLM's xgrammar compiled-grammar cache (vLLM's default, 512 MiB, is replaced by 64)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vllm import envs as vllm_envs

from engine_backends import vllm_compat as vc
from service.settings.config import ConfigError, load_settings
from tests.server.in_process import started_server

NAME = "VLLM_XGRAMMAR_CACHE_MB"


@pytest.mark.parametrize(("overrides", "expected"), [({}, 64), ({"engine": {"xgrammar_cache_mb": 32}}, 32)])
async def test_the_xgrammar_cache_budget_reaches_vllm(tmp_path: Path, monkeypatch, overrides, expected) -> None:
    monkeypatch.setenv(NAME, "512")
    async with started_server(tmp_path, **overrides):
        assert os.environ[NAME] == str(expected)
        with vc._ENVS_CACHE.building_engine():  # what an engine being built, and its engine core, read
            assert vllm_envs.VLLM_XGRAMMAR_CACHE_MB == expected


def test_the_budget_is_no_engine_argument_and_must_be_positive() -> None:
    settings = load_settings(overrides={"engine": {"xgrammar_cache_mb": 16}})
    assert "xgrammar_cache_mb" not in settings.engine.engine_args()
    with pytest.raises(ConfigError, match=r"engine\.xgrammar_cache_mb"):
        load_settings(overrides={"engine": {"xgrammar_cache_mb": 0}})
