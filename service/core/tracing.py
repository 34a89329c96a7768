"""W3C Trace Context (``traceparent``/``tracestate``) of a call, read with OpenTelemetry's
``TraceContextTextMapPropagator`` and passed on to the engine.

Both front ends hand the call's headers (gRPC metadata or HTTP headers, lower-case names)
to ``trace_context``; an invalid ``traceparent`` (W3C Trace Context §3.2: version ``ff``,
all-zero trace or parent id, malformed fields) is ignored, as the specification requires.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


def trace_context(headers: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """The trace id (32 lower-case hex digits) and the headers to pass to the engine.

    Args:
        headers: the call's text headers, lower-case names, first value of each.

    Returns:
        ``(trace_id, {"traceparent": ..., "tracestate": ...})`` for a valid context, else
        ``(None, {})``. The returned headers are re-rendered by the propagator.
    """
    value = headers.get("traceparent")
    if not value:
        return None, {}
    carrier = {"traceparent": value.strip().lower()}
    if headers.get("tracestate"):
        carrier["tracestate"] = headers["tracestate"]
    context = _PROPAGATOR.extract(carrier)
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return None, {}
    out: dict[str, str] = {}
    _PROPAGATOR.inject(out, context)
    return trace.format_trace_id(span_context.trace_id), out


def trace_id_from(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header, or None if absent or invalid."""
    return trace_context({"traceparent": traceparent} if traceparent else {})[0]
