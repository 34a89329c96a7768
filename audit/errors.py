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


class AuditStoreReplaced(AuditStoreError):
    """The audit database file this writer opened was deleted or replaced under it: records
    would go to an unlinked file. The failure policy applies; the writer never recovers onto
    the new file by itself (a restart decides, see ``AuditLog.open``)."""


class AuditEncodingError(AuditError, ValueError):
    """A record or checkpoint cannot be encoded or decoded canonically."""


class WriterConflict(AuditError):
    """Another process already writes this chain (one writer per chain id)."""


class AuditRangeError(AuditError, ValueError):
    """A requested record range is unusable: a bound below 1 or beyond the I-JSON integer range,
    ``start > end``, or a ``start`` beyond the chain's last record (when no signed checkpoint
    covers it; one that does makes it truncation, which verification reports instead)."""


class UnknownChainError(AuditError, LookupError):
    """The store holds no record or checkpoint of the named chain.

    ``chain`` is the name asked for, ``known`` the chains the store does hold (sorted).
    """

    def __init__(self, chain: str, known: list[str]) -> None:
        self.chain = chain
        self.known = list(known)
        if not known:
            where = "the store holds no chain"
        else:
            shown = ", ".join(known[:20]) + (f" (and {len(known) - 20} more)" if len(known) > 20 else "")
            where = f"the store holds: {shown}"
        super().__init__(f"unknown audit chain {chain!r}; {where}")
