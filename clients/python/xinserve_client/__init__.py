"""Python client for xinserve, the gRPC inference service over vLLM.

Two clients with the same methods: :class:`XinserveClient` (blocking, over ``grpc``) and
:class:`AsyncXinserveClient` (asyncio, over ``grpc.aio``). Results are the ``xinserve.v1``
protobuf messages (generated stubs in the ``xinserve.v1`` package of this distribution);
failures raise the typed exceptions of :mod:`xinserve_client.errors`, whose ``error_reason``
is a value of :data:`ErrorReason` (the contract's ``xinserve.v1.ErrorReason``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._async import AsyncResponseStream, AsyncXinserveClient
from ._base import DEFAULT_TARGET
from ._common import CLIENT_VERSION, DEFAULT, SAMPLING_PARAM_NAMES, SCHEMA_REVISION, build_sampling_params
from ._sync import ResponseStream, XinserveClient
from .errors import (
    CancelledError,
    DeadlineExceededError,
    ErrorReason,
    FailedPreconditionError,
    IncompatibleServerError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    XinserveError,
)

__version__ = CLIENT_VERSION

__all__ = [
    "DEFAULT",
    "DEFAULT_TARGET",
    "SAMPLING_PARAM_NAMES",
    "SCHEMA_REVISION",
    "AsyncResponseStream",
    "AsyncXinserveClient",
    "CancelledError",
    "DeadlineExceededError",
    "ErrorReason",
    "FailedPreconditionError",
    "IncompatibleServerError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "ResponseStream",
    "UnauthenticatedError",
    "UnavailableError",
    "XinserveClient",
    "XinserveError",
    "__version__",
    "build_sampling_params",
    "cosine_similarity",
]


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors of equal length, in [-1, 1] (0.0 if either is zero).

    Raises:
        ValueError: the lengths differ.
    """
    if len(a) != len(b):
        raise ValueError(f"vectors differ in length: {len(a)} != {len(b)}")
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    return dot / norm if norm else 0.0
