"""``trust.tee`` imports nothing of xinserve's outside ``trust`` (ARCHITECTURE.md layering)."""

from __future__ import annotations

import ast
from pathlib import Path

import trust.tee

FORBIDDEN = {"service", "audit", "engine_backends", "clients", "xinserve_client", "xinserve", "vllm", "torch"}


def test_trust_tee_imports_only_trust() -> None:
    root = Path(trust.tee.__file__).parent
    files = sorted(root.glob("*.py"))
    assert len(files) >= 10
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                assert n.split(".")[0] not in FORBIDDEN, f"{path.name} imports {n}"
