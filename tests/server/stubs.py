"""grpc.aio stubs for the server tests (async: the server runs on the same event loop)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from xinserve.v1 import inference_pb2_grpc, model_pb2_grpc, server_pb2_grpc


@dataclass
class Stubs:
    channel: grpc.aio.Channel
    inference: inference_pb2_grpc.InferenceServiceStub
    models: model_pb2_grpc.ModelServiceStub
    server: server_pb2_grpc.ServerServiceStub

    async def close(self) -> None:
        await self.channel.close()


def stubs(channel: grpc.aio.Channel) -> Stubs:
    return Stubs(
        channel,
        inference_pb2_grpc.InferenceServiceStub(channel),
        model_pb2_grpc.ModelServiceStub(channel),
        server_pb2_grpc.ServerServiceStub(channel),
    )


def field_violations(err: grpc.aio.AioRpcError) -> dict[str, str]:
    """BadRequest field -> description from an error's google.rpc.Status details."""
    status = rpc_status.from_call(err)
    assert status is not None, "no rich status details"
    out: dict[str, str] = {}
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            out.update({v.field: v.description for v in bad.field_violations})
    return out


def detail_of(err: grpc.aio.AioRpcError, message_type):
    status = rpc_status.from_call(err)
    assert status is not None
    for detail in status.details:
        if detail.Is(message_type.DESCRIPTOR):
            out = message_type()
            detail.Unpack(out)
            return out
    return None
