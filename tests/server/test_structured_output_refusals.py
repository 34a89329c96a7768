"""A structured-output constraint that admits no output is the client's mistake:
INVALID_ARGUMENT naming the field, before anything is generated (vLLM would end the request
with one meaningless token and finish reason ``error``, which must never pass as success)."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from tests.conftest import TINY
from tests.server.stubs import detail_of, field_violations
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.engine]


@pytest.mark.parametrize(
    ("constraint", "field"),
    [
        ({"json_schema": '{"$ref": "#"}'}, "sampling_params.json_schema"),
        ({"regex": "[^\\s\\S]"}, "sampling_params.regex"),
    ],
)
async def test_unsatisfiable_constraint_is_invalid_argument(api, live_server, constraint, field):
    before = live_server.runtime.models[TINY].engine.load()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(
            inference_pb2.GenerateRequest(
                model=TINY, prompt="hi", sampling_params=sampling_pb2.SamplingParams(max_tokens=4, **constraint)
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert field in field_violations(err.value)
    assert detail_of(err.value, error_details_pb2.ErrorInfo).domain == "xinserve.io"
    assert live_server.runtime.models[TINY].engine.load().running == before.running


async def test_satisfiable_schema_still_generates(api):
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY,
            prompt="hi",
            sampling_params=sampling_pb2.SamplingParams(
                max_tokens=8, temperature=0.0, json_schema='{"type": "integer"}'
            ),
        )
    )
    assert reply.outputs[0].token_ids
    assert reply.outputs[0].finish_reason not in (common_pb2.FINISH_REASON_UNSPECIFIED, common_pb2.FINISH_REASON_ERROR)
