"""``Abort`` checks its ``request_id`` by the rule every other call's request id follows
(``validation.REQUEST_ID``): an id that is not one is INVALID_ARGUMENT naming ``request_id``,
audited as such, and never echoed into response metadata (grpc cannot send it: the client
would get INTERNAL while the call was audited OK)."""

from __future__ import annotations

import uuid

import grpc
import pytest

from audit import QueryFilter, decode_record
from service.core.call_context import CallRecord
from service.frontends.grpc.interceptors import request_id_metadata
from service.frontends.grpc.server import Frontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.operations.validation import REQUEST_ID_RULE
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.fake_engine import FakeEngine
from tests.server.stubs import field_violations, stubs
from xinserve.v1 import inference_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")

NOT_REQUEST_IDS = ["é", "a\nb", "ab\n", "a\x7f", "\u202e", "a b", "x" * 129]
"""Non-ASCII, control characters (also a trailing newline), bidi override, a space, too long."""


@pytest.fixture
async def server(tmp_path):
    settings = load_settings(
        overrides={"data_dir": str(tmp_path), "listen": {"plaintext": ["127.0.0.1:0"]}, "metrics_listen": None}
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    api = None
    try:
        await frontend.start()
        engine = FakeEngine("m")
        await engine.start()
        runtime.add_model(ModelEntry("m", "generate", tmp_path, engine))
        await runtime.mark(runtime.models["m"], ModelState.READY)
        await runtime.set_serving(True)
        api = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}"))
        yield api, runtime
    finally:
        if api is not None:
            await api.close()
        await frontend.stop(0)
        await runtime.audit.close()


async def _outcomes(runtime: Runtime, request_id: str) -> list[tuple[str, str]]:
    rows = await runtime.audit.log.query(QueryFilter())
    records = (decode_record(row.body)[2] for row in rows)
    return [(r.event, r.outcome) for r in records if r.request_id == request_id]


@ASYNC
@pytest.mark.parametrize("bad", NOT_REQUEST_IDS, ids=ascii)
async def test_abort_refuses_an_id_that_is_not_a_request_id(server, bad):
    api, runtime = server
    call_id = f"abort-{uuid.uuid4().hex[:8]}"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.inference.Abort(inference_pb2.AbortRequest(request_id=bad), metadata=(("x-request-id", call_id),))
    err = caught.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert field_violations(err) == {"request_id": REQUEST_ID_RULE}
    assert ("x-request-id", call_id) in tuple(err.trailing_metadata() or ())
    assert await _outcomes(runtime, call_id) == [("rpc", "INVALID_ARGUMENT")]


@ASYNC
async def test_abort_of_a_valid_unknown_id_is_ok_and_echoes_that_id(server):
    api, runtime = server
    call_id = f"abort-{uuid.uuid4().hex[:8]}"
    call = api.inference.Abort(
        inference_pb2.AbortRequest(request_id="no-such-request"), metadata=(("x-request-id", call_id),)
    )
    assert (await call).aborted is False
    assert ("x-request-id", "no-such-request") in tuple(await call.trailing_metadata())
    assert await _outcomes(runtime, "no-such-request") == [("rpc", "OK")]


@ASYNC
async def test_generate_refuses_a_request_id_with_a_trailing_newline(server):
    api, _ = server
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.inference.Generate(inference_pb2.GenerateRequest(model="m", prompt="hi", request_id="ab\n"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_violations(caught.value) == {"request_id": REQUEST_ID_RULE}


@pytest.mark.parametrize("bad", NOT_REQUEST_IDS, ids=ascii)
def test_an_invalid_id_in_a_record_is_never_sent_as_metadata(bad):
    record = CallRecord(method="/xinserve.v1.InferenceService/Abort", peer="", request_id=bad, trace_id=None)
    assert request_id_metadata(record) == ()
    record.request_id = "fine-id"
    assert request_id_metadata(record) == (("x-request-id", "fine-id"),)
