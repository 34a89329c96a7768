"""Calls still running when the drain grace is over are answered UNAVAILABLE with ErrorInfo
reason DRAINING (not a bare cancellation), and audited with that outcome."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2

from audit import QueryFilter, decode_record
from service.frontends.grpc.server import Frontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.stubs import detail_of, stubs
from tests.server.test_audit_begin_records import GatedEngine
from xinserve.v1 import inference_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")


@ASYNC
async def test_calls_cut_at_the_end_of_the_drain_get_unavailable_draining(tmp_path):
    settings = load_settings(
        overrides={"data_dir": str(tmp_path), "listen": {"plaintext": ["127.0.0.1:0"]}, "metrics_listen": None}
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    await frontend.start()
    engine = GatedEngine("m")
    engine.gate = asyncio.Event()  # never set: the calls run until the server stops them
    await engine.start()
    runtime.add_model(ModelEntry("m", "generate", tmp_path, engine, manifest_digest="sm3:" + "ab" * 32))
    await runtime.mark(runtime.models["m"], ModelState.READY)
    await runtime.set_serving(True)
    api = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}"))
    try:
        stream = api.inference.GenerateStream(
            inference_pb2.GenerateRequest(model="m", prompt="hi"), metadata=(("x-request-id", "drain-stream"),)
        )
        assert (await stream.read()).text == "x"
        unary = asyncio.ensure_future(
            api.inference.Generate(
                inference_pb2.GenerateRequest(model="m", prompt="hi"), metadata=(("x-request-id", "drain-unary"),)
            )
        )
        loop = asyncio.get_running_loop()
        limit = loop.time() + 60
        while runtime.admission.in_flight < 2:
            assert loop.time() < limit, "the unary call never started"
            await asyncio.sleep(0.02)
        await runtime.start_drain()
        assert not await runtime.wait_idle(0)
        await frontend.stop(0)
        with pytest.raises(grpc.aio.AioRpcError) as cut_stream:
            await stream.read()
        with pytest.raises(grpc.aio.AioRpcError) as cut_unary:
            await unary
        for err in (cut_stream.value, cut_unary.value):
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err
            info = detail_of(err, error_details_pb2.ErrorInfo)
            assert info is not None and info.reason == "DRAINING"
        rows = await runtime.audit.log.query(QueryFilter(event="rpc"))
        outcomes = {r.request_id: r.outcome for r in (decode_record(row.body)[2] for row in rows)}
        assert outcomes["drain-stream"] == outcomes["drain-unary"] == "UNAVAILABLE"
    finally:
        await api.close()
        await frontend.stop(0)
        await runtime.audit.close()
