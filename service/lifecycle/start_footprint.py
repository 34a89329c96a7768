"""What a server start creates on disk, and its removal when the start is refused.

``Server.create`` opens the audit log, which on a first start creates the server's SM2 key
(``audit.signing_key_path``) and its public half (``<name>.pub.pem``), for SQLite the database
(``audit.path``) with its ``-wal``, ``-shm`` and ``.lock`` files, and the directories above them
(``data_dir`` included); setting up the built-in models creates the demo signing key and trust
store (``<data_dir>/demo-signing``). The start may still be refused after that: the audit store
cannot be opened, TEE evidence is refused, a model cannot be set up.

``StartFootprint.note`` records, before anything is created, which of those paths do not
exist; ``remove_created`` removes the ones that exist after the refused start, so that the data
directory is left as the start found it. A path that existed before is never touched, nor are the
companions of one (the public half of an existing key, the ``-wal`` and ``-shm`` files of an
existing database): a key from an earlier start stays, and so does an existing audit database
(with the refused start's records appended). Built-in models converted under
``<data_dir>/models`` are kept: they hold no secret and the same package always gives the same
files, so the next start reuses them.

Another start at the same moment may have created the same paths (two first starts on one data
directory): the caller does not remove anything when the audit log refused because another
writer holds the chain (``WriterConflict``), and for SQLite the removal runs under the
database's writer lock (``flock`` on ``audit.stores.sqlite.writer_lock_path``) and is
skipped while another process holds it. With PostgreSQL, only the key and its directories are
local; two first starts sharing one key path, one refused for another reason than the chain
lock, can still remove the key the other one created.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from audit.config import StoreKind
from audit.stores.sqlite import writer_lock_path
from service.core.logs import get_logger
from service.settings.config import Settings
from trust.demo import DEMO_DIRNAME
from trust.server_key import public_key_path

log = get_logger("xinserve.server")


def _depth(path: Path) -> int:
    return len(path.absolute().parts)


def _log_kept(_function: object, path: str, exc_info: tuple[type[BaseException], BaseException, object]) -> None:
    log.error("refused_start_file_kept", path=path, error=str(exc_info[1]))


@dataclass(frozen=True)
class StartFootprint:
    """The paths a start may create that did not exist when it began.

    Attributes:
        files: files (the server key and its public half, the SQLite database and its
            companions), absent before the start.
        trees: directories created whole by the start (the demo signing directory).
        dirs: directories above those, absent before the start, deepest first.
        lock_file: the SQLite writer lock file, taken while removing (None for PostgreSQL).
    """

    files: tuple[Path, ...]
    trees: tuple[Path, ...]
    dirs: tuple[Path, ...]
    lock_file: Path | None

    @classmethod
    def note(cls, settings: Settings) -> StartFootprint:
        """Which of the paths the start of ``settings`` may create do not exist now (reads only)."""
        cfg = settings.audit
        # A companion file counts only with its main file: the public key is written with a new
        # key only, and the -wal and -shm files of an existing database hold its data.
        groups: list[list[Path]] = []
        if cfg.signing_key_path is not None:
            key = cfg.signing_key_path
            groups.append([key, public_key_path(key)])
        lock_file = None
        if cfg.store is StoreKind.SQLITE:
            db = cfg.path
            lock_file = writer_lock_path(db)
            groups.append([db, *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal")), lock_file])
        absent_files: list[Path] = []
        for main, *companions in groups:
            if not os.path.lexists(main):
                absent_files += [p for p in (main, *companions) if not os.path.lexists(p)]
        absent_trees = [p for p in (settings.data_dir / DEMO_DIRNAME,) if not os.path.lexists(p)]
        dirs: set[Path] = set()
        for path in (*absent_files, *absent_trees):
            parent = path.parent
            while parent != parent.parent and not os.path.lexists(parent):
                dirs.add(parent)
                parent = parent.parent
        return cls(
            files=tuple(absent_files),
            trees=tuple(absent_trees),
            dirs=tuple(sorted(dirs, key=_depth, reverse=True)),
            lock_file=lock_file,
        )

    @contextmanager
    def _store_unused(self) -> Iterator[bool]:
        """Hold the SQLite writer lock while inside; yields False when another process holds it."""
        if self.lock_file is None:
            yield True
            return
        try:
            fd = os.open(self.lock_file, os.O_RDWR)
        except (FileNotFoundError, NotADirectoryError):  # no store was opened: nobody holds its lock
            yield True
            return
        except OSError:
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
        except OSError:
            free = False
        try:
            yield free
        finally:
            os.close(fd)  # releases the lock

    def remove_created(self) -> list[Path]:
        """Remove what the refused start created (of ``files``, ``trees``, ``dirs``, the
        directories only when empty); returns the paths removed.

        Never raises: a path that cannot be removed is logged (``refused_start_file_kept``);
        nothing is removed while another process holds the SQLite writer lock
        (``refused_start_files_kept``).
        """
        removed: list[Path] = []
        with self._store_unused() as unused:
            if not unused:
                log.warning("refused_start_files_kept", reason="another process holds the audit database's lock")
                return removed
            for tree in self.trees:
                if os.path.lexists(tree):
                    shutil.rmtree(tree, onerror=_log_kept)
                    if not os.path.lexists(tree):
                        removed.append(tree)
            for path in self.files:
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    log.error("refused_start_file_kept", path=str(path), error=exc.strerror or str(exc))
                    continue
                removed.append(path)
            for directory in self.dirs:
                try:
                    directory.rmdir()
                except OSError:  # not empty (kept content), or already gone
                    continue
                removed.append(directory)
        return removed
