"""Python-client counterpart of StreamingBench.java: same request, same concurrency, one JSON line.

Usage: uv run --no-sync python benchmarks/java_client/python_client_bench.py TARGET [concurrency] [rounds] [max_tokens]
Each round starts `concurrency` streams at once (threads over the blocking client, which stalled
less than grpc.aio on this machine, see shared MEASURED-FACTS) and waits for all of them.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from xinserve.v1 import sampling_pb2
from xinserve_client import XinserveClient


def one_round(client: XinserveClient, concurrency: int, max_tokens: int) -> int:
    tokens = [0] * concurrency
    start = threading.Event()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        start.wait()
        try:
            with client.generate_stream(
                "xinserve-tiny-llama",
                "The quarterly report of the bank",
                sampling_params=sampling_pb2.SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
            ) as stream:
                for delta in stream:
                    tokens[i] += len(delta.token_ids)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} streams failed") from errors[0]
    return sum(tokens)


def main() -> None:
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    with XinserveClient(target, tls=False, timeout=None) as client:
        one_round(client, concurrency, max_tokens)  # warm-up, as many rounds as the Java side
        one_round(client, concurrency, max_tokens)
        rates = []
        cpu0, wall0, total = time.process_time(), time.perf_counter(), 0
        for _ in range(rounds):
            t0 = time.perf_counter()
            n = one_round(client, concurrency, max_tokens)
            rates.append(n / (time.perf_counter() - t0))
            total += n
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
    rates.sort()
    print(json.dumps({
        "client": "python", "concurrency": concurrency, "rounds": rounds, "max_tokens": max_tokens,
        "tokens": total, "tokens_per_s": round(total / wall, 1),
        "median_round_tokens_per_s": round(rates[len(rates) // 2], 1),
        "client_cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
    }))


if __name__ == "__main__":
    main()
