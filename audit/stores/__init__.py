"""Audit stores: embedded SQLite (default) and PostgreSQL."""

from __future__ import annotations

from audit.config import AuditSettings, StoreKind
from audit.stores.base import QueryFilter, Store, StoredRecord

__all__ = ["QueryFilter", "Store", "StoredRecord", "open_store"]


def open_store(settings: AuditSettings, *, readonly: bool = False) -> Store:
    """A new connection to the configured store (raises ``AuditStoreError`` if unreachable)."""
    if settings.store is StoreKind.POSTGRESQL:
        from audit.stores.postgres import PostgresStore

        assert settings.dsn is not None
        return PostgresStore(settings.dsn.get_secret_value(), lock_wait_s=settings.writer_lock_wait_s)
    from audit.stores.sqlite import SqliteStore

    return SqliteStore(settings.path, readonly=readonly)
