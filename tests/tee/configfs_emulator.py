"""A temporary directory laid out and behaving like the kernel's configfs-tsm report ABI.

``Documentation/ABI/testing/configfs-tsm-report``: ``mkdir`` of a report directory makes its
attributes (``provider``, ``generation``, ``inblob``, ``outblob``, ``auxblob`` for sev_guest); a
write to ``inblob`` (at most 64 bytes, else EINVAL) increments ``generation``; ``outblob`` is the
provider's evidence over the last ``inblob``. The evidence the emulator produces is the recorded
TDX quote (or SNP report) with its report-data field replaced by ``inblob``, so parsers read back
what was written. ``interfere`` simulates another process writing ``inblob`` between our write and
our read.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from tests.tee.conftest import FIXTURES
from trust.tee.configfs_tsm import ConfigfsOps

TDX = (FIXTURES / "tdx_quote_4.dat").read_bytes()
SNP = (FIXTURES / "test-report.bin").read_bytes()


class KernelConfigfs(ConfigfsOps):
    def __init__(self, provider: str = "tdx_guest", interfere: int = 0) -> None:
        self.provider = provider
        self.interfere = interfere  # how many reads of outblob see a concurrent writer
        self.created: list[Path] = []

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)
        self.created.append(path)
        (path / "provider").write_text(self.provider + "\n")
        (path / "generation").write_text("0\n")
        (path / "inblob").write_bytes(b"")
        (path / "outblob").write_bytes(b"")
        if self.provider == "sev_guest":
            (path / "auxblob").write_bytes(b"\x01CERT-TABLE")

    def rmdir(self, path: Path) -> None:
        for child in path.iterdir():
            child.unlink()
        os.rmdir(path)

    def _bump(self, path: Path) -> None:
        g = path / "generation"
        g.write_text(f"{int(g.read_text()) + 1}\n")

    def write(self, path: Path, data: bytes) -> None:
        if path.name == "inblob":
            if len(data) > 64:
                raise OSError(errno.EINVAL, "Invalid argument")
            path.write_bytes(data)
            self._bump(path.parent)
            padded = data.ljust(64, b"\0")
            if self.provider == "tdx_guest":
                out = TDX[: 48 + 520] + padded + TDX[48 + 584 :]
            else:
                out = SNP[:0x50] + padded + SNP[0x90:]
            (path.parent / "outblob").write_bytes(out)
            return
        raise OSError(errno.EACCES, "Permission denied")

    def read(self, path: Path, limit: int = 1 << 20) -> bytes:
        if path.name == "outblob" and self.interfere > 0:
            self.interfere -= 1
            self._bump(path.parent)  # another writer came in between
        return super().read(path, limit)
