"""The sampling parameters are defined once, in the contract (``xinserve.v1.SamplingParams``):
every field of its descriptor must have a validation rule, an engine field that reaches vLLM's
``SamplingParams`` and a Python client keyword. A field added to sampling.proto without them
fails here, naming the field (the tables below are walked from the descriptor, not retyped)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor

from engine_backends.protocol import ModelInfo, SamplingOptions, StructuredKind
from engine_backends.vllm_compat import make_sampling_params
from service.operations.validation import Violations, sampling_options
from service.settings.config import LimitsSettings
from xinserve.v1 import sampling_pb2
from xinserve_client import build_sampling_params
from xinserve_client.sampling_fields import ALL_FIELDS, OPTIONAL_SCALARS, REPEATED_SCALARS, STRUCTURED_OUTPUT

INFO = ModelInfo("m", "generate", 2048, 1000, "float32", "vllm", "0", "cpu", 20)
NO_RULE = None

# Per contract field: a value validation must refuse (the SamplingParams fields to set), or
# NO_RULE where every value of the field's type is meaningful.
BAD_VALUES: dict[str, dict[str, Any] | None] = {
    "n": {"n": 0},
    "max_tokens": {"max_tokens": 0},
    "min_tokens": {"min_tokens": -1},
    "temperature": {"temperature": 2.5},
    "top_p": {"top_p": 0.0},
    "top_k": {"top_k": -2},
    "min_p": {"min_p": 1.5},
    "presence_penalty": {"presence_penalty": 2.5},
    "frequency_penalty": {"frequency_penalty": -2.5},
    "repetition_penalty": {"repetition_penalty": 0.0},
    "seed": {"seed": -1},
    "stop": {"stop": [""]},
    "stop_token_ids": {"stop_token_ids": [INFO.vocab_size]},
    "include_stop_str_in_output": NO_RULE,
    "ignore_eos": NO_RULE,
    "logprobs": {"logprobs": INFO.max_logprobs + 1},
    "prompt_logprobs": {"prompt_logprobs": -1},
    "skip_special_tokens": NO_RULE,
    "logit_bias": {"logit_bias": {0: 101.0}},
    "json_schema": {"json_schema": ""},
    "regex": {"regex": ""},
    "choice": {"choice": sampling_pb2.ChoiceList(choices=[])},
    "grammar": {"grammar": ""},
    "json_object": {"json_object": False},
    "lora_name": {"lora_name": "x" * 129},
}

# SamplingOptions fields that are not one contract field each.
ENGINE_ONLY = {"structured_output"}  # the oneof's members, as StructuredOutput(kind, value)


def _violations(**fields: Any) -> tuple[list[str], SamplingOptions]:
    v = Violations()
    options = sampling_options(sampling_pb2.SamplingParams(**fields), INFO, LimitsSettings(), v)
    return [item.field for item in v.items], options


def _names(field: str, name: str) -> bool:
    path = "sampling_params." + name
    return field == path or field.startswith((path + "[", path + "."))


def test_every_contract_field_has_a_validation_rule_or_is_marked_free():
    missing = sorted(set(ALL_FIELDS) - set(BAD_VALUES))
    assert not missing, (
        f"no validation rule (or NO_RULE) for sampling field(s) {missing} (service.operations.validation)"
    )
    assert not set(BAD_VALUES) - set(ALL_FIELDS), "BAD_VALUES names fields the contract no longer has"


@pytest.mark.parametrize("name", [n for n, bad in BAD_VALUES.items() if bad is not NO_RULE])
def test_the_rule_refuses_a_bad_value_naming_the_field(name):
    fields, _ = _violations(**BAD_VALUES[name])  # type: ignore[arg-type]
    assert fields and all(_names(f, name) for f in fields), fields


@pytest.mark.parametrize("name", [n for n, bad in BAD_VALUES.items() if bad is NO_RULE])
def test_a_free_field_takes_either_value_as_given(name):
    for value in (True, False):
        fields, options = _violations(**{name: value})
        assert fields == []
        assert getattr(options, name) is value


def test_engine_options_follow_the_contract():
    engine = {f.name for f in dataclasses.fields(SamplingOptions)}
    contract_fields = set(ALL_FIELDS) - set(STRUCTURED_OUTPUT)
    assert engine - ENGINE_ONLY == contract_fields, "SamplingOptions and sampling.proto differ"
    assert set(typing.get_args(StructuredKind)) == set(STRUCTURED_OUTPUT)
    assert set(OPTIONAL_SCALARS) | set(REPEATED_SCALARS) <= engine


# A valid value, other than vLLM's default, per scalar type of the contract.
SCALAR_SAMPLES: dict[int, Any] = {
    FieldDescriptor.CPPTYPE_BOOL: True,
    FieldDescriptor.CPPTYPE_INT32: 3,
    FieldDescriptor.CPPTYPE_INT64: 3,
    FieldDescriptor.CPPTYPE_FLOAT: 0.5,
    FieldDescriptor.CPPTYPE_DOUBLE: 0.5,
    FieldDescriptor.CPPTYPE_STRING: "x",
}


def _sample(name: str) -> Any:
    return SCALAR_SAMPLES[sampling_pb2.SamplingParams.DESCRIPTOR.fields_by_name[name].cpp_type]


@pytest.mark.parametrize("name", OPTIONAL_SCALARS)
def test_each_scalar_reaches_vllm_sampling_params_by_its_name(name):
    value = _sample(name)
    fields, options = _violations(**{name: value})
    assert fields == []
    params = make_sampling_params(options, {}, stream=False)
    assert getattr(params, name) == value


def test_lists_bias_and_structured_output_reach_vllm():
    _, options = _violations(stop=["END"], stop_token_ids=[5], logit_bias={7: -1.5}, regex="[a-z]+")
    params = make_sampling_params(options, {}, stream=False)
    assert params.stop == ["END"]
    assert params.stop_token_ids == [5]
    assert params.logit_bias == {7: -1.5}
    assert params.structured_outputs is not None and params.structured_outputs.regex == "[a-z]+"


def _client_sample(field: FieldDescriptor) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return {1: 0.5}
    if field.message_type is sampling_pb2.ChoiceList.DESCRIPTOR:
        return ["a", "b"]
    if field.message_type is not None:
        pytest.fail(f"the client has no way to build message field {field.name!r}: teach build_sampling_params")
    scalar = SCALAR_SAMPLES[field.cpp_type]
    return [scalar] if field.is_repeated else scalar


@pytest.mark.parametrize("name", ALL_FIELDS)
def test_the_python_client_sets_every_field_by_keyword(name):
    field = sampling_pb2.SamplingParams.DESCRIPTOR.fields_by_name[name]
    params = build_sampling_params(**{name: _client_sample(field)})
    assert params is not None
    assert [f.name for f, _ in params.ListFields()] == [name]
