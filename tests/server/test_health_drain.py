"""Health Watch follows starting → serving → draining; drain refuses new calls and lets
in-flight streams finish; reflection lists the services."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.conftest import TINY
from tests.server.frontends import extra_frontend
from tests.server.stubs import detail_of, stubs
from xinserve.v1 import common_pb2, inference_pb2, model_pb2, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def test_health_check_names(live_server):
    async with grpc.aio.insecure_channel(live_server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "xinserve.v1.InferenceService", f"xinserve.v1.InferenceService/{TINY}"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
            assert reply.status == SERVING, name
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_models_listed_with_state(api):
    reply = await api.models.ListModels(model_pb2.ListModelsRequest())
    by_name = {m.name: m for m in reply.models}
    assert by_name[TINY].kind == model_pb2.MODEL_KIND_GENERATE
    assert by_name[TINY].state == model_pb2.MODEL_STATE_READY
    assert by_name[TINY].max_context_length == 2048
    assert by_name[TINY].device == "cpu"
    assert by_name["all-MiniLM-L6-v2"].kind == model_pb2.MODEL_KIND_EMBED


async def test_watch_sees_starting_serving_draining_and_drain_lets_streams_finish(live_server):
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "drain_grace_seconds": 20}
    async with extra_frontend(live_server, overrides) as (frontend, runtime, port):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        first = await watch.read()
        assert first.status == SERVING
        # Going back to "starting" (e.g. a model reload) is seen by the watcher too.
        await runtime.set_serving(False)
        assert (await watch.read()).status == NOT_SERVING
        await runtime.set_serving(True)
        assert (await watch.read()).status == SERVING

        api = stubs(channel)
        stream = api.inference.GenerateStream(
            inference_pb2.GenerateRequest(
                model=TINY,
                prompt="drain me",
                sampling_params=sampling_pb2.SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True),
            )
        )
        first_delta = await stream.read()
        assert first_delta.token_ids

        await runtime.start_drain()
        assert (await watch.read()).status == NOT_SERVING
        idle = asyncio.create_task(runtime.wait_idle(runtime.settings.drain_grace_seconds))
        # While draining, the listener stays open: a NEW connection sees NOT_SERVING and gets
        # UNAVAILABLE with details, not "connection refused".
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as fresh:
            probe = await health_pb2_grpc.HealthStub(fresh).Check(health_pb2.HealthCheckRequest(service=""))
            assert probe.status == NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stubs(fresh).inference.Generate(inference_pb2.GenerateRequest(model=TINY, prompt="late"))
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            info = detail_of(err.value, error_details_pb2.ErrorInfo)
            assert info is not None and info.reason == "DRAINING"
        assert not idle.done(), "the stream in flight keeps the server from going idle"

        tokens = len(first_delta.token_ids)
        last = None
        while (msg := await stream.read()) is not grpc.aio.EOF:
            tokens += len(msg.token_ids)
            last = msg
        assert last is not None and last.finish_reason == common_pb2.FINISH_REASON_LENGTH
        assert tokens == 300
        assert await idle is True
        await frontend.stop(0)
        await channel.close()


async def test_reflection_lists_the_services(live_server):
    async with grpc.aio.insecure_channel(live_server.target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = stub.ServerReflectionInfo()
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        reply = await call.read()
        await call.done_writing()
        names = {s.name for s in reply.list_services_response.service}
        assert {
            "xinserve.v1.InferenceService",
            "xinserve.v1.ModelService",
            "xinserve.v1.ServerService",
            "grpc.health.v1.Health",
        } <= names


async def test_reflection_can_be_switched_off(live_server):
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "reflection": False}
    async with extra_frontend(live_server, overrides) as (_, _, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
            # No request is written: the server refuses the stream on its headers, and a write
            # racing that refusal is failed by grpc's client itself with a local INTERNAL status.
            assert await call.code() == grpc.StatusCode.UNIMPLEMENTED
