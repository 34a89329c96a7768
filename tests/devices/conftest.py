import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "devices"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """Put executables on PATH that print a recorded output (or misbehave), like the real tool would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")

    def install(name: str, body: str) -> Path:
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
        path.chmod(0o755)
        return path

    def printing(name: str, fixture: str) -> Path:
        return install(name, f"cat '{FIXTURES / fixture}'")

    install.printing = printing  # type: ignore[attr-defined]
    return install
