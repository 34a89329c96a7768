"""Reception of OpenAI HTTP request bodies, before their calls are admitted.

The HTTP front end reads a POST body in full before admission, so that a slow client holds no
admission slot. Reception itself is bounded here:

- slots: at most ``admission.max_in_flight + admission.max_queue`` bodies at once (so the
  memory buffered before admission stays bounded by that many ``limits.max_http_body_bytes``),
  of which at most ``limits.max_http_bodies_per_peer`` from one client address and, for a
  caller identified by a token or certificate before its body (anonymous callers share their
  peer's bound only), ``limits.max_http_bodies_per_principal`` for one principal. One more is
  RESOURCE_EXHAUSTED (HTTP 429 with ``Retry-After``), reasons ``BODY_RECEPTION_FULL``,
  ``BODY_RECEPTION_PEER_SHARE``, ``BODY_RECEPTION_PRINCIPAL_SHARE``;
- a minimum upload rate, as Apache httpd's ``mod_reqtimeout`` (``body=…,MinRate=…``) does: a
  body must arrive within ``limits.http_body_rate_grace_s`` seconds plus one second per
  ``limits.http_body_min_rate_bytes_per_s`` bytes received, and within
  ``limits.http_body_timeout_s`` in all; a slower one is DEADLINE_EXCEEDED (HTTP 408), reason
  ``REQUEST_BODY_TOO_SLOW`` (``REQUEST_TIMEOUT`` past the overall timeout).

Bodies being received are the gauge ``xinserve_http_bodies_receiving``; each refused body is
counted in ``xinserve_http_body_refusals_total{reason}``. Refused bodies are audited in
aggregate: per client address and reason, the first refusal of each
``limits.http_refusal_audit_interval_s`` gets its audit record, carrying
``similar_refusals_not_audited`` (how many of the same kind from that address went unrecorded
since the last one); the others are counted and logged at most once per
``service.core.logs.REFUSAL_LOG_INTERVAL_S`` per reason (as connection refusals are), not audited one
by one, so an attacker cannot multiply audit records for free.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterable, Iterator
from contextlib import contextmanager

import grpc

from service.core import metrics
from service.core.logs import REFUSAL_LOG_INTERVAL_S, get_logger
from service.core.reasons import Reason
from service.core.status import RpcError

log = get_logger("xinserve.http")

MAX_TRACKED_PEERS = 65536
"""Most (address, reason) pairs whose audit aggregation is tracked at once; past it, refusals
of addresses not tracked are aggregated together under ``*``."""


class BodyReception:
    """Slots for bodies being received and the aggregation of their refusals' audit records.
    All methods run on the event loop (no locks needed).

    Args:
        max_total: bodies at once (``max_in_flight + max_queue``).
        max_per_peer: bodies at once from one client address.
        max_per_principal: bodies at once of one identified principal.
        retry_after_s: delay suggested with a refusal (RetryInfo, ``Retry-After``).
        audit_interval_s: seconds per audited refusal, per client address and reason.
    """

    def __init__(
        self,
        max_total: int,
        max_per_peer: int,
        max_per_principal: int,
        retry_after_s: float,
        audit_interval_s: float,
    ) -> None:
        self.max_total = max_total
        self.max_per_peer = max_per_peer
        self.max_per_principal = max_per_principal
        self.retry_after_s = retry_after_s
        self.audit_interval_s = audit_interval_s
        self.receiving = 0
        self.by_peer: Counter[str] = Counter()
        self.by_principal: Counter[str] = Counter()
        # (address, reason) -> (time of the last audited refusal, refusals not audited since)
        self._audited: dict[tuple[str, str], tuple[float, int]] = {}
        self._last_log: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()

    def _busy(self, reason: Reason, what: str, limit: int) -> RpcError:
        return RpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"server busy: {what}; retry later",
            reason,
            retry_after_s=self.retry_after_s,
            metadata={"limit": str(limit)},
        )

    @contextmanager
    def slot(self, peer: str, principal: str | None) -> Iterator[None]:
        """Hold one reception slot for a body from ``peer`` (a client address) of ``principal``
        (None for an anonymous caller) while it is received.

        Raises:
            RpcError: RESOURCE_EXHAUSTED with RetryInfo, reason ``BODY_RECEPTION_PEER_SHARE``,
                ``BODY_RECEPTION_PRINCIPAL_SHARE`` or ``BODY_RECEPTION_FULL``.
        """
        if self.by_peer[peer] >= self.max_per_peer:
            raise self._busy(
                Reason.BODY_RECEPTION_PEER_SHARE,
                f"{self.max_per_peer} request bodies from this address",
                self.max_per_peer,
            )
        if principal is not None and self.by_principal[principal] >= self.max_per_principal:
            raise self._busy(
                Reason.BODY_RECEPTION_PRINCIPAL_SHARE,
                f"{self.max_per_principal} request bodies of this caller",
                self.max_per_principal,
            )
        if self.receiving >= self.max_total:
            raise self._busy(
                Reason.BODY_RECEPTION_FULL, f"{self.receiving} request bodies being received", self.max_total
            )
        self.receiving += 1
        self.by_peer[peer] += 1
        if principal is not None:
            self.by_principal[principal] += 1
        metrics.HTTP_BODIES_RECEIVING.set(self.receiving)
        try:
            yield
        finally:
            self.receiving -= 1
            _release(self.by_peer, peer)
            if principal is not None:
                _release(self.by_principal, principal)
            metrics.HTTP_BODIES_RECEIVING.set(self.receiving)

    def refused(self, peer: str, reason: str) -> int | None:
        """Count a refused body of ``peer`` and decide its audit record: None when it is not
        audited (one of the same kind from that address was, within the interval), else how
        many of that kind from that address went unaudited since the last audited one."""
        metrics.HTTP_BODY_REFUSALS.labels(reason.lower()).inc()
        now = time.monotonic()
        key = (peer, reason)
        if key not in self._audited and len(self._audited) >= MAX_TRACKED_PEERS:
            self._audited = {k: v for k, v in self._audited.items() if now - v[0] < self.audit_interval_s}
            if len(self._audited) >= MAX_TRACKED_PEERS:
                key = ("*", reason)
        last, skipped = self._audited.get(key, (-self.audit_interval_s, 0))
        if now - last < self.audit_interval_s:
            self._audited[key] = (last, skipped + 1)
            self._log(reason)
            return None
        self._audited[key] = (now, 0)
        return skipped

    def _log(self, reason: str) -> None:
        now = time.monotonic()
        self._unlogged[reason] += 1
        if now - self._last_log.get(reason, -REFUSAL_LOG_INTERVAL_S) >= REFUSAL_LOG_INTERVAL_S:
            log.warning("http_body_refusals_not_audited", reason=reason.lower(), count=self._unlogged.pop(reason))
            self._last_log[reason] = now


def _release(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]


async def receive_body(
    chunks: AsyncIterable[bytes], limit: int, timeout_s: float, min_rate: int, grace_s: float
) -> bytes:
    """The body's bytes from ``chunks``: at most ``limit`` bytes, in full within ``timeout_s``
    seconds, and within ``grace_s`` seconds plus one second per ``min_rate`` bytes received
    (``min_rate`` 0: no minimum rate).

    Raises:
        RpcError: RESOURCE_EXHAUSTED/``REQUEST_TOO_LARGE``, DEADLINE_EXCEEDED/``REQUEST_TIMEOUT``
            or DEADLINE_EXCEEDED/``REQUEST_BODY_TOO_SLOW``.
        Whatever ``chunks`` raises (e.g. Starlette's ``ClientDisconnect``).
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    overall = start + timeout_s
    body = bytearray()
    stream = chunks.__aiter__()
    while True:
        by_rate = start + grace_s + len(body) / min_rate if min_rate else overall
        deadline = min(overall, by_rate)
        step = asyncio.ensure_future(stream.__anext__())
        try:
            done, _ = await asyncio.wait({step}, timeout=max(0.0, deadline - loop.time()))
        finally:
            if not step.done():
                step.cancel()
                await asyncio.gather(step, return_exceptions=True)
        if not done:
            if by_rate < overall:
                raise RpcError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the request body arrived slower than {min_rate} bytes per second "
                    f"(after the first {grace_s:g} seconds)",
                    Reason.REQUEST_BODY_TOO_SLOW,
                    metadata={"min_rate_bytes_per_s": str(min_rate), "grace_s": f"{grace_s:g}"},
                )
            raise RpcError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the request body was not received within {timeout_s:g} seconds",
                Reason.REQUEST_TIMEOUT,
                metadata={"timeout_s": f"{timeout_s:g}"},
            )
        try:
            chunk = step.result()
        except StopAsyncIteration:
            return bytes(body)
        body += chunk
        if len(body) > limit:
            raise RpcError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the request body exceeds {limit} bytes",
                Reason.REQUEST_TOO_LARGE,
                metadata={"limit_bytes": str(limit)},
            )
