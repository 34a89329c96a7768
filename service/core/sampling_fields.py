"""The sampling parameters by kind, as the Python client derives them from the contract
(:mod:`xinserve_client.sampling_fields`): the server reads the same tuples."""

from __future__ import annotations

from xinserve_client.sampling_fields import ALL_FIELDS, OPTIONAL_SCALARS, REPEATED_SCALARS, STRUCTURED_OUTPUT

__all__ = ["ALL_FIELDS", "OPTIONAL_SCALARS", "REPEATED_SCALARS", "STRUCTURED_OUTPUT"]
