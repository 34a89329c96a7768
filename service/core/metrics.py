"""Prometheus metrics (names with units, per the Prometheus naming guide)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine_backends.protocol import Engine

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

REQUESTS = Counter(
    "xinserve_requests",
    "Calls handled, by method, gRPC status code and front end (grpc, openai).",
    ["method", "code", "front_end"],
)
TLS_HANDSHAKE_FAILURES = Counter(
    "xinserve_tls_handshake_failures",
    "TLS handshakes the server refused (e.g. a client certificate that is missing, expired or "
    "from a foreign CA), by front end and OpenSSL reason. Only the HTTPS front end can observe them.",
    ["front_end", "reason"],
)
HTTP_CONNECTIONS_REFUSED = Counter(
    "xinserve_http_connections_refused",
    "OpenAI HTTP connections closed before any call was made, by reason: header_too_large (431), "
    "header_timeout (408), connection_limit and peer_connection_limit (503), accept_out_of_resources "
    "(accept() failed for want of descriptors or memory).",
    ["reason"],
)
REQUEST_DURATION = Histogram(
    "xinserve_request_duration_seconds",
    "Call duration, by method and front end (grpc, openai).",
    ["method", "front_end"],
    buckets=_LATENCY_BUCKETS,
)
TIME_TO_FIRST_TOKEN = Histogram(
    "xinserve_time_to_first_token_seconds",
    "From call start to the first generated token, by model.",
    ["model"],
    buckets=_LATENCY_BUCKETS,
)
INTER_TOKEN_LATENCY = Histogram(
    "xinserve_inter_token_latency_seconds",
    "Time between streamed token deltas, by model.",
    ["model"],
    buckets=_TOKEN_BUCKETS,
)
PROMPT_TOKENS = Counter("xinserve_prompt_tokens", "Prompt tokens processed, by model.", ["model"])
GENERATION_TOKENS = Counter("xinserve_generation_tokens", "Tokens generated, by model.", ["model"])
HTTP_BODIES_RECEIVING = Gauge(
    "xinserve_http_bodies_receiving",
    "OpenAI HTTP request bodies being received before their calls are admitted.",
)
HTTP_BODY_REFUSALS = Counter(
    "xinserve_http_body_refusals",
    "OpenAI HTTP request bodies refused while or before being received, by reason (the ErrorInfo reason "
    "in lower case): body_reception_full, body_reception_peer_share, body_reception_principal_share (429), "
    "request_timeout, request_body_too_slow (408), request_too_large (413), client_disconnected.",
    ["reason"],
)
IN_FLIGHT = Gauge("xinserve_in_flight_requests", "Inference calls admitted and running.")
QUEUE_LENGTH = Gauge("xinserve_queue_length", "Inference calls waiting for admission.")


class EngineLoadCollector(Collector):
    """Per-model engine load, read from the engines when Prometheus scrapes.

    ``xinserve_engine_running_requests``, ``xinserve_engine_waiting_requests`` and
    ``xinserve_kv_cache_usage_ratio`` (0..1), labelled ``model``: the same figures as
    ``ServerService.GetLoad`` (``Engine.load()``), for every model that is ready.
    """

    def __init__(self) -> None:
        self.source: Callable[[], Sequence[tuple[str, Engine]]] = list

    def collect(self) -> Iterator[Metric]:
        running = GaugeMetricFamily(
            "xinserve_engine_running_requests", "Requests running in the engine, by model.", labels=["model"]
        )
        waiting = GaugeMetricFamily(
            "xinserve_engine_waiting_requests", "Requests queued in the engine, by model.", labels=["model"]
        )
        usage = GaugeMetricFamily(
            "xinserve_kv_cache_usage_ratio", "Fraction of the KV cache in use, by model.", labels=["model"]
        )
        for name, engine in self.source():
            load = engine.load()
            running.add_metric([name], load.running)
            waiting.add_metric([name], load.waiting)
            usage.add_metric([name], load.kv_cache_usage)
        yield from (running, waiting, usage)


ENGINE_LOAD = EngineLoadCollector()
"""Set ``ENGINE_LOAD.source`` to the runtime's ready engines (``Runtime.ready_engines``)."""
REGISTRY.register(ENGINE_LOAD)
