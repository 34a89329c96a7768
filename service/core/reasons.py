"""The server's ``ErrorInfo`` reasons, one constant per value of the contract's
``xinserve.v1.ErrorReason`` (``proto/xinserve/v1/errors.proto``, AIP-193).

The reason on the wire is the enum value's name without its ``ERROR_REASON_`` prefix
(``ERROR_REASON_MODEL_NOT_FOUND`` → ``"MODEL_NOT_FOUND"``); ``wire_name`` is that mapping,
and each ``Reason`` member is built from its enum value through it, so a reason missing from
the contract fails at import. ``Reason`` is a ``StrEnum``: a member is the wire string itself
(``RpcError.reason``, metric labels, the OpenAI ``code`` in lower case). Every ``RpcError``
of ``service/`` names one of these members; the proto's comment of each value says when it is
sent and which ``ErrorInfo.metadata`` keys it carries.
"""

from __future__ import annotations

from trust.compat import StrEnum
from xinserve.v1 import errors_pb2

PREFIX = "ERROR_REASON_"
"""The prefix of every ``ErrorReason`` value name (buf's ENUM_VALUE_PREFIX rule)."""


def wire_name(value: int) -> str:
    """The ``ErrorInfo.reason`` string of an ``ErrorReason`` value (its number).

    Raises:
        ValueError: ``value`` is ``ERROR_REASON_UNSPECIFIED`` or not a value of the enum.
    """
    if value == errors_pb2.ERROR_REASON_UNSPECIFIED:
        raise ValueError("ERROR_REASON_UNSPECIFIED is never sent")
    return errors_pb2.ErrorReason.Name(value).removeprefix(PREFIX)


_wire = wire_name


class Reason(StrEnum):
    """An ``ErrorInfo.reason`` the server sends (the ``xinserve.v1.ErrorReason`` value's name
    without ``ERROR_REASON_``)."""

    INVALID_ARGUMENT = _wire(errors_pb2.ERROR_REASON_INVALID_ARGUMENT)
    UNSUPPORTED_MEDIA_TYPE = _wire(errors_pb2.ERROR_REASON_UNSUPPORTED_MEDIA_TYPE)
    METHOD_NOT_ALLOWED = _wire(errors_pb2.ERROR_REASON_METHOD_NOT_ALLOWED)
    UNIMPLEMENTED = _wire(errors_pb2.ERROR_REASON_UNIMPLEMENTED)
    REQUEST_TOO_LARGE = _wire(errors_pb2.ERROR_REASON_REQUEST_TOO_LARGE)
    REQUEST_TIMEOUT = _wire(errors_pb2.ERROR_REASON_REQUEST_TIMEOUT)
    REQUEST_BODY_TOO_SLOW = _wire(errors_pb2.ERROR_REASON_REQUEST_BODY_TOO_SLOW)
    BODY_RECEPTION_FULL = _wire(errors_pb2.ERROR_REASON_BODY_RECEPTION_FULL)
    BODY_RECEPTION_PEER_SHARE = _wire(errors_pb2.ERROR_REASON_BODY_RECEPTION_PEER_SHARE)
    BODY_RECEPTION_PRINCIPAL_SHARE = _wire(errors_pb2.ERROR_REASON_BODY_RECEPTION_PRINCIPAL_SHARE)
    CLIENT_DISCONNECTED = _wire(errors_pb2.ERROR_REASON_CLIENT_DISCONNECTED)
    INVALID_HTTP_REQUEST = _wire(errors_pb2.ERROR_REASON_INVALID_HTTP_REQUEST)
    REQUEST_HEADER_FIELDS_TOO_LARGE = _wire(errors_pb2.ERROR_REASON_REQUEST_HEADER_FIELDS_TOO_LARGE)
    TOO_MANY_CONNECTIONS = _wire(errors_pb2.ERROR_REASON_TOO_MANY_CONNECTIONS)
    UNAUTHENTICATED = _wire(errors_pb2.ERROR_REASON_UNAUTHENTICATED)
    PERMISSION_DENIED = _wire(errors_pb2.ERROR_REASON_PERMISSION_DENIED)
    LOGIN_THROTTLED = _wire(errors_pb2.ERROR_REASON_LOGIN_THROTTLED)
    DRAINING = _wire(errors_pb2.ERROR_REASON_DRAINING)
    ADMISSION_QUEUE_FULL = _wire(errors_pb2.ERROR_REASON_ADMISSION_QUEUE_FULL)
    AUDIT_UNAVAILABLE = _wire(errors_pb2.ERROR_REASON_AUDIT_UNAVAILABLE)
    DUPLICATE_REQUEST_ID = _wire(errors_pb2.ERROR_REASON_DUPLICATE_REQUEST_ID)
    MODEL_NOT_FOUND = _wire(errors_pb2.ERROR_REASON_MODEL_NOT_FOUND)
    MODEL_LOADING = _wire(errors_pb2.ERROR_REASON_MODEL_LOADING)
    MODEL_NOT_SERVABLE = _wire(errors_pb2.ERROR_REASON_MODEL_NOT_SERVABLE)
    WRONG_MODEL_KIND = _wire(errors_pb2.ERROR_REASON_WRONG_MODEL_KIND)
    LORA_NOT_FOUND = _wire(errors_pb2.ERROR_REASON_LORA_NOT_FOUND)
    LORA_NOT_SERVABLE = _wire(errors_pb2.ERROR_REASON_LORA_NOT_SERVABLE)
    ABORTED = _wire(errors_pb2.ERROR_REASON_ABORTED)
    ENGINE_DIED = _wire(errors_pb2.ERROR_REASON_ENGINE_DIED)
    ENGINE_UNAVAILABLE = _wire(errors_pb2.ERROR_REASON_ENGINE_UNAVAILABLE)
    ENGINE_FAILURE = _wire(errors_pb2.ERROR_REASON_ENGINE_FAILURE)
    ENGINE_NO_OUTPUT = _wire(errors_pb2.ERROR_REASON_ENGINE_NO_OUTPUT)
    INTERNAL = _wire(errors_pb2.ERROR_REASON_INTERNAL)
    AUDIT_DISABLED = _wire(errors_pb2.ERROR_REASON_AUDIT_DISABLED)
    NO_CHECKPOINT = _wire(errors_pb2.ERROR_REASON_NO_CHECKPOINT)
    AUDIT_NO_VERIFY_KEY = _wire(errors_pb2.ERROR_REASON_AUDIT_NO_VERIFY_KEY)
    AUDIT_CHAIN_NOT_FOUND = _wire(errors_pb2.ERROR_REASON_AUDIT_CHAIN_NOT_FOUND)
    NO_TEE = _wire(errors_pb2.ERROR_REASON_NO_TEE)
    ATTESTATION_NEEDS_TLS = _wire(errors_pb2.ERROR_REASON_ATTESTATION_NEEDS_TLS)
    ATTESTATION_FAILED = _wire(errors_pb2.ERROR_REASON_ATTESTATION_FAILED)
