#!/usr/bin/env bash
# Java client vs Python client, streaming tokens/s at concurrency 32, against ONE server in one run.
# Not a test. Usage: benchmarks/java_client/run.sh [pairs=3] [concurrency=32]
# Starts `xinserve serve` (embedded default models) on a free loopback port, builds the SDK and the
# benchmark jar, then alternates Java and Python runs `pairs` times and prints every JSON line.
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-3}
CONC=${2:-32}
WORK=$(mktemp -d /tmp/xinserve-java-bench.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

clients/java/mvnw -B -q -ntp -f clients/java/pom.xml install -Dmaven.test.skip=true
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
echo "# server on 127.0.0.1:$PORT, log $WORK/server.log; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$PAIRS"); do
  java -jar benchmarks/java_client/target/java-client-bench.jar "dns:///127.0.0.1:$PORT" "$CONC" 3 128
  # the same with a JVM tuned for a short-lived client (C1 only, serial GC): less JIT CPU on 2 cores
  java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -jar benchmarks/java_client/target/java-client-bench.jar \
    "dns:///127.0.0.1:$PORT" "$CONC" 3 128 | sed 's/"client":"java"/"client":"java-c1"/'
  uv run --no-sync python benchmarks/java_client/python_client_bench.py "127.0.0.1:$PORT" "$CONC" 3 128
done
