"""``trust`` imports nothing of xinserve's but itself (ARCHITECTURE.md layering)."""

from __future__ import annotations

import ast
from pathlib import Path

import trust

FORBIDDEN = {"service", "audit", "engine_backends", "clients", "xinserve_client"}


def test_trust_imports_only_itself_among_our_packages() -> None:
    root = Path(trust.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                assert n.split(".")[0] not in FORBIDDEN, f"{path.name} imports {n}"
