"""Fixtures for the audit tests: both stores (SQLite, and a throwaway PostgreSQL cluster that
pytest-postgresql starts from Debian's server package), SM2 keys, an injectable clock."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr
from pytest_postgresql import factories

from audit.config import AuditSettings, StoreKind
from trust.sm2 import Sm2PrivateKey

_PG_CTLS = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
PG_CTL = _PG_CTLS[-1] if _PG_CTLS else None
if PG_CTL is not None:
    os.environ["PG_CTL_REAL"] = PG_CTL
    postgresql_proc = factories.postgresql_proc(
        executable=str(Path(__file__).with_name("pg_ctl_as_postgres.sh")), port=None
    )
else:

    @pytest.fixture(scope="session")
    def postgresql_proc() -> Any:
        pytest.skip("PostgreSQL server binaries not installed (run scripts/bootstrap)")


@pytest.fixture(scope="session")
def tmp_path_factory(request: pytest.FixtureRequest) -> Iterator[pytest.TempPathFactory]:
    """A private temp root for this directory's tests.

    pytest deletes all but the newest three ``/tmp/pytest-of-<user>/pytest-N`` directories at
    the start of every run; on a machine where several pytest runs overlap (CI runners with
    parallel jobs, a shared dev box) that removes the throwaway PostgreSQL cluster's data
    directory under a running server. A private root is never touched by other runs.
    """
    base = Path(tempfile.mkdtemp(prefix="xinserve-audit-tests-"))
    factory = pytest.TempPathFactory(
        given_basetemp=base,
        retention_count=0,
        retention_policy="none",
        trace=request.config.trace.get("tmpdir"),
        _ispytest=True,
    )
    yield factory
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def key() -> Sm2PrivateKey:
    return Sm2PrivateKey.generate()


@pytest.fixture(scope="session")
def other_key() -> Sm2PrivateKey:
    return Sm2PrivateKey.generate()


class FakeClock:
    """Milliseconds since the epoch, advanced by hand."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, *, days: float = 0, seconds: float = 0) -> None:
        self.ms += int(days * 86_400_000 + seconds * 1000)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


_db_counter = itertools.count()


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


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", tmp_path, None)
        return
    proc = request.getfixturevalue("postgresql_proc")
    name = f"audit_{os.getpid()}_{next(_db_counter)}"
    admin = f"postgresql://{proc.user}@{proc.host}:{proc.port}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    yield Backend("postgresql", tmp_path, f"postgresql://{proc.user}@{proc.host}:{proc.port}/{name}")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Backend:
    return Backend("sqlite", tmp_path, None)


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
