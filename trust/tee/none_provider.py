"""Provider ``none`` (the default): no TEE. Anything that needs evidence fails closed."""

from __future__ import annotations

from trust.tee.errors import EvidenceError, TeeReason
from trust.tee.evidence import TEE_NONE, Evidence


class NoTeeProvider:
    """Collects nothing: :meth:`collect` always raises EvidenceError(no_tee)."""

    tee = TEE_NONE
    recorded = False

    def collect(self, report_data: bytes) -> Evidence:
        raise EvidenceError(
            TeeReason.NO_TEE, "no TEE evidence provider is configured (tee.provider is none); nothing can be attested"
        )
