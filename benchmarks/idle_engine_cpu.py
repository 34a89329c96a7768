"""What an idle model costs: CPU used by a vLLM engine with no running request.

Two engines are started in this process, as ``xinserve serve`` starts its built-ins: the
embedding model ``all-MiniLM-L6-v2`` and the tiny generative Llama. Then two phases of
``--seconds`` each (default 60):

* ``idle``: nothing runs; every engine process's CPU time is read before and after.
* ``busy``: ``--streams`` closed-loop streams of 128 tokens each on the tiny Llama while the
  embedding engine stays idle; its processes' CPU time is read the same way.

CPU is read from each process's user + system time (``psutil.Process.cpu_times``), so a loaded
machine slows the busy phase but does not inflate an idle process's figure (unlike the lifetime
average ``ps`` shows, which includes model loading and warm-up). The result is in % of one core
per process, with the load average beside it.

Not a test. Run by hand (about 3-5 minutes on 2 cores):

    uv run --no-sync python benchmarks/idle_engine_cpu.py --json-out /tmp/idle.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cpu_seconds(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return times.user + times.system


async def _stream_loop(engine, stop: asyncio.Event, worker: int) -> int:
    from engine_backends.protocol import GenerateInput, SamplingOptions

    done = 0
    while not stop.is_set():
        request = GenerateInput(
            request_id=f"idle-bench-{worker}-{done}",
            prompt="The quick brown fox",
            sampling=SamplingOptions(max_tokens=128, temperature=0.0, ignore_eos=True),
        )
        async for _ in engine.generate(request):
            pass
        done += 1
    return done


async def _measure(args: argparse.Namespace) -> dict:
    from engine_backends.builtin_models import minilm_dir, tiny_llama_dir
    from engine_backends.platforms import resolve_device
    from engine_backends.vllm_engine import VllmEngine

    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="xinserve-idle-"))
    profile = resolve_device("cpu")
    me = psutil.Process()
    known = {p.pid for p in me.children(recursive=True)}

    embed = VllmEngine("all-MiniLM-L6-v2", "embed", minilm_dir(data_dir), profile, {"kv_cache_memory_bytes": 128 << 20})
    await embed.start()
    embed_procs = [p for p in me.children(recursive=True) if p.pid not in known]
    known |= {p.pid for p in embed_procs}
    generate = VllmEngine(
        "xinserve-tiny-llama", "generate", tiny_llama_dir(data_dir), profile,
        {"kv_cache_memory_bytes": 256 << 20, "max_num_seqs": 64},
    )
    await generate.start()
    generate_procs = [p for p in me.children(recursive=True) if p.pid not in known]
    await asyncio.sleep(3)  # let the engines' post-start busy loop (1 s in vLLM's shm queue) end

    phases = []
    try:
        for phase in ("idle", "busy"):
            stop = asyncio.Event()
            tasks = []
            if phase == "busy":
                tasks = [asyncio.create_task(_stream_loop(generate, stop, i)) for i in range(args.streams)]
            procs = [("embed", p) for p in embed_procs] + [("generate", p) for p in generate_procs]
            before = {p.pid: _cpu_seconds(p) for _, p in procs}
            front_before = _cpu_seconds(me)
            started = time.monotonic()
            await asyncio.sleep(args.seconds)
            elapsed = time.monotonic() - started
            stop.set()
            completed = sum(await asyncio.gather(*tasks))
            phases.append(
                {
                    "phase": phase,
                    "seconds": round(elapsed, 1),
                    "load_average_1m": round(os.getloadavg()[0], 1),
                    "streams_completed": completed,
                    "front_end_percent_core": round(100 * (_cpu_seconds(me) - front_before) / elapsed, 1),
                    "processes": [
                        {
                            "model": model,
                            "process": p.name(),
                            "percent_core": round(100 * (_cpu_seconds(p) - before[p.pid]) / elapsed, 1),
                        }
                        for model, p in procs
                    ],
                }
            )
    finally:
        await generate.shutdown()
        await embed.shutdown()
    return {"phases": phases, "cpu_count": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase (s)")
    parser.add_argument("--streams", type=int, default=8, help="concurrent streams in the busy phase")
    parser.add_argument("--data-dir", help="where the built-in models are built (default: a temp dir)")
    parser.add_argument("--json-out", help="write the result as JSON here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = asyncio.run(_measure(args))
    for phase in result["phases"]:
        print(
            f"[{phase['phase']}] {phase['seconds']} s, load average {phase['load_average_1m']}, "
            f"streams completed {phase['streams_completed']}, front end {phase['front_end_percent_core']}% of a core"
        )
        for proc in phase["processes"]:
            print(f"  {proc['model']:<9} {proc['process']:<18} {proc['percent_core']:>6}% of a core")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
