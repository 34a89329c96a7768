"""Ships anchor messages (``audit.anchors``) to a syslog collector: RFC 5424 over TCP or TLS.

Framing is octet counting (``MSG-LEN SP SYSLOG-MSG``, RFC 6587 section 3.4.1 and RFC 5425
section 4.3), which rsyslog's ``imtcp`` and syslog-ng's ``network()`` source accept on the
same port as LF-terminated messages. Messages leave in the order they were offered. A session
that breaks (a failed write, or the collector closing it or refusing it with a TLS alert, which
a reader on the otherwise silent connection notices) is reopened, and the last messages written
on it (up to 256) are sent again with what was still buffered: syslog over TCP has no
application acknowledgement, so a collector may see a message twice (``verify`` takes
duplicates as one), and what a collector accepted but lost in a crash beyond those is not
noticed here (RELP would; docs/audit.md says what this means).

The buffer is bounded (``buffer_limit``). When it is full the oldest message is dropped and
counted; the owner (``AuditLog``) decides, per ``failure_policy``, whether calls go on
(``log_and_continue``) or are refused (``fail_closed``, :attr:`SyslogShipper.full`), and
records the collector going down, coming back and every loss as audit events.

Python's ``logging.handlers.SysLogHandler`` (RFC 3164, no TLS) and logging-handler packages
drop messages on a failed write; fail-closed needs to know, so the transport is here.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import datetime
import json
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from audit import metrics
from audit.anchors import checkpoint_message, record_message
from audit.chain import SignedCheckpoint
from audit.config import SyslogSettings, TsaSettings

log = structlog.get_logger("xinserve.audit")

SD_ID = "xinserve@32473"
"""Structured-data id: ``name@<private enterprise number>``; 32473 is the number RFC 5612
reserves for documentation, to be replaced by the operator's own where a SIEM needs it."""

SEVERITY_ALERT = 1
SEVERITY_NOTICE = 5
SEVERITY_INFO = 6

HEADROOM = 64
"""Messages kept beyond ``buffer_limit`` before anything is dropped: room for the checkpoints and
shipping events written while new records are refused (``fail_closed``) once the limit is reached."""

UNCONFIRMED = 256
"""Messages written on the current session that are resent if it breaks (syslog over TCP has no
acknowledgement, so what the collector lost with a dropped session cannot be known)."""

StateCallback = Callable[[str, dict[str, Any]], Awaitable[None]]


@dataclass(slots=True)
class _Message:
    msgid: str
    time_ms: int
    sd: dict[str, str]
    body: dict[str, Any]
    severity: int
    stamp_payload: bytes | None = None
    """A checkpoint payload that still needs its RFC 3161 token before it is sent."""


def _sd_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def format_rfc5424(msg: _Message, *, facility: int, hostname: str, app_name: str, procid: str) -> bytes:
    """``<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID [SD] MSG`` (RFC 5424 section 6)."""
    ts = datetime.datetime.fromtimestamp(msg.time_ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")
    ts = ts.replace("+00:00", "Z")
    params = " ".join(f'{k}="{_sd_escape(v)}"' for k, v in msg.sd.items())
    sd = f"[{SD_ID} {params}]" if params else "-"
    body = json.dumps(msg.body, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return f"<{facility * 8 + msg.severity}>1 {ts} {hostname} {app_name} {procid} {msg.msgid} {sd} {body}".encode()


def _header_token(value: str, limit: int) -> str:
    """A PRINTUSASCII header field without spaces (RFC 5424 section 6.2), ``-`` when empty."""
    clean = "".join(ch if "!" <= ch <= "~" else "_" for ch in value)[:limit]
    return clean or "-"


class SyslogShipper:
    """Sends anchor messages to one collector from a background task. Create, then :meth:`start`."""

    def __init__(
        self,
        settings: SyslogSettings,
        *,
        tsa: TsaSettings | None = None,
        on_state: StateCallback | None = None,
        hostname: str | None = None,
    ) -> None:
        self.settings = settings
        self._tsa = tsa
        self._on_state = on_state
        self._hostname = _header_token(hostname or socket.gethostname(), 255)
        self._procid = str(os.getpid())
        self._buffer: collections.deque[_Message] = collections.deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._broken: BaseException | None = None
        self._unconfirmed: collections.deque[_Message] = collections.deque(maxlen=UNCONFIRMED)
        self._up = False
        self._down = False
        self.lost = 0
        """Messages dropped because the buffer was full (since start)."""
        self._unreported_lost = 0
        self.sent = 0
        self.last_error: str | None = None
        self.timestamp_failures = 0
        self.last_timestamp_error: str | None = None
        self._ssl = self._ssl_context() if settings.tls else None

    # ---------------------------------------------------------------- state

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def full(self) -> bool:
        """The buffer is at its limit: under ``fail_closed`` the log refuses new records."""
        return len(self._buffer) >= self.settings.buffer_limit

    @property
    def connected(self) -> bool:
        return self._up

    # ---------------------------------------------------------------- offering

    def offer_checkpoint(self, cp: SignedCheckpoint) -> None:
        """Queue a signed checkpoint (time-stamped first when a TSA is configured)."""
        c = cp.checkpoint
        self._offer(
            _Message(
                msgid="checkpoint",
                time_ms=c.time_ms,
                sd={"chain": c.chain, "n": str(c.n), "kind": str(c.kind), "tree_size": str(c.tree_size)},
                body=checkpoint_message(cp),
                severity=SEVERITY_NOTICE,
                stamp_payload=cp.payload if self._tsa is not None else None,
            )
        )

    def offer_record(self, chain: str, seq: int, time_ms: int, chain_hash: bytes, body: bytes) -> None:
        """Queue one record (only when ``ship_records`` is on)."""
        self._offer(
            _Message(
                msgid="record",
                time_ms=time_ms,
                sd={"chain": chain, "seq": str(seq)},
                body=record_message(chain, seq, chain_hash, body),
                severity=SEVERITY_INFO,
            )
        )

    def offer_alert(self, event: str, detail: dict[str, Any], time_ms: int) -> None:
        """Queue an alert (severity 1, msgid ``alert``) about the log itself, for events the
        log cannot record (its store was deleted). Body ``{"alert": event, **detail}``;
        ``audit verify`` ignores it as no anchor."""
        self._offer(
            _Message(
                msgid="alert",
                time_ms=time_ms,
                sd={"event": event},
                body={"alert": event, **detail},
                severity=SEVERITY_ALERT,
            )
        )

    def _offer(self, msg: _Message) -> None:
        cap = self.settings.buffer_limit + HEADROOM
        while len(self._buffer) >= cap:
            self._drop_one()
        self._buffer.append(msg)
        metrics.ANCHORS_BUFFERED.set(len(self._buffer))
        self._wake.set()

    def _drop_one(self) -> None:
        """Drop the oldest record message, or the oldest message when only checkpoints are left."""
        for i, m in enumerate(self._buffer):
            if m.msgid == "record" and i > 0:
                del self._buffer[i]
                break
        else:
            self._buffer.popleft()
        self.lost += 1
        self._unreported_lost += 1
        metrics.ANCHORS_LOST.inc()

    # ---------------------------------------------------------------- running

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="audit-syslog-shipper")

    async def flush(self, timeout_s: float) -> bool:
        """Wait until the buffer is empty (or ``timeout_s``); ``True`` if everything was sent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._buffer and loop.time() < deadline:
            self._wake.set()
            await asyncio.sleep(0.02)
        return not self._buffer

    async def close(self, timeout_s: float | None = None) -> None:
        """Send what is buffered (up to ``timeout_s``, default ``flush_timeout_s``), then stop."""
        if self._task is None:
            return
        if timeout_s is None:
            timeout_s = self.settings.flush_timeout_s
        if self._up or self._buffer:
            await self.flush(timeout_s)
        await _cancel_and_wait(self._task)
        self._task = None
        await self._disconnect()
        if self._buffer:
            log.error("audit_syslog_unsent_at_close", unsent=len(self._buffer))

    async def _run(self) -> None:
        retry = self.settings.retry_interval_s
        while True:
            if self._broken is not None:
                broken, self._broken = self._broken, None
                await self._lost_connection(broken)
                if self._buffer:
                    await asyncio.sleep(retry)
                continue
            if not self._buffer:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._writer is None:
                try:
                    await self._connect()
                except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
                    await self._went_down(exc)
                    await asyncio.sleep(retry)
                    continue
                await self._came_up()
            msg = self._buffer[0]
            if msg.stamp_payload is not None:
                await self._stamp(msg)
            frame = self._frame(msg)
            writer = self._writer
            if writer is None:
                continue
            try:
                writer.write(frame)
                await asyncio.wait_for(writer.drain(), self.settings.connect_timeout_s * 4)
            except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError) as exc:
                await self._lost_connection(exc)
                await asyncio.sleep(retry)
                continue
            if self._buffer and self._buffer[0] is msg:
                self._buffer.popleft()
            self._unconfirmed.append(msg)
            self.sent += 1
            metrics.ANCHORS_SENT.inc()
            metrics.ANCHORS_BUFFERED.set(len(self._buffer))

    async def _lost_connection(self, exc: BaseException) -> None:
        """The session ended: resend what was written on it lately (it may not have arrived)."""
        await self._disconnect()
        self._buffer.extendleft(reversed(self._unconfirmed))
        self._unconfirmed.clear()
        metrics.ANCHORS_BUFFERED.set(len(self._buffer))
        await self._went_down(exc)

    async def _watch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A collector sends nothing: end of stream or an error (a TLS alert, e.g. a refused
        client certificate) means the session is gone, even while there is nothing to write."""
        try:
            while await reader.read(4096):
                pass
            exc: BaseException = ConnectionResetError("the collector closed the connection")
        except Exception as raised:
            exc = raised
        if self._writer is writer and self._broken is None:
            self._broken = exc
            self._wake.set()

    async def _stamp(self, msg: _Message) -> None:
        from audit.timestamping import TimestampError, fetch_timestamp

        assert self._tsa is not None and msg.stamp_payload is not None
        try:
            token = await asyncio.to_thread(fetch_timestamp, self._tsa, msg.stamp_payload)
        except TimestampError as exc:
            # Shipped without a token: the anchor still counts; verify reports what it cannot prove.
            self.timestamp_failures += 1
            self.last_timestamp_error = str(exc)[:200]
            metrics.TIMESTAMP_FAILURES.inc()
            log.error("audit_timestamp_failed", error=str(exc))
            await self._notify("timestamp_failed", {"error": str(exc)[:200]})
        else:
            msg.body = {**msg.body, "tst": base64.b64encode(token).decode("ascii")}
        msg.stamp_payload = None

    def _frame(self, msg: _Message) -> bytes:
        s = self.settings
        data = format_rfc5424(
            msg, facility=s.facility, hostname=self._hostname, app_name=s.app_name, procid=self._procid
        )
        return str(len(data)).encode("ascii") + b" " + data

    def _ssl_context(self) -> ssl.SSLContext:
        s = self.settings
        ctx = ssl.create_default_context(cafile=str(s.ca_file) if s.ca_file else None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if s.client_cert_file is not None:
            ctx.load_cert_chain(str(s.client_cert_file), str(s.client_key_file))
        return ctx

    async def _connect(self) -> None:
        s = self.settings
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                s.host,
                s.port,
                ssl=self._ssl,
                server_hostname=(s.server_name or s.host) if self._ssl is not None else None,
            ),
            s.connect_timeout_s,
        )
        self._writer = writer
        self._unconfirmed.clear()
        self._watch_task = asyncio.create_task(self._watch(reader, writer), name="audit-syslog-watch")

    async def _disconnect(self) -> None:
        writer, self._writer = self._writer, None
        watch, self._watch_task = self._watch_task, None
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _went_down(self, exc: BaseException) -> None:
        error = _describe(exc)
        self.last_error = error
        self._up = False
        metrics.COLLECTOR_UP.set(0)
        if not self._down:
            self._down = True
            log.error("audit_syslog_collector_down", error=error, buffered=len(self._buffer))
            await self._notify("down", {"error": error})

    async def _came_up(self) -> None:
        self._up = True
        metrics.COLLECTOR_UP.set(1)
        self.last_error = None
        if self._down:
            self._down = False
            log.warning("audit_syslog_collector_up", buffered=len(self._buffer), lost=self._unreported_lost)
            await self._notify("up", {"buffered": len(self._buffer)})
        if self._unreported_lost:
            lost, self._unreported_lost = self._unreported_lost, 0
            await self._notify("lost", {"count": lost})

    async def _notify(self, state: str, detail: dict[str, Any]) -> None:
        if self._on_state is not None:
            try:
                await self._on_state(state, detail)
            except Exception as exc:  # recording the event failed: the log's own policy applies
                log.error("audit_syslog_event_not_recorded", state=state, error=type(exc).__name__)


async def _cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it has ended.

    The cancellation is repeated while the task runs on: ``asyncio.wait_for`` before Python 3.12
    drops a cancellation that arrives in the same loop iteration as its inner result (CPython
    gh-86296), after which the task would wait for its next message forever.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    if not task.cancelled() and task.exception() is not None:
        log.error("audit_syslog_shipper_failed", error=type(task.exception()).__name__)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or type(exc).__name__}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__
