"""A full disk on demand: a 1 MiB tmpfs (needs root, as in CI) and a file that fills it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tiny_fs(where: Path) -> Iterator[Path]:
    """Mount a 1 MiB tmpfs at ``where`` for the duration of a fixture; skip, saying why, if refused."""
    where.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs to simulate a full disk: {res.stderr.strip() or res.returncode}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> Path:
    """Write ``directory/filler`` until the filesystem refuses (ENOSPC); return its path."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 1024)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler
