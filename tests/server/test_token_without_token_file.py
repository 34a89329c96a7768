"""Without a token file, a presented Authorization header is ignored the same way on gRPC and
on the OpenAI front end: the call runs as its certificate's principal or as anonymous."""

from __future__ import annotations

import grpc
import httpx

from service.frontends.grpc.server import Frontend
from service.lifecycle.wiring import shared_core
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records
from tests.server.stubs import stubs
from xinserve.v1 import inference_pb2


async def test_a_bearer_token_is_ignored_on_both_front_ends_when_no_token_file_is_set(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (http_port, runtime):
        settings = runtime.settings
        frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
        await frontend.start()
        try:
            grpc_port = next(iter(frontend.ports.values()))
            api = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}"))
            try:
                request = inference_pb2.TokenizeRequest(model="m", text="hello")
                for i, header in enumerate(("Bearer EMPTY", "Bearer sk-not-a-token", "Basic abc")):
                    rid = f"grpc-ignored-{i}"
                    metadata = (("authorization", header), ("x-request-id", rid))
                    reply = await api.inference.Tokenize(request, metadata=metadata)
                    assert list(reply.token_ids)
                    [record] = await rpc_records(runtime, rid)
                    assert (record.outcome, record.principal) == ("OK", "anonymous")
            finally:
                await api.close()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as http:
                reply = await http.get("/v1/models", headers={"authorization": "Bearer EMPTY", "x-request-id": "h-1"})
                assert reply.status_code == 200
                [record] = await rpc_records(runtime, "h-1")
                assert (record.outcome, record.principal) == ("OK", "anonymous")
        finally:
            await frontend.stop(0)
