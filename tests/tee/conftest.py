"""Fixtures of the TEE tests: recorded evidence, a loopback KBS, an emulated configfs-tsm."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tee.kbs_server import KbsServer, KbsState

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "tee"


@pytest.fixture
def kbs() -> Iterator[KbsServer]:
    server = KbsServer(KbsState()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def recorded_file() -> Path:
    return FIXTURES / "tdx_quote_4.dat"
