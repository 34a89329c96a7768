"""gRPC server reflection answers on the released v1 service (ghz, current grpcurl) as on
v1alpha, and neither when reflection is switched off."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from service.frontends.grpc.reflection import V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME
from service.frontends.grpc.server import Frontend
from service.lifecycle.wiring import shared_core
from service.runtime.state import Runtime
from service.settings.config import load_settings

V1_METHOD = f"/{V1_SERVICE_NAME}/ServerReflectionInfo"


async def _frontend(tmp_path, reflection: bool) -> Frontend:
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path),
            "metrics_listen": None,
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "reflection": reflection,
        }
    )
    frontend = Frontend(*shared_core(Runtime(settings), settings), settings, "cpu")
    await frontend.start()
    return frontend


async def _ask(channel: grpc.aio.Channel, method: str, request: reflection_pb2.ServerReflectionRequest):
    call = channel.stream_stream(
        method,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )()
    await call.write(request)
    reply = await call.read()
    await call.done_writing()
    return reply


@pytest.mark.parametrize("method", [V1_METHOD, f"/{V1ALPHA_SERVICE_NAME}/ServerReflectionInfo"])
async def test_both_reflection_versions_list_and_describe_the_services(tmp_path, method):
    frontend = await _frontend(tmp_path, reflection=True)
    try:
        port = next(iter(frontend.ports.values()))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            listed = await _ask(channel, method, reflection_pb2.ServerReflectionRequest(list_services=""))
            names = {s.name for s in listed.list_services_response.service}
            assert {"xinserve.v1.InferenceService", "grpc.health.v1.Health", V1_SERVICE_NAME} <= names
            assert V1ALPHA_SERVICE_NAME in names
            symbol = reflection_pb2.ServerReflectionRequest(file_containing_symbol="xinserve.v1.InferenceService")
            described = await _ask(channel, method, symbol)
            files = [
                descriptor_pb2.FileDescriptorProto.FromString(raw)
                for raw in described.file_descriptor_response.file_descriptor_proto
            ]
            assert any(
                f.package == "xinserve.v1" and any(s.name == "InferenceService" for s in f.service) for f in files
            )
    finally:
        await frontend.stop(0)


async def test_reflection_off_refuses_v1_too(tmp_path):
    frontend = await _frontend(tmp_path, reflection=False)
    try:
        port = next(iter(frontend.ports.values()))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(V1_METHOD)()
            assert await call.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await frontend.stop(0)
