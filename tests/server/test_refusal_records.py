"""Audit records of refused calls name what was refused: a Generate naming a LoRA adapter the
model does not have is recorded with that adapter, over the real gRPC and OpenAI HTTP front ends."""

from __future__ import annotations

import grpc
import openai
import pytest
from cryptography.x509.oid import NameOID

from audit import QueryFilter, decode_record
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records
from tests.server.test_principal_identities import USER_TOKEN, _name, mtls_server  # noqa: F401
from xinserve.v1 import inference_pb2, inference_pb2_grpc, sampling_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")


@ASYNC
async def test_an_unknown_adapter_is_named_in_the_refused_call_record(mtls_server):  # noqa: F811
    pki, runtime, target = mtls_server
    cert, key = pki.leaf(_name((NameOID.COMMON_NAME, "svc")))
    request = inference_pb2.GenerateRequest(
        model="m", prompt="x", sampling_params=sampling_pb2.SamplingParams(lora_name="no-such-adapter")
    )
    metadata = (("authorization", f"Bearer {USER_TOKEN}"), ("x-request-id", "bad-adapter"))
    async with grpc.aio.secure_channel(target, pki.credentials(cert, key)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await inference_pb2_grpc.InferenceServiceStub(channel).Generate(request, metadata=metadata)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    rows = await runtime.audit.log.query(QueryFilter(event="rpc"))
    records = {r.request_id: r for r in (decode_record(row.body)[2] for row in rows)}
    rec = records["bad-adapter"]
    assert rec.outcome == "NOT_FOUND"
    assert rec.detail.get("lora_adapter") == "no-such-adapter"


@ASYNC
async def test_an_unknown_adapter_is_named_in_the_refused_openai_call_record(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, runtime):
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            await client.completions.create(
                model="m",
                prompt="x",
                extra_body={"lora_name": "no-such-adapter"},
                extra_headers={"x-request-id": "bad-adapter-http"},
            )
        await client.close()
        (rec,) = await rpc_records(runtime, "bad-adapter-http")
    assert rec.detail.get("lora_adapter") == "no-such-adapter"
