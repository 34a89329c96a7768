"""Helpers shared by the audit tests (a uniquely named module: ``conftest`` is ambiguous when the
whole suite runs)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from pydantic import SecretStr

from audit.config import AuditSettings, StoreKind


class FakeClock:
    """Milliseconds since the epoch, advanced by hand."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, *, days: float = 0, seconds: float = 0) -> None:
        self.ms += int(days * 86_400_000 + seconds * 1000)


class Backend:
    """One test's store location plus raw SQL access (to tamper with it)."""

    def __init__(self, kind: str, tmp_path: Path, dsn: str | None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.dsn = dsn
        self.path = tmp_path / "audit.db"

    def settings(self, node_id: str = "node-a", **kw: Any) -> AuditSettings:
        kw.setdefault("archive_dir", self.tmp_path / "archive")
        if self.kind == "postgresql":
            assert self.dsn is not None
            return AuditSettings(store=StoreKind.POSTGRESQL, dsn=SecretStr(self.dsn), node_id=node_id, **kw)
        return AuditSettings(store=StoreKind.SQLITE, path=kw.pop("path", self.path), node_id=node_id, **kw)

    @property
    def url(self) -> str:
        return self.dsn if self.kind == "postgresql" and self.dsn else str(self.path)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement with ``?`` placeholders, committed; returns rows if any."""
        if self.kind == "postgresql":
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                cur = conn.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
                return [tuple(r) for r in cur.fetchall()] if cur.description else []
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            cur = db.execute(statement, params)
            return [tuple(r) for r in cur.fetchall()]
        finally:
            db.close()


def rpc_record_factory(clock: Callable[[], int] | None = None) -> Callable[..., Any]:
    from audit.records import AuditRecord, EventType

    def make(i: int = 0, **kw: Any) -> AuditRecord:
        base: dict[str, Any] = {
            "event": EventType.RPC,
            "principal": f"user-{i % 3}",
            "auth_method": "mtls",
            "peer": "ipv4:10.0.0.7:51234",
            "method": "/xinserve.v1.InferenceService/Generate",
            "model": "tiny-llama",
            "outcome": "OK",
            "request_id": f"req-{i}",
            "prompt_tokens": 12,
            "output_tokens": 34,
            "latency_us": 1500 + i,
        }
        if clock is not None:
            base["time_ms"] = clock()
        base.update(kw)
        return AuditRecord(**base)

    return make
