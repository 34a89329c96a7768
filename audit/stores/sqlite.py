"""Embedded store: one SQLite database in WAL mode with ``synchronous=FULL``.

Every commit fsyncs the write-ahead log, so a committed batch survives a crash or power
loss; a commit torn by a crash is discarded by SQLite's WAL recovery (frame checksums), so
the table never holds half a record. One writer per chain is enforced with an exclusive
``flock`` on ``<db>.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from audit.chain import SignedCheckpoint
from audit.errors import AuditStoreError, AuditStoreReplaced, WriterConflict
from audit.stores.base import QueryFilter, Store, StoredRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_records (
    chain TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time_ms INTEGER NOT NULL,
    event TEXT NOT NULL,
    principal TEXT,
    method TEXT,
    outcome TEXT NOT NULL,
    body BLOB NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (chain, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS audit_records_time ON audit_records (time_ms);
CREATE INDEX IF NOT EXISTS audit_records_principal ON audit_records (principal, time_ms);
CREATE INDEX IF NOT EXISTS audit_records_method ON audit_records (method, time_ms);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    chain TEXT NOT NULL,
    n INTEGER NOT NULL,
    kind TEXT NOT NULL,
    time_ms INTEGER NOT NULL,
    tree_size INTEGER NOT NULL,
    payload BLOB NOT NULL,
    signature BLOB NOT NULL,
    PRIMARY KEY (chain, n)
) WITHOUT ROWID;
"""

_COLS = "chain, seq, time_ms, event, principal, method, outcome, body, hash"

# The byte columns are read through CAST(... AS BLOB). Their BLOB affinity makes SQLite keep
# whatever storage class an UPDATE writes: SQLite's own replace() or CAST(body AS TEXT) turn a
# body into TEXT (possibly not even valid UTF-8), SET hash = 5 into an INTEGER. The cast hands
# every reader bytes whatever the storage class (TEXT as its bytes, numbers as their text), so
# verification, not a TypeError or a UTF-8 decoding error, decides about such a row.
_BODY = "CAST(body AS BLOB)"
_HASH = "CAST(hash AS BLOB)"
_PAYLOAD_SIGNATURE = "CAST(payload AS BLOB), CAST(signature AS BLOB)"
# The other columns are cast too (a number rewritten as text, text rewritten as a number or as
# bytes), and text is decoded with U+FFFD for bytes that are not UTF-8 (text_factory below).
_SELECT_COLS = (
    "CAST(chain AS TEXT), CAST(seq AS INTEGER), CAST(time_ms AS INTEGER), CAST(event AS TEXT), "
    f"CAST(principal AS TEXT), CAST(method AS TEXT), CAST(outcome AS TEXT), {_BODY}, {_HASH}"
)


def writer_lock_path(path: Path) -> Path:
    """The writer lock file of the database at ``path`` (``<db>.lock``, ``flock``-ed by the
    process that appends to it)."""
    return path.with_name(path.name + ".lock")


def _private_file(path: Path) -> None:
    """Create ``path`` 0600 (in a directory made 0700) before SQLite opens it; tighten an existing
    database (and its ``-wal``/``-shm`` files) that its group or others can access. SQLite gives
    the WAL and shared-memory files the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            if p.stat().st_mode & 0o077:
                os.chmod(p, 0o600)


def _file_id(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _wrap(exc: BaseException) -> AuditStoreError:
    # sqlite3 messages carry no secrets; keep them short and path-free.
    return AuditStoreError(f"sqlite: {type(exc).__name__}: {exc}")


_TEXT, _INT, _BLOB = "TEXT", "INTEGER", "BLOB"


class SqliteStore(Store):
    kind = "sqlite"
    expected_columns: ClassVar[dict[str, dict[str, str]]] = {
        "audit_records": {
            "chain": _TEXT,
            "seq": _INT,
            "time_ms": _INT,
            "event": _TEXT,
            "principal": _TEXT,
            "method": _TEXT,
            "outcome": _TEXT,
            "body": _BLOB,
            "hash": _BLOB,
        },
        "audit_checkpoints": {
            "chain": _TEXT,
            "n": _INT,
            "kind": _TEXT,
            "time_ms": _INT,
            "tree_size": _INT,
            "payload": _BLOB,
            "signature": _BLOB,
        },
    }

    def table_columns(self, table: str) -> dict[str, str] | None:
        rows = self._exec("SELECT name, type FROM pragma_table_info(?)", (table,)).fetchall()
        return {str(r[0]): str(r[1]).upper() for r in rows} if rows else None

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None
        self._identity: dict[Path, tuple[int, int]] = {}
        try:
            if readonly:
                if not self.path.exists():
                    raise AuditStoreError("sqlite: the audit database does not exist")
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                self._db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            else:
                _private_file(self.path)
                self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                # Fold the WAL back into the database every ~16 MiB rather than every 4 MiB.
                self._db.execute("PRAGMA wal_autocheckpoint=4000")
                self._identity[self.path] = _file_id(self.path)
            self._db.execute("PRAGMA busy_timeout=10000")
            self._db.text_factory = _decode_text
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc

    def create_schema(self) -> None:
        try:
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc

    def check_identity(self) -> None:
        """The database file and its ``-wal`` file are still the ones this connection opened
        (same device and inode at the same path). The ``-wal`` file is remembered once it exists.

        Raises:
            AuditStoreReplaced: one of them was deleted or replaced (path-free message).
        """
        wal = self.path.with_name(self.path.name + "-wal")
        if wal not in self._identity and self._identity:
            with contextlib.suppress(FileNotFoundError):
                self._identity[wal] = _file_id(wal)
        for path, identity in self._identity.items():
            what = "write-ahead log" if path == wal else "database file"
            try:
                now = _file_id(path)
            except FileNotFoundError:
                raise AuditStoreReplaced(f"sqlite: the audit {what} was deleted under the running server") from None
            except OSError as exc:
                raise AuditStoreReplaced(f"sqlite: the audit {what} cannot be checked ({exc.strerror})") from None
            if now != identity:
                raise AuditStoreReplaced(f"sqlite: the audit {what} was replaced under the running server")

    def lock_writer(self, chain: str) -> None:
        fd = os.open(writer_lock_path(self.path), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise WriterConflict("another process is writing this audit database") from None
        self._lock_fd = fd

    def head(self, chain: str) -> tuple[int, bytes] | None:
        row = self._exec(
            f"SELECT CAST(seq AS INTEGER), {_HASH} FROM audit_records WHERE chain = ? ORDER BY seq DESC LIMIT 1",  # noqa: S608
            (chain,),
        ).fetchone()
        return (int(row[0]), bytes(row[1])) if row else None

    def last_checkpoint(self, chain: str) -> SignedCheckpoint | None:
        row = self._exec(
            f"SELECT {_PAYLOAD_SIGNATURE} FROM audit_checkpoints WHERE chain = ? ORDER BY n DESC LIMIT 1",  # noqa: S608
            (chain,),
        ).fetchone()
        return _signed(row) if row else None

    def write(self, records: Sequence[StoredRecord], checkpoints: Sequence[SignedCheckpoint]) -> None:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                if records:
                    db.executemany(
                        f"INSERT INTO audit_records ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
                        records,
                    )
                for cp in checkpoints:
                    _insert_checkpoint(db, cp)
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc

    def purge(self, chain: str, through_seq: int, checkpoint: SignedCheckpoint) -> int:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                _insert_checkpoint(db, checkpoint)
                n = db.execute("DELETE FROM audit_records WHERE chain = ? AND seq <= ?", (chain, through_seq)).rowcount
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc
        return int(n)

    def iter_hashes(self, chain: str, start: int, end: int | None) -> Iterator[tuple[int, bytes, bytes]]:
        cur = self._exec(
            f"SELECT CAST(seq AS INTEGER), {_BODY}, {_HASH} FROM audit_records"  # noqa: S608
            " WHERE chain = ? AND seq >= ? AND seq <= ? ORDER BY seq",
            (chain, start, end if end is not None else 2**62),
        )
        try:
            while True:
                rows = cur.fetchmany(8192)
                if not rows:
                    return
                yield from rows
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc

    def column_mismatches(self, chain: str, start: int, end: int | None) -> int | None:
        try:
            row = self._db.execute(
                """
            SELECT min(seq) FROM audit_records
            WHERE chain = ? AND seq >= ? AND seq <= ? AND (
                json_extract(CAST(body AS TEXT), '$.chain') IS NOT chain OR
                json_extract(CAST(body AS TEXT), '$.seq') IS NOT seq OR
                json_extract(CAST(body AS TEXT), '$.time_ms') IS NOT time_ms OR
                json_extract(CAST(body AS TEXT), '$.event') IS NOT event OR
                json_extract(CAST(body AS TEXT), '$.principal') IS NOT principal OR
                json_extract(CAST(body AS TEXT), '$.method') IS NOT method OR
                json_extract(CAST(body AS TEXT), '$.outcome') IS NOT outcome)
            """,
                (chain, start, end if end is not None else 2**62),
            ).fetchone()
        except sqlite3.OperationalError as exc:
            if "malformed" not in str(exc).lower():
                raise _wrap(exc) from exc
            return self._column_mismatches_slow(chain, start, end if end is not None else 2**62)
        except sqlite3.Error as exc:
            raise _wrap(exc) from exc
        return int(row[0]) if row and row[0] is not None else None

    def raw_checkpoints(self, chain: str) -> list[tuple[int, bytes, bytes]]:
        rows = self._exec(
            f"SELECT CAST(n AS INTEGER), {_PAYLOAD_SIGNATURE} FROM audit_checkpoints WHERE chain = ? ORDER BY n",  # noqa: S608
            (chain,),
        ).fetchall()
        return [(int(r[0]), bytes(r[1]), bytes(r[2])) for r in rows]

    def checkpoint_columns(self, chain: str) -> list[tuple[int, str, int, int]]:
        rows = self._exec(
            "SELECT CAST(n AS INTEGER), CAST(kind AS TEXT), CAST(time_ms AS INTEGER), CAST(tree_size AS INTEGER)"
            " FROM audit_checkpoints WHERE chain = ? ORDER BY n",
            (chain,),
        ).fetchall()
        return [(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    def chains(self) -> list[str]:
        rows = self._exec(
            "SELECT CAST(chain AS TEXT) FROM audit_checkpoints"
            " UNION SELECT CAST(chain AS TEXT) FROM audit_records ORDER BY 1"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def bounds(self, chain: str) -> tuple[int, int] | None:
        row = self._exec(
            "SELECT min(CAST(seq AS INTEGER)), max(CAST(seq AS INTEGER)) FROM audit_records WHERE chain = ?", (chain,)
        ).fetchone()
        return (int(row[0]), int(row[1])) if row and row[0] is not None else None

    def hash_at(self, chain: str, seq: int) -> bytes | None:
        row = self._exec(
            f"SELECT {_HASH} FROM audit_records WHERE chain = ? AND seq = ?",  # noqa: S608
            (chain, seq),
        ).fetchone()
        return bytes(row[0]) if row else None

    def records(self, chain: str, start: int, end: int) -> Iterator[StoredRecord]:
        cur = self._exec(
            f"SELECT {_SELECT_COLS} FROM audit_records WHERE chain = ? AND seq >= ? AND seq <= ? ORDER BY seq",  # noqa: S608
            (chain, start, end),
        )
        while rows := cur.fetchmany(4096):
            yield from (_stored(r) for r in rows)

    def first_seq_at_or_after(self, chain: str, time_ms: int) -> int | None:
        row = self._exec(
            "SELECT min(CAST(seq AS INTEGER)) FROM audit_records WHERE chain = ? AND time_ms >= ?", (chain, time_ms)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def query(self, flt: QueryFilter) -> Iterator[StoredRecord]:
        where: list[str] = []
        params: list[Any] = []
        for col, value in (
            ("chain", flt.chain),
            ("principal", flt.principal),
            ("method", flt.method),
            ("outcome", flt.outcome),
            ("event", flt.event),
        ):
            if value is not None:
                where.append(f"{col} = ?")
                params.append(value)
        if flt.principal_any is not None:
            where.append(f"principal IN ({', '.join('?' * len(flt.principal_any)) or 'NULL'})")
            params.extend(flt.principal_any)
        if flt.since_ms is not None:
            where.append("time_ms >= ?")
            params.append(flt.since_ms)
        if flt.until_ms is not None:
            where.append("time_ms < ?")
            params.append(flt.until_ms)
        if flt.after_seq is not None:
            where.append("seq > ?")
            params.append(flt.after_seq)
        sql = f"SELECT {_SELECT_COLS} FROM audit_records"  # noqa: S608
        if where:
            sql += " WHERE " + " AND ".join(where)
        order = "DESC" if flt.descending else "ASC"
        sql += f" ORDER BY time_ms {order}, chain {order}, seq {order}"
        if flt.limit is not None:
            sql += " LIMIT ?"
            params.append(flt.limit)
        cur = self._exec(sql, params)
        while rows := cur.fetchmany(4096):
            yield from (_stored(r) for r in rows)

    def usage_path(self) -> str | None:
        return str(self.path.parent)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None


def _insert_checkpoint(db: sqlite3.Connection, cp: SignedCheckpoint) -> None:
    c = cp.checkpoint
    db.execute(
        "INSERT INTO audit_checkpoints (chain, n, kind, time_ms, tree_size, payload, signature)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (c.chain, c.n, str(c.kind), c.time_ms, c.tree_size, cp.payload, cp.signature),
    )


def _signed(row: Sequence[Any]) -> SignedCheckpoint:
    from audit.chain import Checkpoint

    payload, signature = bytes(row[0]), bytes(row[1])
    return SignedCheckpoint(Checkpoint.from_payload(payload), payload, signature)


def _stored(r: Sequence[Any]) -> StoredRecord:
    return StoredRecord(
        chain=r[0],
        seq=int(r[1]),
        time_ms=int(r[2]),
        event=r[3],
        principal=r[4],
        method=r[5],
        outcome=r[6],
        body=bytes(r[7]),
        hash=bytes(r[8]),
    )
