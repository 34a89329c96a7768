"""Model verification throughput: ``xinserve verify model`` vs ``openssl dgst -sm3`` on the same files.

Builds a model directory of N files totalling SIZE (default 1 GiB in 8 files), signs it with a fresh
SM2 key, warms the page cache, then alternates, REPEAT times:

* xinserve: ``trust.model_signing.verify_model`` (signature check + SM3 of every file, parallel threads)
* openssl:  one ``openssl dgst -sm3 f1 f2 ...`` process hashing the same files one after another

and reports the best MB/s of each and their ratio (issue 3's target: >= 1.6x on 2 cores).
Not a test: run it by hand, ``uv run --no-sync python benchmarks/verify_throughput.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trust.model_signing import sign_model, verify_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore

MB = 1_000_000


def build(root: Path, total: int, files: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    per = total // files
    block = os.urandom(1 << 20)
    for i in range(files):
        with (root / f"model-{i + 1:05d}-of-{files:05d}.safetensors").open("wb") as f:
            left = per
            while left:
                n = min(left, len(block))
                f.write(block[:n])
                left -= n
            # make files differ from each other
            f.write(os.urandom(16))
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="hashing threads (default: CPU count)")
    ap.add_argument("--dir", help="use/keep this directory instead of a temporary one")
    args = ap.parse_args()
    if shutil.which("openssl") is None:
        print("openssl CLI not found", file=sys.stderr)
        return 3
    tmp = None
    if args.dir:
        root = Path(args.dir)
    else:
        tmp = tempfile.mkdtemp(prefix="xinserve-bench-")
        root = Path(tmp) / "model"
    try:
        if not root.exists():
            build(root, args.size_mib << 20, args.files)
        key = Sm2PrivateKey.generate()
        sign_model(root, key, "bench")
        store = TrustStore.from_keys([key.public_key()])
        files = sorted(p for p in root.iterdir() if p.name.endswith(".safetensors") or p.name == "config.json")
        total = sum(p.stat().st_size for p in files)
        for p in files:  # warm the page cache so both sides read from memory
            with p.open("rb") as f:
                while f.read(1 << 24):
                    pass
        load_before = os.getloadavg()
        ours, ours1, theirs = [], [], []
        cpu_ours, cpu_theirs = [], []

        def cpu(who: int) -> float:
            r = resource.getrusage(who)
            return r.ru_utime + r.ru_stime

        for _ in range(args.repeat):
            t, c = time.perf_counter(), cpu(resource.RUSAGE_SELF)
            verify_model(root, store, "bench", jobs=args.jobs)
            ours.append(time.perf_counter() - t)
            cpu_ours.append(cpu(resource.RUSAGE_SELF) - c)
            t, c = time.perf_counter(), cpu(resource.RUSAGE_CHILDREN)
            subprocess.run(["openssl", "dgst", "-sm3", *map(str, files)], check=True, capture_output=True)
            theirs.append(time.perf_counter() - t)
            cpu_theirs.append(cpu(resource.RUSAGE_CHILDREN) - c)
            t = time.perf_counter()
            verify_model(root, store, "bench", jobs=1)
            ours1.append(time.perf_counter() - t)
        ver = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
        best_ours, best_ours1, best_theirs = min(ours), min(ours1), min(theirs)
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {ver}")
        load = os.getloadavg()
        print(f"load average before/after: {load_before[0]:.2f} / {load[0]:.2f} (other load skews it)")
        print(f"data: {len(files)} files, {total / MB:.0f} MB, page cache warm, best of {args.repeat}")
        print(f"xinserve verify (threads={args.jobs or os.cpu_count()}): {total / MB / best_ours:8.1f} MB/s")
        print(f"xinserve verify (threads=1):        {total / MB / best_ours1:8.1f} MB/s")
        print(f"openssl dgst -sm3, one after another: {total / MB / best_theirs:8.1f} MB/s")
        print(f"ratio xinserve/openssl (wall clock): {best_theirs / best_ours:.2f}x")
        # CPU time per byte is far less sensitive to other load than wall time: with T idle cores and
        # at least T files of similar size, the wall-clock ratio approaches T * cpu(openssl)/cpu(ours).
        threads = min(args.jobs or os.cpu_count() or 1, len(files))
        c_ours, c_theirs = min(cpu_ours), min(cpu_theirs)
        print(f"CPU seconds per GB: xinserve {c_ours / total * 1e9:.2f}, openssl {c_theirs / total * 1e9:.2f}")
        print(f"projected ratio on {threads} idle cores: {threads * c_theirs / c_ours:.2f}x")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
