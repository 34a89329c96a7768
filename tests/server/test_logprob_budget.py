"""The per-request logprob budget (``limits.max_logprob_entries``): a request that could make
more log-probability entries than configured is INVALID_ARGUMENT naming the field and the
limit, before the engine sees it."""

from __future__ import annotations

import pytest

from engine_backends.protocol import ModelInfo
from service.operations.validation import Violations, logprob_entries, sampling_options
from service.settings.config import ConfigError, LimitsSettings, load_settings
from xinserve.v1 import sampling_pb2

CONTEXT = 2048
INFO = ModelInfo("m", "generate", CONTEXT, 2048, "float32", "vllm", "0", "cpu", 20)


def violations(limits: LimitsSettings | None = None, **sampling) -> dict[str, str]:
    v = Violations()
    sampling_options(sampling_pb2.SamplingParams(**sampling), INFO, limits or LimitsSettings(), v)
    return {item.field: item.description for item in v.items}


def test_the_issue_request_is_refused_naming_field_and_limit():
    # Four of these (n=16, logprobs=20, max_tokens=1000) starved health checks for a minute.
    found = violations(n=16, logprobs=20, max_tokens=1000)
    assert list(found) == ["sampling_params.logprobs"]
    text = found["sampling_params.logprobs"]
    assert "336000" in text and "131072" in text and "limits.max_logprob_entries" in text


def test_a_request_at_the_limit_passes():
    assert logprob_entries(16, 20, None, 390, CONTEXT) == 131040 <= LimitsSettings().max_logprob_entries
    assert violations(n=16, logprobs=20, max_tokens=390) == {}
    assert "sampling_params.logprobs" in violations(n=16, logprobs=20, max_tokens=391)


def test_unset_max_tokens_counts_as_the_context_length():
    # n x (logprobs + 1) x context = 16 x 21 x 2048
    assert "688128" in violations(n=16, logprobs=20)["sampling_params.logprobs"]
    assert violations(n=1, logprobs=20) == {}  # 43,008


def test_prompt_logprobs_count_the_longest_prompt():
    limits = LimitsSettings(max_logprob_entries=10_000)
    # (prompt_logprobs 20 + 1) x (2048 - 1) prompt tokens at most
    found = violations(limits, prompt_logprobs=20, max_tokens=1)
    assert list(found) == ["sampling_params.prompt_logprobs"]
    assert "42987" in found["sampling_params.prompt_logprobs"]
    assert violations(limits, prompt_logprobs=3, max_tokens=1) == {}  # 8,188


def test_both_kinds_add_up():
    assert logprob_entries(2, 4, 1, 100, CONTEXT) == 2 * 5 * 100 + 2 * (CONTEXT - 100)
    limits = LimitsSettings(max_logprob_entries=2 * 5 * 100 + 2 * (CONTEXT - 100))
    assert violations(limits, n=2, logprobs=4, prompt_logprobs=1, max_tokens=100) == {}
    assert violations(limits, n=2, logprobs=4, prompt_logprobs=1, max_tokens=99) == {}  # fewer generated, longer prompt
    assert "sampling_params.logprobs" in violations(limits, n=2, logprobs=5, prompt_logprobs=1, max_tokens=100)


def test_without_logprobs_nothing_is_counted():
    assert violations(LimitsSettings(max_logprob_entries=1), n=16, max_tokens=2000) == {}


def test_other_violations_of_the_same_fields_come_alone():
    found = violations(n=16, logprobs=10_000, max_tokens=1000)
    assert list(found) == ["sampling_params.logprobs"] and "between 0 and 20" in found["sampling_params.logprobs"]


def test_the_limit_is_configurable_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("XINSERVE_LIMITS__MAX_LOGPROB_ENTRIES", "5000")
    settings = load_settings(overrides={"data_dir": str(tmp_path)})
    assert settings.limits.max_logprob_entries == 5000
    assert "sampling_params.logprobs" in violations(settings.limits, logprobs=4, max_tokens=1001)
    with pytest.raises(ConfigError, match=r"limits\.max_logprob_entries"):
        load_settings(overrides={"data_dir": str(tmp_path), "limits": {"max_logprob_entries": 0}})
