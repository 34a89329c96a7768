"""A gRPC message over ``limits.max_message_bytes`` is refused by the grpc core with
RESOURCE_EXHAUSTED before any handler runs (docs/architecture.md): no ErrorInfo can be
attached there, and the call leaves no audit record."""

from __future__ import annotations

import grpc
import pytest
from grpc_status import rpc_status

from audit import QueryFilter, decode_record
from service.frontends.grpc.server import Frontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import Runtime
from service.settings.config import load_settings
from tests.server.stubs import stubs
from xinserve.v1 import inference_pb2


@pytest.mark.asyncio(loop_scope="session")
async def test_over_size_message_is_resource_exhausted_from_the_transport(tmp_path):
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "limits": {"max_message_bytes": 4096},
        }
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    await frontend.start()
    api = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}"))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await api.inference.Generate(
                inference_pb2.GenerateRequest(model="m", prompt="x" * 8192), metadata=(("x-request-id", "too-big"),)
            )
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert rpc_status.from_call(err.value) is None  # no google.rpc.Status details at all
        rows = await runtime.audit.log.query(QueryFilter())
        assert "too-big" not in {decode_record(row.body)[2].request_id for row in rows}
    finally:
        await api.close()
        await frontend.stop(0)
        await runtime.audit.close()
