"""Fixtures for the audit tests: both stores (SQLite, and a throwaway PostgreSQL cluster that
pytest-postgresql starts from Debian's server package), SM2 keys, an injectable clock."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from audit_helpers import Backend, FakeClock
from pytest_postgresql import factories

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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


_db_counter = itertools.count()


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
