"""The evidence record and the one protocol every evidence provider follows.

A provider takes up to 64 bytes of report data (``REPORT_DATA`` of TDX and SEV-SNP, the user data
of Hygon CSV, the challenge of Arm CCA; shorter input is zero-padded to 64 bytes by the hardware
interface) and returns the TEE's signed evidence over it. Nothing here verifies evidence: that is the
key broker's or the client's verifier's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from trust.tee.errors import EvidenceError, TeeReason

REPORT_DATA_SIZE = 64

# TEE names follow Trustee's kbs-types ``Tee`` (also the KBS protocol ``tee`` field).
TEE_NONE = "none"
TEE_TDX = "tdx"
TEE_SNP = "snp"
TEE_CCA = "cca"
TEE_CSV = "csv"
TEE_SAMPLE = "sample"


@dataclass(frozen=True)
class Evidence:
    """One piece of evidence as the provider produced it.

    Attributes:
        tee: KBS ``tee`` name: ``tdx``, ``snp``, ``cca``, ``csv`` or ``sample`` (recorded/test).
        raw: the evidence bytes (TDX quote, SNP report, CCA token, CSV evidence JSON, ...).
        report_data: the 64 bytes the evidence binds (input zero-padded).
        aux: auxiliary data (SNP certificate table, configfs ``auxblob``); empty if none.
        manifest: configfs ``manifestblob`` where the provider has one; empty otherwise.
        generation: the provider's own counter or nonce (configfs ``generation``, CSV ``mnonce`` as
            an integer); -1 if the provider has none.
        provider: the provider's own name (``tdx_guest``, ``sev_guest``, ``csv-guest``, ...).
        recorded: True when the evidence was replayed from a file, not produced by hardware.
    """

    tee: str
    raw: bytes
    report_data: bytes
    aux: bytes = b""
    manifest: bytes = b""
    generation: int = -1
    provider: str = ""
    recorded: bool = False


@runtime_checkable
class EvidenceProvider(Protocol):
    """Collects evidence binding ``report_data``.

    ``tee`` is the KBS ``tee`` name the provider produces (``none`` for no TEE).
    ``collect`` is blocking (file or ioctl I/O): call it from a worker thread in async code.
    Every failure, bad report data included, is an :class:`EvidenceError` with a
    :class:`TeeReason`.
    """

    @property
    def tee(self) -> str: ...

    @property
    def recorded(self) -> bool: ...

    def collect(self, report_data: bytes) -> Evidence: ...


def padded_report_data(report_data: bytes) -> bytes:
    """``report_data`` zero-padded to 64 bytes; EvidenceError(report_data_size) if longer or empty."""
    if not isinstance(report_data, bytes | bytearray) or not 1 <= len(report_data) <= REPORT_DATA_SIZE:
        size = len(report_data) if isinstance(report_data, bytes | bytearray) else -1
        raise EvidenceError(
            TeeReason.REPORT_DATA_SIZE, f"report data must be 1 to {REPORT_DATA_SIZE} bytes, got {size}"
        )
    return bytes(report_data).ljust(REPORT_DATA_SIZE, b"\0")
