"""Exceptions raised by the audit package."""

from __future__ import annotations


class AuditError(Exception):
    """Base class of every audit error."""


class AuditConfigError(AuditError, ValueError):
    """The audit configuration is invalid (e.g. ``retention_days`` below 180)."""


class AuditUnavailable(AuditError):
    """The audit log cannot record right now (disk full, database down).

    Under the ``fail_closed`` policy the server must refuse the call with ``UNAVAILABLE``.
    The message is safe to show to a client: it carries no path, DSN or secret.
    """


class AuditStoreError(AuditError):
    """The store failed (I/O error, lost connection). Internal; mapped to ``AuditUnavailable``."""


class AuditEncodingError(AuditError, ValueError):
    """A record or checkpoint cannot be encoded or decoded canonically."""


class WriterConflict(AuditError):
    """Another process already writes this chain (one writer per chain id)."""
