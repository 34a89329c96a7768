"""Property tests: any SamplingParams either validates or yields field violations, never a crash."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from engine_backends.protocol import ModelInfo
from service.operations.validation import Violations, sampling_options
from service.settings.config import LimitsSettings
from xinserve.v1 import sampling_pb2

INFO = ModelInfo("m", "generate", 2048, 2048, "float32", "vllm", "0", "cpu", 20)
floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)

params = st.builds(
    sampling_pb2.SamplingParams,
    n=st.one_of(st.none(), ints),
    max_tokens=st.one_of(st.none(), ints),
    min_tokens=st.one_of(st.none(), ints),
    temperature=st.one_of(st.none(), floats),
    top_p=st.one_of(st.none(), floats),
    top_k=st.one_of(st.none(), ints),
    min_p=st.one_of(st.none(), floats),
    presence_penalty=st.one_of(st.none(), floats),
    repetition_penalty=st.one_of(st.none(), floats),
    seed=st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    stop=st.lists(st.text(max_size=300), max_size=80),
    stop_token_ids=st.lists(ints, max_size=5),
    logprobs=st.one_of(st.none(), ints),
    logit_bias=st.dictionaries(ints, floats, max_size=5),
)


@settings(max_examples=300, deadline=None)
@given(params)
def test_validation_is_total_and_sound(sp):
    v = Violations()
    opts = sampling_options(sp, INFO, LimitsSettings(), v)
    fields = {item.field for item in v.items}
    assert all(f.startswith("sampling_params.") for f in fields)
    if not v.items:
        # Whatever passes is within vLLM's bounds.
        if opts.temperature is not None:
            assert math.isfinite(opts.temperature) and opts.temperature >= 0
        if opts.top_p is not None:
            assert 0 < opts.top_p <= 1
        if opts.n is not None:
            assert 1 <= opts.n <= 16
        if opts.max_tokens is not None:
            assert opts.max_tokens >= 1
        assert len(opts.stop) <= 64
        assert all(0 <= t < 2048 for t in opts.stop_token_ids)
        assert all(math.isfinite(b) and -100 <= b <= 100 for b in opts.logit_bias.values())
    if sp.HasField("temperature") and math.isnan(sp.temperature):
        assert "sampling_params.temperature" in fields
