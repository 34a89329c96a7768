"""Pure functions of the client: sampling parameters, targets, the health codec, error decoding."""

from __future__ import annotations

import json
import math

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2
from hypothesis import given
from hypothesis import strategies as st

from xinserve.v1 import sampling_pb2
from xinserve_client import (
    SAMPLING_PARAM_NAMES,
    InvalidArgumentError,
    ResourceExhaustedError,
    UnavailableError,
    XinserveError,
    build_sampling_params,
    cosine_similarity,
)
from xinserve_client._common import decode_health_response, encode_health_request, is_loopback_target
from xinserve_client.errors import from_rpc_error


def test_nothing_given_is_none():
    assert build_sampling_params() is None
    assert build_sampling_params(temperature=None, stop=None) is None


@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty"])
def test_explicit_zero_floats_are_set(name):
    params = build_sampling_params(**{name: 0.0})
    assert params.HasField(name) and getattr(params, name) == 0.0
    assert params.ListFields()[0][0].name == name and len(params.ListFields()) == 1


@pytest.mark.parametrize("name", ["n", "max_tokens", "min_tokens", "top_k", "seed", "logprobs", "prompt_logprobs"])
def test_explicit_zero_ints_are_set(name):
    assert build_sampling_params(**{name: 0}).HasField(name)


def test_explicit_false_bools_are_set():
    params = build_sampling_params(ignore_eos=False, skip_special_tokens=False, include_stop_str_in_output=False)
    assert params.HasField("ignore_eos") and params.HasField("skip_special_tokens")
    assert params.HasField("include_stop_str_in_output")


def test_collections_and_structured_output():
    params = build_sampling_params(stop=["a", "b"], stop_token_ids=(1, 2), logit_bias={5: -100, "7": 2.5})
    assert list(params.stop) == ["a", "b"] and list(params.stop_token_ids) == [1, 2]
    assert dict(params.logit_bias) == {5: -100.0, 7: 2.5}
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert json.loads(build_sampling_params(json_schema=schema).json_schema) == schema
    assert build_sampling_params(json_schema='{"type":"string"}').json_schema == '{"type":"string"}'
    assert list(build_sampling_params(choice=["yes", "no"]).choice.choices) == ["yes", "no"]
    assert build_sampling_params(regex=r"\d+").WhichOneof("structured_output") == "regex"
    assert build_sampling_params(json_object=True).json_object is True
    assert build_sampling_params(lora_name="sql").lora_name == "sql"


def test_keywords_override_a_copy_of_base():
    base = sampling_pb2.SamplingParams(temperature=0.7, max_tokens=5, stop=["x"])
    params = build_sampling_params(base, temperature=0.0, stop="y")
    assert (params.temperature, params.max_tokens, list(params.stop)) == (0.0, 5, ["y"])
    assert (base.temperature, list(base.stop)) == (pytest.approx(0.7), ["x"])
    assert build_sampling_params(base) == base and build_sampling_params(base) is not base


def test_bad_keywords():
    with pytest.raises(TypeError, match="unknown sampling parameter"):
        build_sampling_params(max_new_tokens=3)
    with pytest.raises(ValueError, match="at most one"):
        build_sampling_params(regex="a", grammar="b")
    with pytest.raises(TypeError):
        build_sampling_params(choice="yes")
    with pytest.raises(TypeError):
        build_sampling_params(max_tokens="ten")


def test_every_proto_field_is_reachable_by_keyword():
    fields = {f.name for f in sampling_pb2.SamplingParams.DESCRIPTOR.fields}
    assert fields == set(SAMPLING_PARAM_NAMES)


@given(st.floats(allow_nan=True, allow_infinity=True, width=32))
def test_any_float_temperature_is_sent_as_given(value):
    params = build_sampling_params(temperature=value)
    assert params.HasField("temperature")
    assert (math.isnan(params.temperature) and math.isnan(value)) or params.temperature == value


@pytest.mark.parametrize(
    ("target", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("ipv4:127.0.0.1:50051", True),
        ("dns:///localhost:50051", True),
        ("unix:/run/xinserve.sock", True),
        ("10.0.0.1:50051", False),
        ("[2001:db8::1]:50051", False),
        ("xinserve.internal:443", False),
        ("dns:///xinserve.internal:443", False),
    ],
)
def test_loopback_targets(target, loopback):
    assert is_loopback_target(target) is loopback


@given(st.text(max_size=300))
def test_health_request_encoding_matches_protobuf(service):
    assert health_pb2.HealthCheckRequest.FromString(encode_health_request(service)).service == service


@pytest.mark.parametrize(
    ("status", "name"), [(0, "UNKNOWN"), (1, "SERVING"), (2, "NOT_SERVING"), (3, "SERVICE_UNKNOWN")]
)
def test_health_response_decoding(status, name):
    data = health_pb2.HealthCheckResponse(status=status).SerializeToString()
    assert decode_health_response(data) == name
    # unknown fields before and after are skipped
    assert decode_health_response(b"\x12\x03abc" + data + b"\x1d\x00\x00\x00\x00") == name


class FakeRpcError(grpc.RpcError, grpc.Call):
    """What grpc raises on the blocking API: an RpcError that is also a Call."""

    def __init__(self, code, details, trailers=()):
        self._code, self._details, self._trailers = code, details, tuple(trailers)

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailers

    def initial_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, callback):
        return False


def _status_trailer(code, message, *details):
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        status.details.add().Pack(detail)
    return ("grpc-status-details-bin", status.SerializeToString())


def test_from_rpc_error_decodes_details():
    bad = error_details_pb2.BadRequest(
        field_violations=[error_details_pb2.BadRequest.FieldViolation(field="prompt", description="too long")]
    )
    info = error_details_pb2.ErrorInfo(reason="INVALID_SAMPLING_PARAMS", domain="xinserve.io")
    err = from_rpc_error(
        FakeRpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "bad",
            [_status_trailer(grpc.StatusCode.INVALID_ARGUMENT, "bad", info, bad), ("x-request-id", "srv-1")],
        ),
        "client-1",
    )
    assert isinstance(err, InvalidArgumentError)
    assert err.field_violations == [("prompt", "too long")]
    assert err.reason == "INVALID_SAMPLING_PARAMS"
    assert err.request_id == "srv-1"  # the server's trailer wins over the client's id
    assert str(err) == "INVALID_ARGUMENT: bad (prompt: too long) [request_id=srv-1]"


def test_from_rpc_error_without_details_and_with_mismatched_status():
    err = from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connect failed"), "c-2")
    assert isinstance(err, UnavailableError) and err.retry_after is None and err.request_id == "c-2"
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1, nanos=250_000_000))
    # a Status whose message differs from the call's details: read leniently, not dropped
    trailer = _status_trailer(grpc.StatusCode.RESOURCE_EXHAUSTED, "other text", retry)
    err = from_rpc_error(FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", [trailer]))
    assert isinstance(err, ResourceExhaustedError) and err.retry_after == pytest.approx(1.25)
    assert err.message == "queue full"


def test_from_rpc_error_survives_garbage():
    err = from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, "", [("grpc-status-details-bin", b"\xff\xff")]))
    assert type(err) is XinserveError and err.code is grpc.StatusCode.INTERNAL and str(err) == "INTERNAL"


def test_cosine_similarity():
    assert cosine_similarity([1, 0], [0, 1]) == 0.0
    assert cosine_similarity([1, 2], [2, 4]) == pytest.approx(1.0)
    assert cosine_similarity([0, 0], [1, 1]) == 0.0
    with pytest.raises(ValueError):
        cosine_similarity([1], [1, 2])


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("LOCALHOST", True),
        ("api.localhost", True),
        ("10.0.0.1", False),
        ("example.com", False),
        ("::", False),
    ],
)
def test_one_loopback_rule_for_server_and_client(host, loopback):
    from pydantic import ValidationError

    from service.settings.config import Settings
    from trust.tee.config import _loopback
    from xinserve_client.addresses import is_loopback_host

    assert is_loopback_host(host) is loopback
    bare = host.strip("[]")
    address = f"[{bare}]:1" if ":" in bare else f"{bare}:1"
    try:
        Settings(listen={"plaintext": [address]})
        server_loopback = True
    except ValidationError as exc:
        assert "is not a loopback address" in str(exc)
        server_loopback = False
    assert server_loopback is loopback
    assert _loopback(bare) is loopback
