"""Wait until the Ray cluster counts the LeaderWorkerSet group's nodes, or fail clearly.

Run by the group's leader after ``ray start --head`` and before ``xinserve serve``:
``python3 wait-for-ray-workers.py --nodes N --timeout SECONDS [--address HOST:PORT]
[--node-ip-address IP]`` (this node's address where Ray's own detection would differ).
Exit 0 once ``ray.nodes()`` lists at least N alive nodes; exit 1 after SECONDS with
"ray: K of N nodes joined within SECONDS s" on stderr (vLLM's Ray executor would otherwise
place its workers on the nodes present, or wait without a bound).
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--address", default="auto")
    parser.add_argument("--node-ip-address", default=None)
    parser.add_argument("--poll", type=float, default=2.0)
    args = parser.parse_args()
    import ray

    options = {"_node_ip_address": args.node_ip_address} if args.node_ip_address else {}
    ray.init(address=args.address, log_to_driver=False, logging_level="ERROR", **options)
    deadline = time.monotonic() + args.timeout
    try:
        while True:
            alive = sum(1 for node in ray.nodes() if node.get("Alive"))
            if alive >= args.nodes:
                print(f"ray: {alive} of {args.nodes} nodes joined", flush=True)
                return 0
            if time.monotonic() >= deadline:
                print(f"ray: {alive} of {args.nodes} nodes joined within {args.timeout:g} s", file=sys.stderr)
                return 1
            time.sleep(args.poll)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
