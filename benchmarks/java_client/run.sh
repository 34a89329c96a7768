#!/usr/bin/env bash
# Java client vs Python client, streaming tokens/s at concurrency 32, against ONE server in one run.
# Not a test. Usage: benchmarks/java_client/run.sh [pairs=3] [concurrency=32]
# Starts `xinserve serve` (embedded default models) on a free loopback port, builds the SDK and the
# benchmark jar, then alternates Java and Python runs `pairs` times and prints every JSON line (each
# with the 1-minute load average when it ended), then the summary: per pair and as the median over
# the pairs, tokens/s of each client and the ratios Java / Python, with the load averages.
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-3}
CONC=${2:-32}
WORK=$(mktemp -d /tmp/xinserve-java-bench.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

clients/java/mvnw -B -q -ntp -f clients/java/pom.xml install -Dmaven.test.skip=true -pl bom,client -am
clients/java/mvnw -B -q -ntp -f benchmarks/java_client/pom.xml package

uv run --no-sync xinserve serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" --no-metrics \
  --builtin-model xinserve-tiny-llama --builtin-model all-MiniLM-L6-v2 \
  --drain-grace-seconds 5 >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  if uv run --no-sync python -c "
import sys; from xinserve_client import XinserveClient
c = XinserveClient('127.0.0.1:$PORT', tls=False); sys.exit(0 if c.health('xinserve.v1.InferenceService') == 'SERVING' else 1)
" >/dev/null 2>&1; then break; fi
  sleep 1
done
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# server on 127.0.0.1:$PORT, log $WORK/server.log; $(nproc) cores; load $LOAD0"
RESULTS="$WORK/results.jsonl"
# one JSON line per run, tagged with its pair and the 1-minute load average at its end
tag() {
  while IFS= read -r line; do
    case "$line" in
      \{*\}) printf '%s\n' "${line%\}},\"pair\":$1,\"load1\":$(cut -d' ' -f1 /proc/loadavg)}" ;;
      *) printf '%s\n' "$line" ;;
    esac
  done | tee -a "$RESULTS"
}
for i in $(seq 1 "$PAIRS"); do
  java -jar benchmarks/java_client/target/java-client-bench.jar "dns:///127.0.0.1:$PORT" "$CONC" 3 128 | tag "$i"
  # the same with a JVM tuned for a short-lived client (C1 only, serial GC): less JIT CPU on 2 cores
  java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -jar benchmarks/java_client/target/java-client-bench.jar \
    "dns:///127.0.0.1:$PORT" "$CONC" 3 128 | sed 's/"client":"java"/"client":"java-c1"/' | tag "$i"
  uv run --no-sync python benchmarks/java_client/python_client_bench.py "127.0.0.1:$PORT" "$CONC" 3 128 | tag "$i"
done
python3 - "$RESULTS" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
pairs = sorted({r["pair"] for r in runs})
rate = {(r["pair"], r["client"]): r["tokens_per_s"] for r in runs}
load = {(r["pair"], r["client"]): r["load1"] for r in runs}
print(f"# summary: {len(pairs)} pairs; load average {sys.argv[2]} at start, {sys.argv[3]} at end")
print("# pair  java  java-c1  python  java/python  java-c1/python  load1 (java, java-c1, python)")
ratios = {"java": [], "java-c1": []}
for p in pairs:
    j, c, py = (rate.get((p, k)) for k in ("java", "java-c1", "python"))
    for k, v in (("java", j), ("java-c1", c)):
        if v and py:
            ratios[k].append(v / py)
    fmt = lambda v: f"{v / py:.2f}x" if v and py else "-"
    loads = ", ".join(str(load.get((p, k), "-")) for k in ("java", "java-c1", "python"))
    print(f"# {p}  {j}  {c}  {py}  {fmt(j)}  {fmt(c)}  ({loads})")
for k, v in ratios.items():
    if v:
        print(f"# median ratio {k} / python: {statistics.median(v):.2f}x over {len(v)} pairs")
PY
