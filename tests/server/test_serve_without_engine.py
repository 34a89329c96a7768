"""``xinserve serve`` in an environment without vLLM (a checkout where the CPU extra was never
installed) exits 3 with the install command, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

# ``sys.modules[name] = None`` is Python's own way of making a module unimportable
# (importlib raises ModuleNotFoundError naming it), as in an environment that lacks it.
_WITHOUT_VLLM = "import sys; sys.modules['vllm'] = None; from service.cli import main; sys.exit(main(sys.argv[1:]))"


def test_serve_without_vllm_exits_3_with_the_install_command(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_VLLM, "serve", "--listen", "127.0.0.1:0", "--no-metrics"],
        cwd=REPO,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 3, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "uv sync --locked --extra cpu" in result.stderr
    assert "'vllm'" in result.stderr
