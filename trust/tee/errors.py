"""Exceptions of the TEE layer. Messages never carry key material, evidence bytes or paths of keys."""

from __future__ import annotations

from trust.compat import StrEnum
from trust.errors import TrustError


class TeeReason(StrEnum):
    """Machine-readable reasons, shown in GetModel, audit records and CLI output."""

    NO_TEE = "no_tee"  # provider ``none``: nothing can be attested
    PROVIDER_MISSING = "provider_missing"  # the device / configfs directory is absent
    PROVIDER_MISMATCH = "provider_mismatch"  # configfs-tsm answered for another provider than expected
    REPORT_DATA_SIZE = "report_data_size"  # report data is not 1..64 bytes
    CONCURRENT_WRITER = "concurrent_writer"  # configfs-tsm generation moved while we used the report
    PROVIDER_ERROR = "provider_error"  # the kernel/firmware refused or returned garbage
    RECORDED_NOT_ALLOWED = "recorded_not_allowed"  # recorded evidence without tee.allow_recorded
    MALFORMED_EVIDENCE = "malformed_evidence"  # a parser rejected the evidence
    KBS_UNREACHABLE = "kbs_unreachable"  # connection refused, timeout, TLS failure
    KBS_PROTOCOL = "kbs_protocol"  # the KBS answered something the protocol does not allow
    KBS_REFUSED = "kbs_refused"  # the KBS refused attestation (401)
    POLICY_DENIED = "policy_denied"  # the KBS resource policy refused the resource (403)
    RESOURCE_NOT_FOUND = "resource_not_found"  # no such resource (404)
    MALFORMED_JWE = "malformed_jwe"  # the resource response is not a JWE we can decrypt
    BAD_KEY = "bad_key"  # the released key is not a 16-byte SM4 key
    ENCRYPTED_MODEL = "encrypted_model"  # encrypted model manifest invalid or decryption failed
    NOT_PRIVATE = "not_private"  # the decryption directory is not on tmpfs/ramfs


class TeeError(TrustError):
    """A TEE step failed. ``reason`` is a :class:`TeeReason`; ``detail`` is for humans."""

    def __init__(self, reason: TeeReason | str, detail: str) -> None:
        self.reason = TeeReason(reason)
        self.detail = detail
        super().__init__(f"{self.reason.value}: {detail}")


class EvidenceError(TeeError):
    """Evidence could not be collected (provider missing, refused, concurrent writer, ...)."""


class EvidenceParseError(TeeError):
    """Evidence bytes are not what their format says: truncated, wrong version, wrong type.

    ``offset`` is where parsing stopped (bytes from the start; -1 when not applicable)."""

    def __init__(self, detail: str, offset: int = -1) -> None:
        super().__init__(TeeReason.MALFORMED_EVIDENCE, detail)
        self.offset = offset


class KeyReleaseError(TeeError):
    """The key broker did not release the key (refused, unreachable, malformed answer)."""
