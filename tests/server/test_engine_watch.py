"""A dead engine is never healthy: the engine watch turns its model FAILED (engine_died),
health NOT_SERVING (the server's too once nothing can be served), records the death in the
audit log, asks the server to stop, and nobody is told to retry. Uses a fake engine that
dies on demand; the real kill -9 of vLLM's engine core is in test_verified_weights.py."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from audit import QueryFilter, decode_record
from engine_backends.errors import EngineDeadError
from service.core.status import from_engine_error
from service.frontends.grpc.server import Frontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.engine_watch import EngineWatch
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.fake_engine import FakeEngine
from tests.server.stubs import detail_of, stubs
from xinserve.v1 import inference_pb2, model_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def _until(condition, what: str, limit_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@ASYNC
async def test_dead_engine_turns_model_and_then_server_not_serving(tmp_path):
    settings = load_settings(
        overrides={"data_dir": str(tmp_path), "listen": {"plaintext": ["127.0.0.1:0"]}, "metrics_listen": None}
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    await frontend.start()
    engines = {name: FakeEngine(name) for name in ("first", "second")}
    for name, engine in engines.items():
        await engine.start()
        runtime.add_model(ModelEntry(name, "generate", tmp_path, engine, manifest_digest="sm3:" + "ab" * 32))
        await runtime.mark(runtime.models[name], ModelState.READY)
    await runtime.set_serving(True)
    deaths: list[str] = []
    watch = EngineWatch(runtime, deaths.append, interval_s=0.02).start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}")
    api = stubs(channel)
    health = health_pb2_grpc.HealthStub(channel)
    try:
        engines["first"].dead = True
        await _until(lambda: deaths == ["first"], "the first engine's death")
        model = (await api.models.GetModel(model_pb2.GetModelRequest(name="first"))).model
        assert model.state == model_pb2.MODEL_STATE_FAILED
        assert model.state_reason_code == "engine_died"
        assert "engine died" in model.state_reason
        check = await health.Check(health_pb2.HealthCheckRequest(service="xinserve.v1.InferenceService/first"))
        assert check.status == NOT_SERVING
        # The other model still serves, so the server does.
        assert (await health.Check(health_pb2.HealthCheckRequest(service=""))).status == SERVING

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await api.inference.Generate(inference_pb2.GenerateRequest(model="first", prompt="hi"))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert detail_of(err.value, error_details_pb2.RetryInfo) is None
        ok = await api.inference.Generate(inference_pb2.GenerateRequest(model="second", prompt="hi"))
        assert ok.outputs[0].token_ids == [7]

        engines["second"].dead = True
        await _until(lambda: deaths == ["first", "second"], "the second engine's death")
        assert (await health.Check(health_pb2.HealthCheckRequest(service=""))).status == NOT_SERVING
        assert (
            await health.Check(health_pb2.HealthCheckRequest(service="xinserve.v1.InferenceService"))
        ).status == NOT_SERVING

        rows = await runtime.audit.log.query(QueryFilter(event="model_unloaded"))
        records = [decode_record(r.body)[2] for r in rows]
        assert [(r.model, r.outcome, r.detail.get("reason")) for r in records] == [
            ("first", "UNAVAILABLE", "engine_died"),
            ("second", "UNAVAILABLE", "engine_died"),
        ]
        assert records[0].manifest_digest == "sm3:" + "ab" * 32
    finally:
        await watch.stop()
        await channel.close()
        await frontend.stop(0)
        await runtime.audit.close()


def test_a_request_the_engine_death_cut_short_gets_no_retry_hint():
    err = from_engine_error(EngineDeadError("model 'm': the engine died"))
    assert err.code == grpc.StatusCode.UNAVAILABLE
    assert err.reason == "ENGINE_DIED"
    assert err.retry_after_s is None
    details = dict(err.to_status().trailing_metadata)["grpc-status-details-bin"]
    kinds = [d.type_url.rsplit("/", 1)[-1] for d in status_pb2.Status.FromString(details).details]
    assert kinds == ["google.rpc.ErrorInfo"]


class _CallsFailFirst(FakeEngine):
    """A dead engine whose health check still passes (vLLM's monitor has not seen the
    engine-core exit yet) while its calls already fail with EngineDeadError."""

    async def check_health(self) -> None:
        return None


@ASYNC
async def test_a_call_that_finds_the_engine_dead_updates_the_state_before_it_is_answered(tmp_path):
    settings = load_settings(
        overrides={"data_dir": str(tmp_path), "listen": {"plaintext": ["127.0.0.1:0"]}, "metrics_listen": None}
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    await frontend.start()
    engine = _CallsFailFirst("lagging")
    await engine.start()
    runtime.add_model(ModelEntry("lagging", "generate", tmp_path, engine))
    await runtime.mark(runtime.models["lagging"], ModelState.READY)
    await runtime.set_serving(True)
    deaths: list[str] = []
    watch = EngineWatch(runtime, deaths.append, interval_s=3600).start()  # no poll during the test
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}")
    api = stubs(channel)
    health = health_pb2_grpc.HealthStub(channel)
    try:
        engine.dead = True
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await api.inference.Generate(inference_pb2.GenerateRequest(model="lagging", prompt="hi"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # Answered only after the death was recorded: no window where the model says READY.
        assert deaths == ["lagging"]
        model = (await api.models.GetModel(model_pb2.GetModelRequest(name="lagging"))).model
        assert (model.state, model.state_reason_code) == (model_pb2.MODEL_STATE_FAILED, "engine_died")
        assert (await health.Check(health_pb2.HealthCheckRequest(service=""))).status == NOT_SERVING
        with pytest.raises(grpc.aio.AioRpcError) as after:
            await api.inference.Generate(inference_pb2.GenerateRequest(model="lagging", prompt="hi"))
        assert after.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await watch.stop()
        assert runtime.engine_died is None
        await channel.close()
        await frontend.stop(0)
        await runtime.audit.close()
