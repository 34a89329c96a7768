"""vLLM's environment variables in the front-end process: read afresh while an engine is being
built, cached once none is (``engine_backends.vllm_compat._EnvsCache``), so that vLLM's output
processor stops calling ``os.getenv`` per request per engine step."""

from __future__ import annotations

import threading

import pytest
from vllm import envs as vllm_envs

from engine_backends import vllm_compat as vc

NAME = "VLLM_COMPUTE_NANS_IN_LOGITS"  # read by vLLM's output processor for every request output


@pytest.fixture
def restored_cache(monkeypatch):
    """Leaves vllm.envs' cache as the test found it, filled from the environment as it was."""
    was = vc.envs_cached()
    try:
        yield monkeypatch
    finally:
        monkeypatch.undo()
        vllm_envs.disable_envs_cache()
        if was:
            vllm_envs.enable_envs_cache()


def test_values_are_read_afresh_while_building_and_cached_after(restored_cache):
    cache = vc._EnvsCache()
    restored_cache.setenv(NAME, "0")
    with cache.building_engine():
        assert not vc.envs_cached()
        assert vllm_envs.VLLM_COMPUTE_NANS_IN_LOGITS is False
        restored_cache.setenv(NAME, "1")
        assert vllm_envs.VLLM_COMPUTE_NANS_IN_LOGITS is True
    assert vc.envs_cached()
    restored_cache.setenv(NAME, "0")
    assert vllm_envs.VLLM_COMPUTE_NANS_IN_LOGITS is True  # the value cached when the build ended
    with cache.building_engine():  # a later engine sees the environment as it is now
        assert vllm_envs.VLLM_COMPUTE_NANS_IN_LOGITS is False
    assert vc.envs_cached()


def test_the_cache_stays_off_until_the_last_of_overlapping_builds_ends(restored_cache):
    cache = vc._EnvsCache()
    first_in = threading.Event()
    release_first = threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with cache.building_engine():
            first_in.set()
            release_first.wait(timeout=60)
            seen.append(vc.envs_cached())

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert first_in.wait(timeout=60)
        with cache.building_engine():
            pass
        assert not vc.envs_cached()  # the first build is still running
    finally:
        release_first.set()
        thread.join(timeout=60)
    assert seen == [False]
    assert vc.envs_cached()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_running_server_caches_vllm_envs(live_server):
    assert live_server.runtime.models, "the live server has models"
    assert vc.envs_cached()
