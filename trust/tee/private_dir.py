"""Private in-memory directories for decrypted models (tmpfs or ramfs only, never disk).

A :class:`PrivateDir` is a mode-0700 directory created under a base that must be on ``tmpfs`` or
``ramfs`` (checked in ``/proc/self/mountinfo``, the mount with the longest matching mount point).
:meth:`PrivateDir.remove` overwrites every file with zeros (on tmpfs the pages themselves are
overwritten) before unlinking it, then removes the directories.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from trust.tee.errors import TeeError, TeeReason

MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def filesystem_type(path: Path, mountinfo: str | None = None) -> str:
    """The file-system type of the mount holding ``path`` (``proc(5)`` mountinfo), or ``""``."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return ""
    real = str(Path(path).resolve())
    best, fstype = -1, ""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = _unescape(fields[4])
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > best:
            best, fstype = len(point), right.split()[0]
    return fstype


class PrivateDir:
    """A fresh private directory under ``base`` (which must be tmpfs/ramfs).

    Raises TeeError(not_private) when ``base`` is on any other file system or cannot be used.
    """

    def __init__(self, base: Path, prefix: str = "xinserve-model-") -> None:
        fstype = filesystem_type(base)
        if fstype not in MEMORY_FILESYSTEMS:
            raise TeeError(
                TeeReason.NOT_PRIVATE,
                f"{base} is on {fstype or 'an unknown fs'}, not tmpfs/ramfs (decrypted models never go to disk)",
            )
        try:
            self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        except OSError as exc:
            raise TeeError(
                TeeReason.NOT_PRIVATE, f"cannot create a private directory in {base}: {exc.strerror}"
            ) from None
        os.chmod(self.path, 0o700)

    def remove(self) -> None:
        """Zero every file, unlink it, remove the directory tree. Idempotent; never raises."""
        if not self.path.exists():
            return
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                path = Path(root) / name
                try:
                    size = path.stat().st_size
                    with open(path, "r+b", buffering=0) as fh:
                        chunk = b"\0" * min(size, 1 << 20)
                        left = size
                        while left > 0:
                            left -= fh.write(chunk[: min(left, len(chunk))])
                    path.unlink()
                except OSError:
                    pass
        shutil.rmtree(self.path, ignore_errors=True)
