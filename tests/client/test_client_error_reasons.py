"""The Python client reads a server error's reason as the contract's ``ErrorReason``.

A real gRPC server answers ``ListModels`` with the server's own ``RpcError`` statuses
(``service.core.status``), one per reason of the catalogue; the client turns each into a
typed exception whose ``error_reason`` is the matching ``xinserve.v1.ErrorReason`` value.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from service.core.reasons import Reason
from service.core.status import RpcError
from xinserve.v1 import model_pb2_grpc
from xinserve_client import ErrorReason, XinserveClient, XinserveError


class _Refusing(model_pb2_grpc.ModelServiceServicer):
    status: grpc.Status | None = None

    def ListModels(self, request, context):
        assert self.status is not None
        context.abort_with_status(self.status)


@pytest.fixture(scope="module")
def refusing() -> Iterator[tuple[_Refusing, str]]:
    servicer = _Refusing()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    model_pb2_grpc.add_ModelServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _raised(refusing: tuple[_Refusing, str], status: grpc.Status) -> XinserveError:
    servicer, target = refusing
    servicer.status = status
    with XinserveClient(target) as client, pytest.raises(XinserveError) as info:
        client.list_models()
    return info.value


@pytest.mark.parametrize("reason", list(Reason))
def test_every_server_reason_reads_as_its_enum_value(refusing, reason: Reason) -> None:
    err = _raised(refusing, RpcError(grpc.StatusCode.FAILED_PRECONDITION, "refused", reason).to_status())
    assert err.reason == reason.value
    assert err.error_reason == ErrorReason.Value("ERROR_REASON_" + reason.value)
    assert ErrorReason.Name(err.error_reason).removeprefix("ERROR_REASON_") == err.reason


def test_metadata_named_by_the_message_reaches_the_client(refusing) -> None:
    err = _raised(
        refusing,
        RpcError(
            grpc.StatusCode.NOT_FOUND, "model 'm' not found", Reason.MODEL_NOT_FOUND, metadata={"model": "m"}
        ).to_status(),
    )
    assert (err.error_reason, err.domain, err.error_metadata) == (
        ErrorReason.ERROR_REASON_MODEL_NOT_FOUND,
        "xinserve.io",
        {"model": "m"},
    )


def _foreign(reason: str, domain: str) -> grpc.Status:
    status = status_pb2.Status(code=code_pb2.NOT_FOUND, message="no")
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain))
    return rpc_status.to_status(status)


@pytest.mark.parametrize(
    ("reason", "domain"),
    [
        ("MODEL_NOT_FOUND", "googleapis.com"),
        ("A_REASON_FROM_A_NEWER_SERVER", "xinserve.io"),
        ("UNSPECIFIED", "xinserve.io"),
    ],
)
def test_no_enum_value_for_another_domain_or_an_unknown_reason(refusing, reason: str, domain: str) -> None:
    err = _raised(refusing, _foreign(reason, domain))
    assert (err.reason, err.error_reason) == (reason, None)


def test_no_enum_value_without_error_info(refusing) -> None:
    err = _raised(refusing, rpc_status.to_status(status_pb2.Status(code=code_pb2.UNAVAILABLE, message="down")))
    assert (err.reason, err.error_reason) == (None, None)
