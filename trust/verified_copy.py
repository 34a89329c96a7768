"""Verified private copies of signed model directories: what was verified is what is loaded.

:func:`~trust.model_signing.verify_model` checks files in place; an engine that opens them
later by path would read whatever is there then (a file changed after the check would be
served under the verified digest). :func:`copy_verified_model` closes that gap: it reads each
signed file once, hashes exactly the bytes it writes to a private copy, and hands the copy
over only when every file matched the signed manifest. The copy is made read-only
(files 0400, directories 0500, its parent 0700) and renamed into place atomically, so a
crash never leaves a half-written copy where an engine would look.

Works for base models and LoRA adapters alike (both are signed with ``xinserve sign model``).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography.hazmat.primitives import hashes

from trust.errors import Reason, VerificationError
from trust.manifest import DiskFile, FileEntry
from trust.model_signing import ModelVerification, check_listing, read_signed_manifest
from trust.sm3 import CHUNK_SIZE
from trust.trust_store import TrustStore

_PARTIAL_PREFIX = ".partial-"
_OLD_PREFIX = ".old-"


@dataclass(frozen=True)
class VerifiedCopy:
    """A verified model and the read-only directory holding exactly its signed bytes."""

    verification: ModelVerification
    path: Path


def copy_verified_model(
    model_dir: str | os.PathLike[str],
    trust_store: TrustStore,
    model_name: str,
    dest: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    progress: Callable[[int], None] | None = None,
    now: datetime | None = None,
) -> VerifiedCopy:
    """Verify ``model_dir`` (signed for ``model_name``) while copying its signed files to ``dest``.

    ``dest`` is replaced if it exists (a copy from an earlier start is never trusted: it is
    written afresh from the source each time). Blocking: call it from a worker thread.

    Raises:
        VerificationError: every reason of ``verify_model`` (nothing is left at ``dest`` then,
            and an earlier copy there is removed), or io_error when ``dest`` cannot be written.
            When the copy fails, ``dest``'s parent and every directory this call created on
            the way are removed too if left empty.
    """
    source = Path(model_dir)
    target = Path(dest)
    parent = target.parent
    try:
        signed = read_signed_manifest(source, trust_store, model_name, now=now)
        on_disk = check_listing(source, signed)
    except BaseException:
        remove_tree(target)
        _remove_empty_dirs([parent])
        raise
    created = [d for d in (parent, *parent.parents) if not d.exists()]  # deepest first
    try:
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(parent, 0o700)
        staging = Path(tempfile.mkdtemp(dir=parent, prefix=_PARTIAL_PREFIX))
    except OSError as e:
        raise VerificationError(Reason.IO_ERROR, f"cannot create the verified copy: {e.strerror}") from None
    try:
        _copy_all(signed.entries, on_disk, staging, jobs, progress)
        _make_read_only(staging)
        _replace(staging, target)
    except BaseException:
        remove_tree(staging)
        remove_tree(target)
        _remove_empty_dirs([parent, *created])
        raise
    return VerifiedCopy(signed.verification(), target)


def _copy_all(
    entries: Sequence[FileEntry],
    on_disk: dict[str, DiskFile],
    staging: Path,
    jobs: int | None,
    progress: Callable[[int], None] | None,
) -> None:
    for e in entries:
        (staging / e.name).parent.mkdir(parents=True, exist_ok=True)
    order = sorted(entries, key=lambda e: -e.size)  # largest first: better balance across threads
    workers = max(1, min(jobs or os.cpu_count() or 1, len(order)))

    def one(entry: FileEntry) -> None:
        _copy_one(entry, on_disk[entry.name].path, staging / entry.name, progress)

    if workers == 1:
        for e in order:
            one(e)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sm3-copy") as ex:
        for _ in ex.map(one, order):
            pass


def _copy_one(entry: FileEntry, src: Path, dst: Path, progress: Callable[[int], None] | None) -> None:
    """Copy ``src`` to ``dst``, hashing the bytes written; they must be the signed ones."""
    h = hashes.Hash(hashes.SM3())
    size = 0
    try:
        with src.open("rb", buffering=0) as fin, dst.open("xb", buffering=0) as fout:
            buf = bytearray(CHUNK_SIZE)
            view = memoryview(buf)
            while True:
                n = fin.readinto(buf)
                if not n:
                    break
                size += n
                if size > entry.size:
                    raise VerificationError(Reason.FILE_SIZE_CHANGED, f"{entry.name} changed size while being copied")
                h.update(view[:n])
                fout.write(view[:n])
                if progress is not None:
                    progress(n)
            os.fsync(fout.fileno())
    except OSError as e:
        raise VerificationError(Reason.IO_ERROR, f"cannot copy {entry.name}: {e.strerror}") from None
    if size != entry.size:
        raise VerificationError(Reason.FILE_SIZE_CHANGED, f"{entry.name} changed size while being copied")
    if h.finalize().hex() != entry.digest:
        raise VerificationError(Reason.FILE_MODIFIED, f"{entry.name}: SM3 differs from the signed manifest")


def _make_read_only(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o400)
    for dirpath, _dirs, _files in os.walk(root, topdown=False):
        os.chmod(dirpath, 0o500)


def _replace(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``, moving an existing ``target`` aside first."""
    old = None
    if target.exists() or target.is_symlink():
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=_OLD_PREFIX))
        os.rmdir(old)
        os.rename(target, old)
    os.rename(staging, target)
    if old is not None:
        remove_tree(old)


def _remove_empty_dirs(dirs: Sequence[Path]) -> None:
    """``rmdir`` each of ``dirs`` in order (deepest first) that exists and is empty."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            pass


def remove_tree(path: Path) -> None:
    """Remove a (possibly read-only) copy; missing is fine."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    for dirpath, _dirs, _files in os.walk(path):
        try:
            os.chmod(dirpath, stat.S_IRWXU)
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)


__all__ = ["VerifiedCopy", "copy_verified_model", "remove_tree"]
