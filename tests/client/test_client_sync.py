"""The blocking client against the in-process stand-in server."""

from __future__ import annotations

import re
import time

import grpc
import pytest

from xinserve.v1 import common_pb2, model_pb2
from xinserve_client import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    XinserveClient,
    XinserveError,
)

TINY = "xinserve-tiny-llama"


@pytest.fixture
def client(stand_in):
    with XinserveClient(stand_in.target) as c:
        yield c


def test_generate_sets_explicit_zero_and_leaves_none_unset(client, stand_in):
    reply = client.generate(TINY, "abc", temperature=0.0, max_tokens=8, top_p=None, stop="x")
    assert reply.outputs[0].text == "cba"
    params = stand_in.state.last("Generate").request.sampling_params
    assert params.HasField("temperature") and params.temperature == 0.0
    assert params.HasField("max_tokens") and params.max_tokens == 8
    assert not params.HasField("top_p")
    assert list(params.stop) == ["x"]


def test_generate_without_sampling_kwargs_sends_no_sampling_params(client, stand_in):
    client.generate(TINY, "abc")
    assert not stand_in.state.last("Generate").request.HasField("sampling_params")


def test_generate_token_id_prompt(client, stand_in):
    reply = client.generate(TINY, [5, 6, 7])
    assert list(stand_in.state.last("Generate").request.prompt_token_ids) == [5, 6, 7]
    assert reply.outputs[0].text == "5 6 7"


def test_unknown_sampling_keyword_is_a_type_error(client):
    with pytest.raises(TypeError, match="temprature"):
        client.generate(TINY, "abc", temprature=0.5)


def test_explicit_request_id_goes_in_request_and_metadata(client, stand_in):
    client.generate(TINY, "abc", request_id="req-42", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01")
    call = stand_in.state.last("Generate")
    assert call.request.request_id == "req-42"
    assert call.metadata["x-request-id"] == "req-42"
    assert call.metadata["traceparent"].startswith("00-aaaa")


@pytest.mark.parametrize("rid", ["bad id\x01", "with space", "x" * 129, "caf\u00e9"])
def test_bad_request_id_is_a_local_value_error(client, stand_in, rid):
    n = len(stand_in.state.calls)
    with pytest.raises(ValueError, match=r"request_id must be 1\.\.128 printable ASCII"):
        client.generate(TINY, "x", request_id=rid)
    with pytest.raises(ValueError, match="request_id"):
        list(client.generate_stream(TINY, "x", request_id=rid))
    assert len(stand_in.state.calls) == n


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"traceparent": "00-a\nb"}, "traceparent"),
        ({"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "tracestate": "k=\x7f"}, "tracestate"),
        ({"metadata": [("x-tenant", "t\x00")]}, "metadata 'x-tenant'"),
        ({"metadata": [("X-Tenant", "t")]}, "metadata key 'X-Tenant'"),
    ],
)
def test_bad_metadata_is_a_local_value_error(client, stand_in, kwargs, name):
    n = len(stand_in.state.calls)
    with pytest.raises(ValueError, match=re.escape(name)):
        client.generate(TINY, "x", **kwargs)
    assert len(stand_in.state.calls) == n


def test_bad_token_is_a_local_value_error_without_echoing_it(stand_in):
    with pytest.raises(ValueError, match="token must be") as caught:
        XinserveClient(stand_in.target, token="s3cret\n")
    assert "s3cret" not in str(caught.value)
    with XinserveClient(stand_in.target, token=lambda: "s3cret\r\n") as c:
        with pytest.raises(ValueError, match="token must be") as caught:
            c.generate(TINY, "x")
    assert "s3cret" not in str(caught.value)


def test_bad_channel_metadata_is_a_local_value_error(stand_in):
    with pytest.raises(ValueError, match="metadata 'x-tenant'"):
        XinserveClient(stand_in.target, metadata=[("x-tenant", "\u4e2d")])


def test_generated_request_id_in_metadata(client, stand_in):
    client.list_models()
    rid = stand_in.state.last("ListModels").metadata["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)


def test_request_ids_can_be_switched_off(stand_in):
    with XinserveClient(stand_in.target, generate_request_ids=False, metadata=[("x-tenant", "t1")]) as c:
        c.generate(TINY, "abc")
    md = stand_in.state.last("Generate").metadata
    assert "x-request-id" not in md
    assert md["x-tenant"] == "t1"


def test_static_token_sent_as_bearer_metadata_on_loopback(stand_in):
    with XinserveClient(stand_in.target, token="s3cret") as c:
        c.generate(TINY, "abc")
    assert stand_in.state.last("Generate").metadata["authorization"] == "Bearer s3cret"


def test_token_callable_is_called_for_every_call(stand_in):
    tokens = iter(["t1", "t2"])
    with XinserveClient(stand_in.target, token=lambda: next(tokens)) as c:
        c.generate(TINY, "abc")
        c.list_models()
    assert stand_in.state.last("Generate").metadata["authorization"] == "Bearer t1"
    assert stand_in.state.last("ListModels").metadata["authorization"] == "Bearer t2"


def test_no_token_no_authorization_header(client, stand_in):
    client.generate(TINY, "abc")
    assert "authorization" not in stand_in.state.last("Generate").metadata


def test_stream_yields_deltas_finish_once_usage_last(client):
    with client.generate_stream(TINY, "one two three", max_tokens=3) as stream:
        deltas = list(stream)
    assert "".join(d.text for d in deltas) == "one two three"
    finished = [d for d in deltas if d.finish_reason != common_pb2.FINISH_REASON_UNSPECIFIED]
    assert len(finished) == 1 and finished[0] is deltas[-1]
    assert [d.HasField("usage") for d in deltas] == [False, False, True]
    assert stream.request_id and deltas[0].request_id == stream.request_id


def test_stream_close_cancels_server_call(client, stand_in):
    stream = client.generate_stream(TINY, "forever")
    first = [next(stream), next(stream)]
    assert first[0].text == "t0 "
    stream.close()
    assert stand_in.state.cancelled(stream.request_id), "server call was not cancelled"
    assert list(stream) == []  # iteration simply ends after close()
    assert stream.closed


def test_leaving_with_block_cancels_server_call(client, stand_in):
    with client.generate_stream(TINY, "forever") as stream:
        for i, _ in enumerate(stream):
            if i == 2:
                break
    assert stand_in.state.cancelled(stream.request_id)


def test_chat_stream_close_cancels(client, stand_in):
    with client.chat_stream(TINY, [("user", "forever")]) as stream:
        next(stream)
    assert stand_in.state.cancelled(stream.request_id)


def test_closing_client_cancels_open_stream(stand_in):
    c = XinserveClient(stand_in.target)
    stream = c.generate_stream(TINY, "forever")
    next(stream)
    c.close()
    assert stand_in.state.cancelled(stream.request_id)
    with pytest.raises(RuntimeError, match="closed"):
        c.list_models()


def test_per_call_deadline(client, stand_in):
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError) as info:
        client.generate(TINY, "slow", timeout=0.2)
    assert time.monotonic() - start < 3
    assert info.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert stand_in.state.unary_cancelled.wait(5), "server did not see the deadline"


def test_default_deadline_from_client(stand_in):
    with XinserveClient(stand_in.target, timeout=0.2) as c, pytest.raises(DeadlineExceededError):
        c.generate(TINY, "slow")


def test_stream_deadline_raises_while_iterating(client, stand_in):
    with pytest.raises(DeadlineExceededError), client.generate_stream(TINY, "forever", timeout=0.3) as stream:
        for _ in stream:
            pass
    assert stand_in.state.cancelled(stream.request_id)


def test_none_timeout_means_no_deadline(stand_in):
    with XinserveClient(stand_in.target, timeout=0.05) as c:
        with c.generate_stream(TINY, "forever", timeout=None) as stream:
            time.sleep(0.2)
            assert next(stream).text


def test_invalid_argument_carries_all_field_violations(client, stand_in):
    with pytest.raises(InvalidArgumentError) as info:
        client.generate(TINY, "abc", temperature=-1.0, top_p=1.5, request_id="bad-1")
    err = info.value
    assert err.field_violations == [
        ("sampling_params.temperature", "must be a finite number >= 0"),
        ("sampling_params.top_p", "must be in (0, 1]"),
    ]
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT
    assert err.request_id == "bad-1"
    text = str(err)
    assert text.startswith("INVALID_ARGUMENT: 2 invalid field(s)")
    assert "sampling_params.temperature" in text and "[request_id=bad-1]" in text
    assert not isinstance(err, grpc.RpcError)


def test_nan_temperature_is_sent_and_rejected(client):
    with pytest.raises(InvalidArgumentError) as info:
        client.generate(TINY, "abc", temperature=float("nan"))
    assert info.value.field_violations[0][0] == "sampling_params.temperature"


def test_invalid_argument_on_stream(client):
    stream = client.generate_stream(TINY, "abc", temperature=-1.0)
    with pytest.raises(InvalidArgumentError) as info:
        next(stream)
    assert info.value.field_violations[0][0] == "sampling_params.temperature"


def test_not_found_with_error_info_and_server_request_id(client):
    with pytest.raises(NotFoundError) as info:
        client.generate("missing", "abc", request_id="rid-7")
    err = info.value
    assert err.reason == "MODEL_NOT_FOUND"
    assert err.error_metadata == {"model": "missing"}
    assert err.request_id == "rid-7"
    assert "not served" in err.message


def test_resource_exhausted_retry_after(client):
    with pytest.raises(ResourceExhaustedError) as info:
        client.generate("busy", "abc")
    assert info.value.retry_after == pytest.approx(2.5)
    assert "retry after 2.5 s" in str(info.value)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("UNAVAILABLE", UnavailableError),
        ("CANCELLED", CancelledError),
        ("UNAUTHENTICATED", UnauthenticatedError),
        ("PERMISSION_DENIED", PermissionDeniedError),
        ("FAILED_PRECONDITION", FailedPreconditionError),
        ("DEADLINE_EXCEEDED", DeadlineExceededError),
        ("INTERNAL", XinserveError),
        ("UNIMPLEMENTED", XinserveError),
    ],
)
def test_status_codes_map_to_exception_classes(client, code, cls):
    with pytest.raises(XinserveError) as info:
        client.generate(f"status:{code}", "abc")
    assert type(info.value) is cls
    assert info.value.code is grpc.StatusCode[code]
    assert info.value.code_name == code
    assert info.value.request_id  # the generated x-request-id
    with pytest.raises(cls):
        client.embed(f"status:{code}", "abc")


def test_unreachable_server_is_unavailable(closed_port_target):
    with XinserveClient(closed_port_target) as c, pytest.raises(UnavailableError):
        c.list_models(timeout=5)


def test_models_server_info_load_health(client):
    models = client.list_models()
    assert [m.name for m in models] == [TINY, "all-MiniLM-L6-v2", "tampered"]
    assert client.get_model(TINY).kind == model_pb2.MODEL_KIND_GENERATE
    with pytest.raises(NotFoundError):
        client.get_model("nope")
    assert client.server_info().server_version == "0.1.0"
    assert client.load().running == 0
    assert client.health() == "SERVING"
    assert client.health("xinserve.v1.InferenceService") == "SERVING"
    assert client.health("no.such.Service") == "SERVICE_UNKNOWN"


def test_tokenize_detokenize_abort(client, stand_in):
    ids = client.tokenize(TINY, "hi", add_special_tokens=False)
    assert list(ids.token_ids) == [104, 105] and ids.max_model_len == 2048
    assert stand_in.state.last("Tokenize").request.HasField("add_special_tokens")
    assert client.detokenize(TINY, ids.token_ids) == "hi"
    assert client.abort("running-1") is True
    assert client.abort("unknown") is False


def test_chat_accepts_dicts_tuples_and_protos(client, stand_in):
    reply = client.chat(
        TINY,
        [
            {"role": "system", "content": "be brief"},
            common_pb2.ChatMessage(role="assistant", content="ok"),
            ("user", "hello"),
        ],
        add_generation_prompt=True,
        max_tokens=4,
    )
    assert reply.outputs[0].text == "you said: hello"
    request = stand_in.state.last("Chat").request
    assert [m.role for m in request.messages] == ["system", "assistant", "user"]
    assert request.add_generation_prompt is True
    assert request.sampling_params.max_tokens == 4


def test_embed_one_string_or_many(client, stand_in):
    one = client.embed("all-MiniLM-L6-v2", "hello")
    assert len(one.embeddings) == 1 and len(one.embeddings[0].values) == 26
    assert list(stand_in.state.last("Embed").request.inputs) == ["hello"]
    client.embed("all-MiniLM-L6-v2", ["a", "b"], normalize=False)
    request = stand_in.state.last("Embed").request
    assert list(request.inputs) == ["a", "b"] and request.HasField("normalize") and not request.normalize


def test_check_compatibility(client, monkeypatch):
    from xinserve_client import IncompatibleServerError, _common

    assert client.check_compatibility().schema_revision == 1
    monkeypatch.setattr(_common, "SCHEMA_REVISION", 0)
    with pytest.raises(IncompatibleServerError, match="upgrade xinserve-client") as info:
        client.check_compatibility()
    assert isinstance(info.value, FailedPreconditionError)
