"""The sampling parameters, derived once from the contract (``xinserve.v1.SamplingParams``'s
descriptor) instead of being retyped in every layer.

A new sampling parameter is one edit to ``proto/xinserve/v1/sampling.proto`` plus its
validation rule in ``service.operations.validation``; the OpenAI front end accepts it as a vLLM-style
extra request field by the same name, and the Python client accepts it as a keyword.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from xinserve.v1 import sampling_pb2

_DESCRIPTOR = sampling_pb2.SamplingParams.DESCRIPTOR

OPTIONAL_SCALARS: tuple[str, ...] = tuple(
    f.name
    for f in _DESCRIPTOR.fields
    if f.has_presence
    and f.type != FieldDescriptor.TYPE_MESSAGE
    and (f.containing_oneof is None or f.containing_oneof.name != "structured_output")
)
"""Scalar fields with presence (``optional``): absent means the model's default."""
REPEATED_SCALARS: tuple[str, ...] = tuple(
    f.name for f in _DESCRIPTOR.fields if f.is_repeated and f.type != FieldDescriptor.TYPE_MESSAGE
)
"""Repeated scalar fields (``stop``, ``stop_token_ids``)."""
STRUCTURED_OUTPUT: tuple[str, ...] = tuple(f.name for f in _DESCRIPTOR.oneofs_by_name["structured_output"].fields)
"""The members of the ``structured_output`` oneof."""
ALL_FIELDS: tuple[str, ...] = tuple(f.name for f in _DESCRIPTOR.fields)
