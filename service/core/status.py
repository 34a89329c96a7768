"""gRPC status errors with ``google.rpc`` details (grpcio-status), and the mapping from
engine errors to status codes.

Every error a servicer reports goes through ``RpcError.abort``: a status code, a message
that is safe to show (never exception text or a stack), and details: ``ErrorInfo``
(reason + domain ``xinserve.io``), plus ``BadRequest`` field violations or ``RetryInfo``. The
reasons are the contract's ``xinserve.v1.ErrorReason`` values (``service.core.reasons.Reason``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engine_backends.errors import (
    EngineAbortedError,
    EngineDeadError,
    EngineError,
    EngineFailureError,
    EngineUnavailableError,
    InvalidRequestError,
    UnknownLoraError,
)
from service.core.reasons import Reason

DOMAIN = "xinserve.io"


@dataclass(frozen=True)
class FieldViolation:
    """One bad request field: its path in the request (``sampling_params.top_p``) and why."""

    field: str
    description: str


@dataclass
class RpcError(Exception):
    """A gRPC status to return to the client.

    Attributes:
        code: the gRPC status code.
        message: a message safe for the client.
        reason: ``ErrorInfo.reason``, a value of the contract's ``ErrorReason``.
        violations: ``BadRequest`` field violations (INVALID_ARGUMENT).
        retry_after_s: ``RetryInfo.retry_delay`` in seconds (RESOURCE_EXHAUSTED, UNAVAILABLE).
        metadata: ``ErrorInfo.metadata``: the values the message names, under the keys that
            ``proto/xinserve/v1/errors.proto`` lists for the reason.
    """

    code: grpc.StatusCode
    message: str
    reason: Reason
    violations: Sequence[FieldViolation] = ()
    retry_after_s: float | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def to_status(self) -> grpc.Status:
        details: list[any_pb2.Any] = []
        info = error_details_pb2.ErrorInfo(reason=str(self.reason), domain=DOMAIN, metadata=self.metadata)
        packed = any_pb2.Any()
        packed.Pack(info)
        details.append(packed)
        if self.violations:
            bad = error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                    for v in self.violations
                ]
            )
            packed = any_pb2.Any()
            packed.Pack(bad)
            details.append(packed)
        if self.retry_after_s is not None:
            delay = duration_pb2.Duration()
            delay.FromMilliseconds(int(self.retry_after_s * 1000))
            packed = any_pb2.Any()
            packed.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            details.append(packed)
        proto = status_pb2.Status(code=getattr(code_pb2, self.code.name), message=self.message, details=details)
        return rpc_status.to_status(proto)

    async def abort(self, context: grpc.aio.ServicerContext, trailing: Sequence[tuple[str, str]] = ()) -> None:
        """End the call with this status (raises, as ``context.abort_with_status`` does).

        Args:
            trailing: extra trailing metadata sent with the status details (e.g. ``x-request-id``).
        """
        status = self.to_status()
        await context.abort(status.code, status.details, (*status.trailing_metadata, *trailing))


def invalid_argument(violations: Sequence[FieldViolation], reason: Reason = Reason.INVALID_ARGUMENT) -> RpcError:
    """INVALID_ARGUMENT naming every violation in the message and in BadRequest, with the first
    violation's field path as ``ErrorInfo.metadata["field"]``."""
    summary = "; ".join(f"{v.field}: {v.description}" for v in violations[:5])
    if len(violations) > 5:
        summary += f"; and {len(violations) - 5} more"
    metadata = {"field": violations[0].field[:128]} if violations else {}
    return RpcError(
        grpc.StatusCode.INVALID_ARGUMENT, f"invalid request: {summary}", reason, violations, metadata=metadata
    )


def not_found(what: str, name: str, reason: Reason) -> RpcError:
    """NOT_FOUND ``"{what} {name!r} not found"``, with ``name`` as ``ErrorInfo.metadata[what]``."""
    return RpcError(grpc.StatusCode.NOT_FOUND, f"{what} {name!r} not found", reason, metadata={what: name[:128]})


def from_engine_error(exc: EngineError) -> RpcError:
    """Map an engine error to its status. Engine error messages are client-safe by contract."""
    if isinstance(exc, InvalidRequestError):
        return invalid_argument([FieldViolation(exc.field, exc.description)])
    if isinstance(exc, UnknownLoraError):
        return RpcError(grpc.StatusCode.NOT_FOUND, str(exc), Reason.LORA_NOT_FOUND)
    if isinstance(exc, EngineAbortedError):
        return RpcError(grpc.StatusCode.CANCELLED, "the request was aborted (Abort)", Reason.ABORTED)
    if isinstance(exc, EngineDeadError):
        return RpcError(grpc.StatusCode.UNAVAILABLE, str(exc), Reason.ENGINE_DIED)
    if isinstance(exc, EngineUnavailableError):
        return RpcError(grpc.StatusCode.UNAVAILABLE, str(exc), Reason.ENGINE_UNAVAILABLE, retry_after_s=1.0)
    if isinstance(exc, EngineFailureError):
        return RpcError(grpc.StatusCode.INTERNAL, "the engine failed this request", Reason.ENGINE_FAILURE)
    return RpcError(grpc.StatusCode.INTERNAL, "internal error", Reason.INTERNAL)
