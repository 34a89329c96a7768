"""Serving throughput: xinserve (gRPC and its OpenAI HTTP front end) against in-process
AsyncLLM, ``vllm serve`` HTTP and vLLM's own gRPC server, in one run.

Streaming tokens/s and time-to-first-token (TTFT) p50/p99 at concurrency N (default 1, 8, 32)
for a built-in generative model (``--model``: ``xinserve-tiny-llama``, 2-layer Llama, the
default; or ``smollm2-135m-instruct``, 30 layers), float32, with the same engine arguments
everywhere. Peers (``--peers``, in this order by default):

* ``inproc``        the same vLLM ``AsyncLLM`` driven in-process, no RPC (the ceiling); it runs
                    in a child process of this script (one event loop: engine + load generator).
* ``xinserve-tiny`` ``xinserve serve`` with only the measured model loaded.
* ``xinserve``      ``xinserve serve`` with its default two models (the measured one and
                    all-MiniLM-L6-v2, idle while the other is measured).
                    Both xinserve peers are measured with each of ``--clients``: ``sync``
                    (``InferenceService.GenerateStream``, blocking grpc stub, one thread per
                    stream), ``aio`` (grpc.aio, one event loop), ``java`` (the Java SDK in a
                    JVM: benchmarks/java_client's ``LoadGen``), ``raw`` (plain grpc-java with
                    messages from a protoset: ``RawStreamGen``, the same client code that the
                    ``vllm-grpc-raw`` row points at vLLM's server), ``javahttp``
                    (``java.net.http`` against the OpenAI front end: ``HttpStreamGen``, also the
                    ``vllm-http-java`` row) and ``openai`` (xinserve's OpenAI front end,
                    streaming ``POST /v1/completions``, aiohttp); rows are
                    labelled ``<peer>-<client>``. The Java clients need the jar built first
                    (benchmarks/README.md).
* ``vllm-http``     ``vllm serve`` (via benchmarks/vllm_serve_launcher.py), ``POST
                    /v1/completions`` with ``stream=true`` and ``return_token_ids``, aiohttp;
                    with ``javahttp`` among ``--clients`` also ``HttpStreamGen``
                    (row ``vllm-http-java``).
* ``vllm-grpc``     ``vllm serve --grpc`` (vLLM's launcher for smg-grpc-servicer, installed
                    ``--no-deps`` into ``--smg-dir`` and put on that server's PYTHONPATH only, so
                    the project's torch and vllm stay as they are), streaming ``Generate``,
                    blocking stub, one thread per stream. It returns token ids only, no text.
                    With ``raw`` among ``--clients`` also measured with ``RawStreamGen``
                    (row ``vllm-grpc-raw``).

Only one engine runs at a time: each peer is started, warmed up, measured, stopped. A measurement
at concurrency N is a closed loop: N workers each send requests back to back (same prompts for
every peer) until ``max(min_requests, requests_per_worker * N)`` requests are done; tokens/s is
generated tokens / wall time, TTFT is from sending the request to receiving the first token.
Every request asks for exactly ``--max-tokens`` tokens (ignore_eos, temperature 0; checked).
Each configuration is repeated ``--reps`` times per round; ``--rounds`` starts every peer again
(order reversed every other round). The table gives per row: medians over all repetitions, TTFT
percentiles over all requests, the ratios to inproc / vllm-http / vllm-grpc / vllm-grpc-raw /
vllm-http-java, the 1-minute load average before and after, the load generator's CPU seconds
(user + system of its process: this script's for the Python clients, the JVM's for the Java
ones) in all and per 1,000 generated tokens, the CPU cores used by the client, the server's
front-end process and its engine processes, and the CPU seconds of every process of the server's tree.

Not a test. Run by hand on a quiet machine (the full default run takes 20-40 minutes on 2 cores,
most of it server start-up):

    uv run --no-sync python benchmarks/serving_throughput.py --json-out /tmp/serving.json
    # a smoke run of every peer: one repetition, 16 tokens, N=1
    uv run --no-sync python benchmarks/serving_throughput.py --reps 1 --max-tokens 16 --concurrency 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL_NAME = "xinserve-tiny-llama"

# The engine arguments of xinserve's built-in generative model on CPU (service/lifecycle/server.py
# _BUILTIN_OPTIONS + engine_backends/platforms.py cpu profile), stated explicitly for every peer.
ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 2048,
    "max_num_seqs": 64,
    "max_num_batched_tokens": 4096,  # the API server's default is 2048, offline 4096: set it
    "kv_cache_memory_bytes": 512 * 1024**2,
    "enforce_eager": True,
    # prefix caching: vLLM's default (on), as xinserve uses it
}
# What differs per model (engine_backends/builtin_models.py), applied to ENGINE_ARGS by --model.
MODEL_ENGINE_ARGS: dict[str, dict[str, Any]] = {
    "xinserve-tiny-llama": {"max_model_len": 2048, "max_num_batched_tokens": 4096},
    "smollm2-135m-instruct": {"max_model_len": 8192, "max_num_batched_tokens": 8192},
}


def select_model(name: str) -> None:
    """Make ``name`` the measured model (MODEL_NAME, ENGINE_ARGS)."""
    global MODEL_NAME
    MODEL_NAME = name
    ENGINE_ARGS.update(MODEL_ENGINE_ARGS[name])


def model_dir_of(data_dir: Path) -> Path:
    """The measured built-in model's directory, built or converted on first use."""
    from engine_backends.builtin_models import builtin_models

    return builtin_models(Path(data_dir), [MODEL_NAME])[0].path


_WORDS = (
    "river stone lantern maple orbit quiet harbor velvet signal copper meadow thunder pencil "
    "glacier whisper saddle marble compass ember willow canyon ribbon falcon mosaic"
).split()


def prompts(count: int = 64) -> list[str]:
    """Fixed, distinct prompts (about 20-30 tokens each); request i uses prompts[i % count]."""
    out = []
    for i in range(count):
        words = [_WORDS[(i * 7 + j * 3) % len(_WORDS)] for j in range(14)]
        out.append(f"Request {i}: " + " ".join(words))
    return out


# ---------------------------------------------------------------------------------------------
# measurement records


@dataclass
class Run:
    peer: str
    concurrency: int
    round: int
    rep: int
    requests: int
    tokens: int
    wall_s: float
    tok_s: float
    ttft_s: list[float]
    loadavg_before: tuple[float, float, float]
    loadavg_after: tuple[float, float, float]
    client_cpu_s: float  # CPU of the process that ran the load generator (all its threads)
    frontend_cpu_s: float | None = None  # the server's API front-end process
    engine_cpu_s: float | None = None  # the engine processes (children of the front end)
    errors: list[str] = field(default_factory=list)
    procs_cpu_s: dict[str, float] = field(default_factory=dict)  # "name pid" -> CPU s, server tree


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class TreeCpu:
    """CPU seconds of a server process tree: the front-end process vs the engine processes."""

    def __init__(self, root_pid: int, frontend_match: str) -> None:
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(root_pid)
        self.frontend_match = frontend_match

    def _procs(self) -> list[Any]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except self._psutil.NoSuchProcess:
            return []

    def frontend(self) -> Any:
        """The front-end process: the one running frontend_match that is not uv nor a spawned child."""
        for p in self._procs():
            with contextlib.suppress(self._psutil.Error):
                cmd = " ".join(p.cmdline())
                if self.frontend_match in cmd and "multiprocessing" not in cmd and p.name() != "uv":
                    return p
        return self.root

    def sample(self) -> dict[int, float]:
        out = {}
        for p in self._procs():
            with contextlib.suppress(self._psutil.Error):
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
        return out

    def split(self, before: dict[int, float], after: dict[int, float]) -> tuple[float, float]:
        """(front-end CPU s, engine CPU s): the front end vs all its descendants (engine cores)."""
        fe = self.frontend()
        engines: set[int] = set()
        with contextlib.suppress(self._psutil.Error):
            engines = {p.pid for p in fe.children(recursive=True)}
        front = after.get(fe.pid, 0.0) - before.get(fe.pid, 0.0)
        engine = sum(t - before.get(pid, 0.0) for pid, t in after.items() if pid in engines)
        return front, engine

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs()]

    def per_process(self, before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
        """CPU seconds of every process of the tree over the interval, keyed ``"name pid"``
        (the front end as ``front-end``; uv's wrapper process left out)."""
        fe = self.frontend().pid
        names: dict[int, str] = {}
        for p in self._procs():
            with contextlib.suppress(self._psutil.Error):
                names[p.pid] = "front-end" if p.pid == fe else p.name()
        return {
            f"{names.get(pid, '?')} {pid}": round(t - before.get(pid, 0.0), 3)
            for pid, t in after.items()
            if names.get(pid) != "uv"
        }


# ---------------------------------------------------------------------------------------------
# load generators: each returns (tokens, ttfts, errors) for `total` requests over `n` workers


async def _closed_loop_async(n: int, total: int, one) -> tuple[int, list[float], list[str]]:
    counter = iter(range(total))
    tokens = 0
    ttfts: list[float] = []
    errors: list[str] = []

    async def worker() -> None:
        nonlocal tokens
        for i in counter:
            try:
                got, ttft = await one(i)
                tokens += got
                ttfts.append(ttft)
            except Exception as exc:  # a benchmark reports failures, it does not stop on them
                errors.append(f"{type(exc).__name__}: {exc}"[:200])

    await asyncio.gather(*(worker() for _ in range(n)))
    return tokens, ttfts, errors


def _closed_loop_threads(n: int, total: int, one) -> tuple[int, list[float], list[str]]:
    lock = threading.Lock()
    state = {"next": 0, "tokens": 0}
    ttfts: list[float] = []
    errors: list[str] = []
    start = threading.Barrier(n)

    def worker() -> None:
        start.wait()
        while True:
            with lock:
                i = state["next"]
                if i >= total:
                    return
                state["next"] = i + 1
            try:
                got, ttft = one(i)
                with lock:
                    state["tokens"] += got
                    ttfts.append(ttft)
            except Exception as exc:
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return state["tokens"], ttfts, errors


# ---------------------------------------------------------------------------------------------
# clients


class XinserveSync:
    name = "xinserve-sync"

    def __init__(self, target: str, args: argparse.Namespace) -> None:
        import grpc

        from xinserve.v1 import inference_pb2, inference_pb2_grpc, sampling_pb2

        self.args = args
        self.prompts = prompts()
        self.channel = grpc.insecure_channel(target)
        self.stub = inference_pb2_grpc.InferenceServiceStub(self.channel)
        self.pb = inference_pb2
        self.sp = sampling_pb2.SamplingParams(
            max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True, seed=args.seed
        )

    def one(self, i: int) -> tuple[int, float]:
        req = self.pb.GenerateRequest(
            model=MODEL_NAME, prompt=self.prompts[i % len(self.prompts)], sampling_params=self.sp
        )
        t0 = time.perf_counter()
        ttft = None
        n = 0
        for msg in self.stub.GenerateStream(req, timeout=600):
            if msg.token_ids:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                n += len(msg.token_ids)
        if n != self.args.max_tokens:
            raise RuntimeError(f"got {n} tokens, expected {self.args.max_tokens}")
        return n, ttft or float("nan")

    def run(self, n: int, total: int) -> tuple[int, list[float], list[str]]:
        return _closed_loop_threads(n, total, self.one)

    def close(self) -> None:
        self.channel.close()


class XinserveAio:
    name = "xinserve-aio"

    def __init__(self, target: str, args: argparse.Namespace) -> None:
        from xinserve.v1 import inference_pb2, sampling_pb2

        self.target = target
        self.args = args
        self.prompts = prompts()
        self.pb = inference_pb2
        self.sp = sampling_pb2.SamplingParams(
            max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True, seed=args.seed
        )

    def run(self, n: int, total: int) -> tuple[int, list[float], list[str]]:
        import grpc

        from xinserve.v1 import inference_pb2_grpc

        async def main() -> tuple[int, list[float], list[str]]:
            async with grpc.aio.insecure_channel(self.target) as channel:
                stub = inference_pb2_grpc.InferenceServiceStub(channel)

                async def one(i: int) -> tuple[int, float]:
                    req = self.pb.GenerateRequest(
                        model=MODEL_NAME, prompt=self.prompts[i % len(self.prompts)], sampling_params=self.sp
                    )
                    t0 = time.perf_counter()
                    ttft = None
                    got = 0
                    async for msg in stub.GenerateStream(req, timeout=600):
                        if msg.token_ids:
                            if ttft is None:
                                ttft = time.perf_counter() - t0
                            got += len(msg.token_ids)
                    if got != self.args.max_tokens:
                        raise RuntimeError(f"got {got} tokens, expected {self.args.max_tokens}")
                    return got, ttft or float("nan")

                await channel.channel_ready()
                return await _closed_loop_async(n, total, one)

        return asyncio.run(main())

    def close(self) -> None:
        pass


JAVA_JAR = ROOT / "benchmarks" / "java_client" / "target" / "java-client-bench.jar"


def protoset(*files: Any) -> bytes:
    """A serialized ``FileDescriptorSet`` of the given protobuf ``FileDescriptor`` objects and
    everything they import, each file after its imports (what ``protoc --include_imports
    --descriptor_set_out`` writes)."""
    from google.protobuf import descriptor_pb2

    out = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd: Any) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            add(dep)
        fd.CopyToProto(out.file.add())

    for fd in files:
        add(fd)
    return out.SerializeToString()


class _JavaClient:
    """A load generator in a JVM (benchmarks/java_client), kept running for the whole peer and
    driven over its stdin (``N TOTAL`` in, one JSON line out), so JVM start-up and JIT warm-up
    fall into the warm-up round. Its client CPU is the JVM process's (``psutil``: user + system,
    all threads). The jar is built by ``benchmarks/java_client/run.sh`` or by hand (see
    benchmarks/README.md)."""

    name = ""

    def __init__(self, main_class: str, main_args: list[str], args: argparse.Namespace) -> None:
        import psutil

        if not JAVA_JAR.is_file():
            raise FileNotFoundError(f"{JAVA_JAR} is missing: build it (see benchmarks/README.md)")
        cmd = [args.java, *args.java_opts.split(), "-cp", str(JAVA_JAR), f"io.xinserve.bench.{main_class}", *main_args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.ps = psutil.Process(self.proc.pid)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().strip()
        if ready != "READY":
            raise RuntimeError(f"java load generator did not start (exit {self.proc.poll()}): {ready!r}")

    def cpu_s(self) -> float:
        """CPU seconds (user + system, all threads) the JVM has used so far."""
        t = self.ps.cpu_times()
        return t.user + t.system

    def run(self, n: int, total: int) -> tuple[int, list[float], list[str]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n} {total}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"java load generator exited ({self.proc.wait(10)})")
        d = json.loads(line)
        return int(d["tokens"]), [float(t) for t in d["ttft_s"]], list(d["errors"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _tmpfile(data: str | bytes, suffix: str) -> str:
    mode = "wb" if isinstance(data, bytes) else "w"
    with tempfile.NamedTemporaryFile(mode, suffix=suffix, delete=False) as f:
        f.write(data)
    return f.name


class XinserveJava(_JavaClient):
    """``InferenceService.GenerateStream`` through the Java SDK (``LoadGen``: ``XinserveClient``,
    one channel, one thread per stream, its ``ResponseStream``): what a Java user gets."""

    name = "xinserve-java"

    def __init__(self, target: str, args: argparse.Namespace) -> None:
        self._files = [_tmpfile("\n".join(prompts()) + "\n", ".txt")]
        main_args = [f"dns:///{target}", MODEL_NAME, self._files[0], str(args.max_tokens), str(args.seed)]
        super().__init__("LoadGen", main_args, args)

    def close(self) -> None:
        super().close()
        for f in self._files:
            os.unlink(f)


class _RawJava(_JavaClient):
    """A server-streaming method through plain grpc-java (``RawStreamGen``: one channel,
    ``ClientCalls.blockingServerStreamingCall``, ``DynamicMessage`` from a protoset), the same
    client code for every server it is pointed at: ``method`` is ``package.Service/Method``,
    ``requests`` one request per prompt, ``tokens_path`` the response's counted repeated field,
    ``unique`` a request field given a fresh value per call (or ``-``)."""

    def __init__(
        self, target: str, args: argparse.Namespace, fds: list[Any], method: str, requests: list[Any],
        tokens_path: str, unique: str,
    ) -> None:  # fmt: skip
        import base64

        lines = "\n".join(base64.b64encode(r.SerializeToString()).decode("ascii") for r in requests) + "\n"
        self._files = [_tmpfile(protoset(*fds), ".protoset"), _tmpfile(lines, ".b64")]
        main_args = [target, self._files[0], method, self._files[1], tokens_path, unique, str(args.max_tokens)]
        super().__init__("RawStreamGen", main_args, args)

    def close(self) -> None:
        super().close()
        for f in self._files:
            os.unlink(f)


class XinserveRaw(_RawJava):
    """``InferenceService.GenerateStream`` through plain grpc-java (``RawStreamGen``), as
    ``VllmGrpcRaw`` calls vLLM's server: the like-for-like client of the two gRPC servers.
    xinserve's messages carry the detokenized text beside the token ids."""

    name = "xinserve-raw"

    def __init__(self, target: str, args: argparse.Namespace) -> None:
        from xinserve.v1 import inference_pb2, sampling_pb2

        sp = sampling_pb2.SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True, seed=args.seed)
        reqs = [inference_pb2.GenerateRequest(model=MODEL_NAME, prompt=p, sampling_params=sp) for p in prompts()]
        service = inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name
        super().__init__(target, args, [inference_pb2.DESCRIPTOR], f"{service}/GenerateStream", reqs, "token_ids", "-")


class VllmGrpcRaw(_RawJava):
    """vLLM's ``VllmEngine.Generate`` (``vllm serve --grpc``) through plain grpc-java
    (``RawStreamGen``), each call with a fresh ``request_id``; its chunks carry token ids only."""

    name = "vllm-grpc-raw"

    def __init__(self, target: str, args: argparse.Namespace) -> None:
        sys.path.insert(0, str(args.smg_dir))
        from smg_grpc_proto import vllm_engine_pb2

        pb = vllm_engine_pb2
        sp = pb.SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True, seed=args.seed)
        reqs = [pb.GenerateRequest(request_id="bench", text=p, stream=True, sampling_params=sp) for p in prompts()]
        service = pb.DESCRIPTOR.services_by_name["VllmEngine"].full_name
        super().__init__(target, args, [pb.DESCRIPTOR], f"{service}/Generate", reqs, "chunk.token_ids", "request_id")


class _JavaHttp(_JavaClient):
    """Streaming ``POST /v1/completions`` from a JVM (``HttpStreamGen``: ``java.net.http``,
    HTTP/1.1, one thread per stream), the same client code for every OpenAI-compatible server:
    the same bodies as the aiohttp clients, with ``stream_options.include_usage`` (tokens
    counted from the usage event, the first token is the first event with text)."""

    def __init__(self, base_url: str, args: argparse.Namespace) -> None:
        bodies = [
            json.dumps(
                {
                    "model": MODEL_NAME,
                    "prompt": p,
                    "max_tokens": args.max_tokens,
                    "temperature": 0.0,
                    "ignore_eos": True,
                    "seed": args.seed,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
            for p in prompts()
        ]
        self._files = [_tmpfile("\n".join(bodies) + "\n", ".jsonl")]
        super().__init__("HttpStreamGen", [base_url + "/v1/completions", self._files[0], str(args.max_tokens)], args)

    def close(self) -> None:
        super().close()
        for f in self._files:
            os.unlink(f)


class XinserveJavaHttp(_JavaHttp):
    """xinserve's OpenAI front end through ``HttpStreamGen`` (rows ``<peer>-javahttp``)."""

    name = "xinserve-javahttp"


class VllmHttpJava(_JavaHttp):
    """``vllm serve``'s OpenAI server through ``HttpStreamGen`` (row ``vllm-http-java``)."""

    name = "vllm-http-java"


class _StreamingCompletions:
    """Streaming ``POST /v1/completions`` over aiohttp, one session, closed loop. A peer says
    what its request body adds (``extra``) and how an event's tokens are counted (``account``)."""

    name = ""
    extra: ClassVar[dict[str, object]] = {}

    def __init__(self, base_url: str, args: argparse.Namespace) -> None:
        self.url = base_url + "/v1/completions"
        self.args = args
        self.prompts = prompts()

    def account(self, event: dict, got: int) -> tuple[int, bool]:
        """``(tokens counted so far, whether this event carries generated tokens)``."""
        raise NotImplementedError

    def run(self, n: int, total: int) -> tuple[int, list[float], list[str]]:
        import aiohttp

        async def main() -> tuple[int, list[float], list[str]]:
            timeout = aiohttp.ClientTimeout(total=600)
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

                async def one(i: int) -> tuple[int, float]:
                    body = {
                        "model": MODEL_NAME,
                        "prompt": self.prompts[i % len(self.prompts)],
                        "max_tokens": self.args.max_tokens,
                        "temperature": 0.0,
                        "ignore_eos": True,
                        "seed": self.args.seed,
                        "stream": True,
                        **self.extra,
                    }
                    t0 = time.perf_counter()
                    ttft = None
                    got = 0
                    async with session.post(self.url, json=body) as resp:
                        if resp.status != 200:
                            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
                        async for line in resp.content:
                            if not line.startswith(b"data: "):
                                continue
                            data = line[6:].strip()
                            if data == b"[DONE]":
                                break
                            got, tokens = self.account(json.loads(data), got)
                            if tokens and ttft is None:
                                ttft = time.perf_counter() - t0
                    if got != self.args.max_tokens:
                        raise RuntimeError(f"got {got} tokens, expected {self.args.max_tokens}")
                    return got, ttft or float("nan")

                return await _closed_loop_async(n, total, one)

        return asyncio.run(main())

    def close(self) -> None:
        pass


class VllmHttp(_StreamingCompletions):
    """``vllm serve``'s OpenAI server with ``return_token_ids`` (tokens counted per chunk)."""

    name = "vllm-http"
    extra: ClassVar[dict[str, object]] = {"return_token_ids": True}

    def account(self, event: dict, got: int) -> tuple[int, bool]:
        ids = sum(len(choice.get("token_ids") or ()) for choice in event.get("choices") or ())
        return got + ids, ids > 0


class XinserveOpenAI(_StreamingCompletions):
    """xinserve's OpenAI-compatible front end with ``stream_options.include_usage`` (tokens
    counted from the usage chunk; the first token is the first chunk with text)."""

    name = "xinserve-openai"
    extra: ClassVar[dict[str, object]] = {"stream_options": {"include_usage": True}}

    def account(self, event: dict, got: int) -> tuple[int, bool]:
        usage = event.get("usage")
        if usage:
            got = int(usage["completion_tokens"])
        return got, any(choice.get("text") for choice in event.get("choices") or ())


class VllmGrpc:
    """vLLM's own gRPC server (``vllm serve --grpc``: smg-grpc-servicer's ``VllmEngine``
    service), streaming ``Generate`` with the prompt as text, blocking stub, one thread per
    stream. Its chunks carry token ids only (the servicer asks vLLM for ``detokenize=False``
    unless stop strings are set): it sends no text, unlike xinserve and the HTTP servers."""

    name = "vllm-grpc"

    def __init__(self, target: str, args: argparse.Namespace) -> None:
        import grpc

        sys.path.insert(0, str(args.smg_dir))
        from smg_grpc_proto import vllm_engine_pb2, vllm_engine_pb2_grpc

        self.args = args
        self.prompts = prompts()
        self.channel = grpc.insecure_channel(target)
        self.stub = vllm_engine_pb2_grpc.VllmEngineStub(self.channel)
        self.pb = vllm_engine_pb2
        self.seq = iter(range(10**9))
        self.lock = threading.Lock()

    def one(self, i: int) -> tuple[int, float]:
        with self.lock:
            rid = f"bench-{next(self.seq)}"
        req = self.pb.GenerateRequest(
            request_id=rid,
            text=self.prompts[i % len(self.prompts)],
            stream=True,
            sampling_params=self.pb.SamplingParams(
                temperature=0.0, max_tokens=self.args.max_tokens, ignore_eos=True, seed=self.args.seed
            ),
        )
        t0 = time.perf_counter()
        ttft = None
        n = 0
        for msg in self.stub.Generate(req, timeout=600):
            if msg.WhichOneof("response") == "chunk" and msg.chunk.token_ids:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                n += len(msg.chunk.token_ids)
        if n != self.args.max_tokens:
            raise RuntimeError(f"got {n} tokens, expected {self.args.max_tokens}")
        return n, ttft or float("nan")

    def run(self, n: int, total: int) -> tuple[int, list[float], list[str]]:
        return _closed_loop_threads(n, total, self.one)

    def close(self) -> None:
        self.channel.close()


# ---------------------------------------------------------------------------------------------
# measuring a client against a running server


def total_requests(n: int, args: argparse.Namespace) -> int:
    return max(args.min_requests, args.requests_per_worker * n)


def measure(client, tree: TreeCpu | None, peer: str, rnd: int, args: argparse.Namespace, log) -> list[Run]:
    runs = []
    # warm-up: every prompt once at the highest concurrency (fills the prefix cache alike for all)
    client.run(max(args.concurrency), max(64, max(args.concurrency)))
    for rep in range(args.reps):
        for n in args.concurrency:
            total = total_requests(n, args)
            la0 = os.getloadavg()
            before = tree.sample() if tree else {}
            # the load generator's CPU: a client in another process (Java) says its own
            client_cpu = getattr(client, "cpu_s", time.process_time)
            c0 = client_cpu()
            t0 = time.perf_counter()
            tokens, ttfts, errors = client.run(n, total)
            wall = time.perf_counter() - t0
            c1 = client_cpu()
            fe = eng = None
            procs: dict[str, float] = {}
            if tree:
                after = tree.sample()
                fe, eng = tree.split(before, after)
                procs = tree.per_process(before, after)
            run = Run(
                peer=peer,
                concurrency=n,
                round=rnd,
                rep=rep,
                requests=total,
                tokens=tokens,
                wall_s=wall,
                tok_s=tokens / wall,
                ttft_s=ttfts,
                loadavg_before=la0,
                loadavg_after=os.getloadavg(),
                client_cpu_s=c1 - c0,
                frontend_cpu_s=fe,
                engine_cpu_s=eng,
                errors=errors,
                procs_cpu_s=procs,
            )
            log(run)
            runs.append(run)
    return runs


# ---------------------------------------------------------------------------------------------
# servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess in its own session; stop() ends the whole tree."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self.log = log_path.open("wb")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.seen: set[int] = {self.proc.pid}

    def remember_tree(self) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            self.seen.update(p.pid for p in psutil.Process(self.proc.pid).children(recursive=True))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self, grace: float = 30.0) -> None:
        import psutil

        self.remember_tree()
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # engine processes that outlived their parent: only the ones this server started
        deadline = time.monotonic() + 10
        for pid in sorted(self.seen):
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                while p.is_running() and p.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                    time.sleep(0.2)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()
        self.log.close()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def start_xinserve(
    data_dir: Path, logdir: Path, timeout: float, minilm: bool = True, http_port: int | None = None
) -> tuple[Server, str]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    port = free_port()
    target = f"127.0.0.1:{port}"
    cmd = [
        "uv", "run", "--no-sync", "xinserve", "serve",
        "--listen", target, "--data-dir", str(data_dir), "--no-metrics", "--log-level", "warning",
        *(["--http-listen", f"127.0.0.1:{http_port}"] if http_port else []),
        "--builtin-model", MODEL_NAME, *(["--builtin-model", "all-MiniLM-L6-v2"] if minilm else []),
        "--dtype", ENGINE_ARGS["dtype"],
        "--max-num-seqs", str(ENGINE_ARGS["max_num_seqs"]),
        "--kv-cache-memory-bytes", str(ENGINE_ARGS["kv_cache_memory_bytes"]),
    ]  # fmt: skip
    # No --max-model-len: it would apply to the embedding model too (MiniLM allows 512) and fail it.
    # The built-in options give the generative model max_model_len 2048 and
    # max_num_batched_tokens 4096, the CPU profile enforce_eager (service/lifecycle/server.py,
    # engine_backends/platforms.py); the model list is checked below.
    server = Server(cmd, child_env(), logdir / f"xinserve-{port}.log")
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        while True:
            if not server.alive():
                raise RuntimeError(f"xinserve exited with {server.proc.returncode}:\n{server.tail()}")
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"xinserve not SERVING after {timeout:.0f} s:\n{server.tail()}")
            with contextlib.suppress(grpc.RpcError):
                r = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            time.sleep(0.5)
        from xinserve.v1 import model_pb2, model_pb2_grpc

        models = model_pb2_grpc.ModelServiceStub(ch).ListModels(model_pb2.ListModelsRequest(), timeout=10).models
    for m in models:
        print(
            f"  xinserve model {m.name}: state {model_pb2.ModelState.Name(m.state)}, "
            f"context {m.max_context_length}, dtype {m.dtype}",
            flush=True,
        )
    gen = [m for m in models if m.name == MODEL_NAME]
    if not gen or gen[0].max_context_length != ENGINE_ARGS["max_model_len"] or gen[0].dtype != ENGINE_ARGS["dtype"]:
        server.stop()
        raise RuntimeError(f"xinserve serves {MODEL_NAME} with other engine arguments: {gen}")
    server.remember_tree()
    return server, target


def start_vllm_http(model_dir: Path, logdir: Path, timeout: float) -> tuple[Server, str]:
    import urllib.request

    port = free_port()
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "vllm_serve_launcher.py"), "serve", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", MODEL_NAME,
        "--dtype", ENGINE_ARGS["dtype"],
        "--max-model-len", str(ENGINE_ARGS["max_model_len"]),
        "--max-num-seqs", str(ENGINE_ARGS["max_num_seqs"]),
        "--max-num-batched-tokens", str(ENGINE_ARGS["max_num_batched_tokens"]),
        "--kv-cache-memory-bytes", str(ENGINE_ARGS["kv_cache_memory_bytes"]),
        "--enforce-eager",
        "--disable-log-stats",  # as xinserve (disable_log_stats=True)
        "--uvicorn-log-level", "warning",
    ]  # fmt: skip
    server = Server(cmd, child_env(), logdir / f"vllm-serve-{port}.log")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if not server.alive():
            raise RuntimeError(f"vllm serve exited with {server.proc.returncode}:\n{server.tail()}")
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"vllm serve not healthy after {timeout:.0f} s:\n{server.tail()}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        time.sleep(0.5)
    server.remember_tree()
    return server, base


SMG_PACKAGES = ("smg-grpc-servicer==0.14.1", "smg-grpc-proto==0.4.28")


def ensure_smg(smg_dir: Path) -> None:
    """Install vLLM's gRPC servicer (``SMG_PACKAGES``) into ``smg_dir`` with ``--no-deps``:
    its own dependencies (grpcio, grpcio-health-checking, grpcio-reflection, protobuf, pyzmq,
    msgspec) are already in the project's environment, and its ``[vllm]`` extra would replace
    torch and vllm there, so the packages go to a separate directory put on the server's
    PYTHONPATH only."""
    if (smg_dir / "smg_grpc_servicer").is_dir() and (smg_dir / "smg_grpc_proto").is_dir():
        return
    cmd = ["uv", "pip", "install", "--python", sys.executable, "--target", str(smg_dir), "--no-deps", *SMG_PACKAGES]
    subprocess.run(cmd, check=True, cwd=ROOT)


def start_vllm_grpc(model_dir: Path, logdir: Path, timeout: float, smg_dir: Path) -> tuple[Server, str]:
    """``vllm serve MODEL --grpc`` (vLLM's launcher for smg-grpc-servicer), same engine args."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ensure_smg(smg_dir)
    port = free_port()
    target = f"127.0.0.1:{port}"
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "vllm_serve_launcher.py"), "serve", str(model_dir), "--grpc",
        "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", MODEL_NAME,
        "--dtype", ENGINE_ARGS["dtype"],
        "--max-model-len", str(ENGINE_ARGS["max_model_len"]),
        "--max-num-seqs", str(ENGINE_ARGS["max_num_seqs"]),
        "--max-num-batched-tokens", str(ENGINE_ARGS["max_num_batched_tokens"]),
        "--kv-cache-memory-bytes", str(ENGINE_ARGS["kv_cache_memory_bytes"]),
        "--enforce-eager",
        "--disable-log-stats",
    ]  # fmt: skip
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(smg_dir), *filter(None, [env.get("PYTHONPATH")])])
    server = Server(cmd, env, logdir / f"vllm-grpc-{port}.log")
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        while True:
            if not server.alive():
                raise RuntimeError(f"vllm serve --grpc exited with {server.proc.returncode}:\n{server.tail()}")
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"vllm serve --grpc not SERVING after {timeout:.0f} s:\n{server.tail()}")
            with contextlib.suppress(grpc.RpcError):
                r = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            time.sleep(0.5)
    server.remember_tree()
    return server, target


# ---------------------------------------------------------------------------------------------
# the in-process peer (runs in a child process: `serving_throughput.py _inproc ...`)


def inproc_child(args: argparse.Namespace) -> int:
    model_dir = model_dir_of(args.data_dir)
    import psutil
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    engine_args = AsyncEngineArgs(
        model=str(model_dir),
        served_model_name=MODEL_NAME,
        runner="generate",
        disable_log_stats=True,
        enable_log_requests=False,
        **ENGINE_ARGS,
    )
    llm = AsyncLLM.from_engine_args(engine_args)
    me = psutil.Process()
    texts = prompts()
    results: list[Run] = []
    seq = iter(range(10**9))

    async def main() -> None:
        tok = llm.get_tokenizer()
        params = SamplingParams(
            max_tokens=args.max_tokens,
            temperature=0.0,
            ignore_eos=True,
            seed=args.seed,
            output_kind=RequestOutputKind.DELTA,  # what xinserve's streaming path asks for
        )

        async def one(i: int) -> tuple[int, float]:
            t0 = time.perf_counter()
            # the same path as xinserve's engine backend: tokenize, render, generate
            ids = list(tok(texts[i % len(texts)], add_special_tokens=True)["input_ids"])
            (engine_input,) = await llm.renderer.render_cmpl_async([{"prompt_token_ids": ids}])
            ttft = None
            got = 0
            async for out in llm.generate(engine_input, params, f"bench-{next(seq)}"):
                for c in out.outputs:
                    if c.token_ids:
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                        got += len(c.token_ids)
            if got != args.max_tokens:
                raise RuntimeError(f"got {got} tokens, expected {args.max_tokens}")
            return got, ttft or float("nan")

        def engine_cpu() -> dict[int, float]:
            out = {}
            for p in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    out[p.pid] = t.user + t.system
            return out

        await _closed_loop_async(max(args.concurrency), max(64, max(args.concurrency)), one)  # warm-up
        for rep in range(args.reps):
            for n in args.concurrency:
                total = total_requests(n, args)
                la0 = os.getloadavg()
                e0 = engine_cpu()
                c0 = time.process_time()
                t0 = time.perf_counter()
                tokens, ttfts, errors = await _closed_loop_async(n, total, one)
                wall = time.perf_counter() - t0
                c1 = time.process_time()
                e1 = engine_cpu()
                run = Run(
                    peer="inproc",
                    concurrency=n,
                    round=args.round,
                    rep=rep,
                    requests=total,
                    tokens=tokens,
                    wall_s=wall,
                    tok_s=tokens / wall,
                    ttft_s=ttfts,
                    loadavg_before=la0,
                    loadavg_after=os.getloadavg(),
                    # client and engine front end share this process: all of it is "client" here
                    client_cpu_s=c1 - c0,
                    frontend_cpu_s=None,
                    engine_cpu_s=sum(t - e0.get(pid, 0.0) for pid, t in e1.items()),
                    errors=errors,
                )
                print("RUN " + json.dumps(asdict(run)), flush=True)
                results.append(run)

    try:
        asyncio.run(main())
    finally:
        llm.shutdown()
    return 0


def run_inproc(args: argparse.Namespace, rnd: int, logdir: Path, log) -> list[Run]:
    cmd = [
        sys.executable, __file__, "_inproc", "--model", MODEL_NAME,
        "--data-dir", str(args.data_dir), "--round", str(rnd),
        "--reps", str(args.reps), "--max-tokens", str(args.max_tokens), "--seed", str(args.seed),
        "--requests-per-worker", str(args.requests_per_worker), "--min-requests", str(args.min_requests),
        "--concurrency", *map(str, args.concurrency),
    ]  # fmt: skip
    runs = []
    log_path = logdir / f"inproc-round{rnd}.log"
    with log_path.open("w") as errlog:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=errlog, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("RUN "):
                    d = json.loads(line[4:])
                    d["loadavg_before"] = tuple(d["loadavg_before"])
                    d["loadavg_after"] = tuple(d["loadavg_after"])
                    run = Run(**d)
                    log(run)
                    runs.append(run)
            proc.wait(args.start_timeout + 600)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"in-process peer failed ({proc.returncode}):\n{tail}")
    return runs


# ---------------------------------------------------------------------------------------------
# report


BASELINES = ("inproc", "vllm-http", "vllm-grpc", "vllm-grpc-raw", "vllm-http-java")
"""The peers every other row is divided by: the in-process ceiling, and the two servers a
user would pick instead of xinserve."""


def summarize(runs: list[Run], concurrency: list[int]) -> dict[str, Any]:
    peers = list(dict.fromkeys(r.peer for r in runs))  # in the order they were measured
    table: dict[str, Any] = {}
    for n in concurrency:
        row: dict[str, Any] = {}
        for p in peers:
            rs = [r for r in runs if r.peer == p and r.concurrency == n]
            if not rs:
                continue
            ttft = [t for r in rs for t in r.ttft_s]
            walls = sum(r.wall_s for r in rs)
            tokens = sum(r.tokens for r in rs)
            procs: dict[str, float] = {}
            for r in rs:
                for k, v in r.procs_cpu_s.items():
                    procs[k] = procs.get(k, 0.0) + v
            row[p] = {
                "runs": len(rs),
                "tok_s_median": statistics.median(r.tok_s for r in rs),
                "tok_s_min": min(r.tok_s for r in rs),
                "tok_s_max": max(r.tok_s for r in rs),
                "ttft_p50_ms": 1000 * pct(ttft, 0.5),
                "ttft_p99_ms": 1000 * pct(ttft, 0.99),
                "client_cpu_cores": sum(r.client_cpu_s for r in rs) / walls,
                # CPU seconds of the load generator's process per 1,000 generated tokens
                "client_cpu_s": round(sum(r.client_cpu_s for r in rs), 3),
                "client_cpu_s_per_1k_tokens": (
                    1000 * sum(r.client_cpu_s for r in rs) / tokens if tokens else float("nan")
                ),
                "frontend_cpu_cores": (
                    sum(r.frontend_cpu_s or 0 for r in rs) / walls if rs[0].frontend_cpu_s is not None else None
                ),
                "engine_cpu_cores": (
                    sum(r.engine_cpu_s or 0 for r in rs) / walls if rs[0].engine_cpu_s is not None else None
                ),
                # CPU seconds per process of the server's tree over all repetitions, and cores
                "procs_cpu_s": {k: round(v, 2) for k, v in procs.items()},
                "procs_cpu_cores": {k: round(v / walls, 3) for k, v in procs.items()},
                "loadavg1_median": statistics.median(r.loadavg_before[0] for r in rs),
                "loadavg1_after_median": statistics.median(r.loadavg_after[0] for r in rs),
                "errors": sum(len(r.errors) for r in rs),
            }
        for p in peers:
            for base in BASELINES:
                if p in row and base in row and p != base:
                    row[f"{p}/{base}"] = row[p]["tok_s_median"] / row[base]["tok_s_median"]
        table[str(n)] = row
    return table


def print_table(table: dict[str, Any]) -> None:
    def cores(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    print()
    print(
        "| N | peer | tok/s median (min-max) | TTFT p50 ms | TTFT p99 ms | "
        + " | ".join(f"÷ {b}" for b in BASELINES)
        + " "
        "| client CPU s (per 1k tokens) | load1 before/after | CPU cores client / front end / engine "
        "| CPU s per server process | runs |"
    )
    print("|---|---|---:|---:|---:|" + "---:|" * len(BASELINES) + "---:|---|---|---|---:|")
    for n, row in table.items():
        for p, s in row.items():
            if "/" in p:
                continue
            ratios = " | ".join("-" if row.get(f"{p}/{b}") is None else f"{row[f'{p}/{b}']:.2f}" for b in BASELINES)
            procs = ", ".join(f"{k}: {v:.2f}" for k, v in sorted(s["procs_cpu_s"].items(), key=lambda kv: -kv[1]))
            print(
                f"| {n} | {p} | {s['tok_s_median']:.0f} ({s['tok_s_min']:.0f}-{s['tok_s_max']:.0f}) "
                f"| {s['ttft_p50_ms']:.1f} | {s['ttft_p99_ms']:.1f} | {ratios} "
                f"| {s['client_cpu_s']:.2f} ({s['client_cpu_s_per_1k_tokens']:.3f}) "
                f"| {s['loadavg1_median']:.1f}/{s['loadavg1_after_median']:.1f} "
                f"| {cores(s['client_cpu_cores'])} / {cores(s['frontend_cpu_cores'])} / {cores(s['engine_cpu_cores'])} "
                f"| {procs or '-'} | {s['runs']}{' ERR' + str(s['errors']) if s['errors'] else ''} |"
            )


XINSERVE_CLIENTS = {
    "sync": XinserveSync,
    "aio": XinserveAio,
    "java": XinserveJava,
    "raw": XinserveRaw,
    "openai": XinserveOpenAI,
    "javahttp": XinserveJavaHttp,
}
PEERS = ("inproc", "xinserve-tiny", "xinserve", "vllm-http", "vllm-grpc")


def run_peer(
    peer: str, rnd: int, args: argparse.Namespace, model_dir: Path, logdir: Path, clients: list[str], log
) -> list[Run]:
    """Start one peer, measure it, stop it. ``xinserve-tiny`` loads only the measured model,
    ``xinserve`` the default two (the measured one and all-MiniLM-L6-v2, idle); each is
    measured with every client in ``clients`` (its runs are labelled ``<peer>-<client>``)."""
    t0 = time.monotonic()
    if peer == "inproc":
        return run_inproc(args, rnd, logdir, log)
    if peer in ("xinserve", "xinserve-tiny"):
        minilm = peer == "xinserve" and not args.no_minilm
        http_port = free_port() if {"openai", "javahttp"} & set(clients) else None
        server, target = start_xinserve(args.data_dir, logdir, args.start_timeout, minilm, http_port)
        print(f"{peer} SERVING on {target} after {time.monotonic() - t0:.0f} s", flush=True)
        runs: list[Run] = []
        try:
            tree = TreeCpu(server.proc.pid, "xinserve serve")
            for kind in clients:
                where = f"http://127.0.0.1:{http_port}" if kind in ("openai", "javahttp") else target
                client = XINSERVE_CLIENTS[kind](where, args)
                try:
                    runs += measure(client, tree, f"{peer}-{kind}", rnd, args, log)
                finally:
                    client.close()
        finally:
            server.stop()
        return runs
    if peer in ("http", "vllm-http"):
        server, base = start_vllm_http(model_dir, logdir, args.start_timeout)
        print(f"vllm serve healthy on {base} after {time.monotonic() - t0:.0f} s", flush=True)
        try:
            tree = TreeCpu(server.proc.pid, "vllm_serve_launcher")
            runs = []
            # the aiohttp client always, the same JVM client as xinserve's ``javahttp`` rows when asked
            for make in (VllmHttp, VllmHttpJava) if "javahttp" in clients else (VllmHttp,):
                client = make(base, args)
                try:
                    runs += measure(client, tree, client.name, rnd, args, log)
                finally:
                    client.close()
            return runs
        finally:
            server.stop()
    if peer == "vllm-grpc":
        server, target = start_vllm_grpc(model_dir, logdir, args.start_timeout, args.smg_dir)
        print(f"vllm serve --grpc SERVING on {target} after {time.monotonic() - t0:.0f} s", flush=True)
        try:
            tree = TreeCpu(server.proc.pid, "vllm_serve_launcher")
            runs = []
            # the Python client always (the user-facing row), the same grpc-java client as
            # xinserve's ``raw`` rows when that client is asked for
            for make in (VllmGrpc, VllmGrpcRaw) if "raw" in clients else (VllmGrpc,):
                grpc_client = make(target, args)
                try:
                    runs += measure(grpc_client, tree, grpc_client.name, rnd, args, log)
                finally:
                    grpc_client.close()
            return runs
        finally:
            server.stop()
    raise ValueError(f"unknown peer {peer!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="all", choices=("all", "_inproc"), help=argparse.SUPPRESS)
    ap.add_argument("--model", default="xinserve-tiny-llama", choices=sorted(MODEL_ENGINE_ARGS), help="measured model")
    ap.add_argument(
        "--no-minilm",
        action="store_true",
        help="xinserve loads only the measured model (by default also all-MiniLM-L6-v2, as `xinserve serve` does)",
    )
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated, of: " + ", ".join(PEERS))
    ap.add_argument(
        "--clients",
        default="sync,openai",
        help="xinserve clients: sync (blocking grpc, threads), aio (grpc.aio), java (grpc-java, the Java SDK, "
        "threads: benchmarks/java_client's LoadGen), raw (plain grpc-java, RawStreamGen: the same client for "
        "vllm-grpc too, which then also gets a vllm-grpc-raw row), javahttp (java.net.http against the OpenAI front "
        "end, HttpStreamGen; vllm-http then also gets a vllm-http-java row), openai (its HTTP front end, aiohttp)",
    )
    ap.add_argument("--java", default="java", help="the JVM that runs the java client")
    ap.add_argument(
        "--java-opts",
        default="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        help="JVM options of the java client (default: C1 only, serial GC: least JIT CPU on few cores)",
    )
    ap.add_argument(
        "--smg-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "xinserve-bench-smg",
        help="where vLLM's gRPC servicer is installed (--no-deps) for the vllm-grpc peer",
    )
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each configuration per round")
    ap.add_argument("--rounds", type=int, default=1, help="start every peer again this many times")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--requests-per-worker", type=int, default=4)
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "xinserve-bench-data")
    ap.add_argument("--start-timeout", type=float, default=600, help="seconds a server may take to start")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--summarize", type=Path, nargs="+", metavar="JSON", help="only print the table of earlier runs")
    args = ap.parse_args()
    args.concurrency = sorted(set(args.concurrency))
    select_model(args.model)

    if args.summarize:
        runs = []
        for path in args.summarize:
            for d in json.loads(path.read_text())["runs"]:
                d["loadavg_before"], d["loadavg_after"] = tuple(d["loadavg_before"]), tuple(d["loadavg_after"])
                runs.append(Run(**d))
        print_table(summarize(runs, sorted({r.concurrency for r in runs})))
        return 0

    if args.mode == "_inproc":
        return inproc_child(args)

    model_dir = model_dir_of(args.data_dir)
    logdir = Path(tempfile.mkdtemp(prefix="serving-bench-"))
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    runs: list[Run] = []
    failures: list[str] = []
    started = time.time()

    def log(run: Run) -> None:
        print(
            f"[{time.strftime('%H:%M:%S')}] round {run.round} {run.peer:13s} N={run.concurrency:<3d} rep {run.rep} "
            f"{run.tok_s:8.0f} tok/s  TTFT p50 {1000 * pct(run.ttft_s, 0.5):7.1f} ms p99 "
            f"{1000 * pct(run.ttft_s, 0.99):7.1f} ms  client CPU {run.client_cpu_s / run.wall_s:4.2f} cores "
            f"{1000 * run.client_cpu_s / max(run.tokens, 1):.3f} s/1k tok  "
            f"load {run.loadavg_before[0]:.1f}" + (f"  ERRORS {run.errors[:2]}" if run.errors else ""),
            flush=True,
        )

    print(f"model {model_dir}; engine args {ENGINE_ARGS}; logs in {logdir}", flush=True)
    for rnd in range(args.rounds):
        order = peers if rnd % 2 == 0 else list(reversed(peers))
        for peer in order:
            try:
                runs += run_peer(peer, rnd, args, model_dir, logdir, clients, log)
            except Exception as exc:  # record it, go on with the other peers
                failures.append(f"round {rnd} {peer}: {type(exc).__name__}: {str(exc)[-500:]}")
                print(f"PEER FAILED: {failures[-1]}", flush=True)

    table = summarize(runs, args.concurrency)
    print(f"\nfinished in {time.time() - started:.0f} s; {os.cpu_count()} CPUs; load now {os.getloadavg()}")
    print_table(table)
    for f in failures:
        print(f"FAILED: {f}")
    if args.json_out:
        args.json_out.write_text(
            json.dumps(
                {
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                    "machine": {
                        "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "platform": platform.platform(),
                    },
                    "model": MODEL_NAME,
                    "engine_args": ENGINE_ARGS,
                    "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "summary": table,
                    "failures": failures,
                    "runs": [asdict(r) for r in runs],
                },
                indent=1,
            )
        )
        print(f"wrote {args.json_out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
