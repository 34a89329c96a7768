"""Tamper-evident audit log: records, SM3 hash chain, SM2-signed checkpoints, stores, retention.

The server uses::

    from audit import AuditLog, AuditRecord, AuditSettings, AuditUnavailable, EventType

    log = await AuditLog.open(settings.audit, signer=server_sm2_key)
    seq = await log.append(AuditRecord(event=EventType.RPC, method=..., outcome="OK", ...))
    await log.close()

See docs/audit.md.
"""

from audit.chain import CheckpointKind, SignedCheckpoint
from audit.config import AuditSettings, FailurePolicy, StoreKind
from audit.content import ContentCapture
from audit.errors import (
    AuditConfigError,
    AuditEncodingError,
    AuditError,
    AuditRangeError,
    AuditStoreError,
    AuditUnavailable,
    UnknownChainError,
    WriterConflict,
)
from audit.log import AuditIntegrityError, AuditLog, RecoveryInfo
from audit.records import AuditRecord, EventType, decode_record, encode_record
from audit.retention import RetentionResult, check_disk, run_retention
from audit.stores.base import QueryFilter
from audit.verify import VerifyReport, verify_store

__all__ = [
    "AuditConfigError",
    "AuditEncodingError",
    "AuditError",
    "AuditIntegrityError",
    "AuditLog",
    "AuditRangeError",
    "AuditRecord",
    "AuditSettings",
    "AuditStoreError",
    "AuditUnavailable",
    "CheckpointKind",
    "ContentCapture",
    "EventType",
    "FailurePolicy",
    "QueryFilter",
    "RecoveryInfo",
    "RetentionResult",
    "SignedCheckpoint",
    "StoreKind",
    "UnknownChainError",
    "VerifyReport",
    "WriterConflict",
    "check_disk",
    "decode_record",
    "encode_record",
    "run_retention",
    "verify_store",
]
