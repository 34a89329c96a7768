"""Random SamplingParams, valid and not, through the real server and engine: a client's
values never yield INTERNAL or UNKNOWN; a refusal is INVALID_ARGUMENT naming the fields."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TINY
from tests.server.stubs import field_violations
from xinserve.v1 import common_pb2, inference_pb2, inference_pb2_grpc, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

_FLOATS = st.one_of(
    st.floats(min_value=-3, max_value=3, allow_nan=False),
    st.sampled_from([0.0, 1.0, 2.0, 2.5, -0.0, 1e-9, float("nan"), float("inf"), -float("inf")]),
)


# A chat without max_tokens runs to the context (2048 tokens): a prompt of about 2,010 tokens
# keeps those runs short (two tokens per "sea " in the tiny Llama's vocabulary).
LONG_CHAT = "sea " * 1000


def _optional(strategy):
    return st.one_of(st.none(), strategy)


sampling = st.fixed_dictionaries(
    {},
    optional={
        "n": st.integers(-1, 4),
        "max_tokens": st.integers(-1, 4),
        "min_tokens": st.integers(-1, 40),
        "temperature": _FLOATS,
        "top_p": _FLOATS,
        "top_k": st.integers(-3, 70_000),
        "min_p": _FLOATS,
        "presence_penalty": _FLOATS,
        "frequency_penalty": _FLOATS,
        "repetition_penalty": _FLOATS,
        "seed": st.integers(-(2**63), 2**63 - 1),
        "ignore_eos": st.booleans(),
        "skip_special_tokens": st.booleans(),
        "include_stop_str_in_output": st.booleans(),
        "logprobs": st.integers(-2, 30),
        "prompt_logprobs": st.integers(-2, 30),
        "stop": st.lists(st.sampled_from(["", "a", "\n", "the", "x" * 300]), max_size=3),
        "stop_token_ids": st.lists(st.integers(-5, 300_000), max_size=3),
        "logit_bias": st.dictionaries(st.integers(-5, 300_000), _FLOATS, max_size=2),
        "json_object": st.booleans(),
    },
)


def _params(values: dict) -> sampling_pb2.SamplingParams:
    sp = sampling_pb2.SamplingParams()
    for name, value in values.items():
        if name in ("stop", "stop_token_ids"):
            getattr(sp, name).extend(value)
        elif name == "logit_bias":
            for k, b in value.items():
                sp.logit_bias[k] = b
        else:
            setattr(sp, name, value)
    return sp


async def test_random_sampling_params_never_internal(live_server):
    seen: dict[str, int] = {}

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(values=sampling, chat=st.booleans())
    def check(values: dict, chat: bool) -> None:
        sp = _params(values)
        with grpc.insecure_channel(live_server.target) as channel:
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            try:
                if chat:
                    stub.Chat(
                        inference_pb2.ChatRequest(
                            model=TINY,
                            messages=[common_pb2.ChatMessage(role="user", content=LONG_CHAT)],
                            sampling_params=sp,
                        ),
                        timeout=300,
                    )
                else:
                    stub.Generate(
                        inference_pb2.GenerateRequest(model=TINY, prompt="hi", sampling_params=sp), timeout=300
                    )
                code = grpc.StatusCode.OK
            except grpc.RpcError as err:
                code = err.code()
                assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (values, err.details())
                assert code == grpc.StatusCode.INVALID_ARGUMENT, (values, code, err.details())
                assert field_violations(err), values  # type: ignore[arg-type]
        seen[code.name] = seen.get(code.name, 0) + 1

    # The server shares this event loop: hypothesis drives a blocking client from a thread.
    await asyncio.to_thread(check)
    print("outcomes:", seen)
    assert seen.get("OK") and seen.get("INVALID_ARGUMENT"), seen
