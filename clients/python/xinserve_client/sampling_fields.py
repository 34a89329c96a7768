"""The sampling parameters by kind, derived once from the contract (``xinserve.v1.SamplingParams``'s
descriptor) instead of being retyped in every layer.

The client's keyword arguments (:func:`xinserve_client.build_sampling_params`) and the server
(its validation and its OpenAI front end) both read these tuples, so a new sampling parameter is
one edit to ``proto/xinserve/v1/sampling.proto`` plus its validation rule on the server. Names
are vLLM's ``SamplingParams`` names; each tuple is in the descriptor's field order.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from xinserve.v1 import sampling_pb2

__all__ = ["ALL_FIELDS", "OPTIONAL_SCALARS", "REPEATED_SCALARS", "STRUCTURED_OUTPUT"]

_DESCRIPTOR = sampling_pb2.SamplingParams.DESCRIPTOR

STRUCTURED_OUTPUT: tuple[str, ...] = tuple(f.name for f in _DESCRIPTOR.oneofs_by_name["structured_output"].fields)
"""The members of the ``structured_output`` oneof (at most one may be set)."""
OPTIONAL_SCALARS: tuple[str, ...] = tuple(
    f.name
    for f in _DESCRIPTOR.fields
    if f.has_presence and f.type != FieldDescriptor.TYPE_MESSAGE and f.name not in STRUCTURED_OUTPUT
)
"""Scalar fields with presence (``optional``): absent means the model's default."""
REPEATED_SCALARS: tuple[str, ...] = tuple(
    f.name for f in _DESCRIPTOR.fields if f.is_repeated and f.type != FieldDescriptor.TYPE_MESSAGE
)
"""Repeated scalar fields (``stop``, ``stop_token_ids``)."""
ALL_FIELDS: tuple[str, ...] = tuple(f.name for f in _DESCRIPTOR.fields)
"""Every field of ``SamplingParams``."""
