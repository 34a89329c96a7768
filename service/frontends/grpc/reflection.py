"""gRPC server reflection over both protocol versions, served by grpcio-reflection.

grpcio-reflection ships only ``grpc.reflection.v1alpha.ServerReflection``; clients built on the
released ``grpc.reflection.v1.ServerReflection`` (ghz, current grpcurl and Postman) ask for that
first. grpc-proto's ``grpc/reflection/v1/reflection.proto`` is v1alpha's with the package renamed:
the same messages, field numbers and semantics. So the library's servicer answers both: v1alpha
as the library registers it, v1 under its own service name with v1alpha's message codecs, which
are wire-identical.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
"""The released reflection service (grpc-proto ``grpc/reflection/v1/reflection.proto``)."""
V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
"""``grpc.reflection.v1alpha.ServerReflection``, as grpcio-reflection names it."""


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection v1 and v1alpha on ``server`` for ``service_names`` (full names; both
    reflection services are added to the list). Call before the server starts."""
    names = [*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME]
    servicer = reflection.aio.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.method_handlers_generic_handler(
        V1_SERVICE_NAME,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((v1,))
