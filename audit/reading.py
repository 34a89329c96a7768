"""``Reader``: reads through ``AuditLog`` (the server's ``AuditService``): queries, streamed
exports and verification, each on its own store connection in a worker thread. It is given
only how to open a store connection and the key that verifies this server's checkpoints."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog

from audit.chain import Verifier
from audit.errors import AuditConfigError, AuditStoreError, AuditUnavailable
from audit.query import query_records
from audit.stores import QueryFilter, Store, StoredRecord
from audit.verify import VerifyReport, verify_store

log = structlog.get_logger("xinserve.audit")


class Reader:
    """``AuditLog``'s read side: ``store_factory`` opens a connection, ``verifier`` is the
    default key of :meth:`verify`."""

    def __init__(self, store_factory: Callable[[], Store], verifier: Verifier | None) -> None:
        self._store_factory = store_factory
        self._verifier = verifier

    async def query(self, flt: QueryFilter) -> list[StoredRecord]:
        """Run a query on a separate connection in a worker thread."""

        def run() -> list[StoredRecord]:
            with self._store_factory() as store:
                return list(store.query(flt))

        return await asyncio.to_thread(run)

    async def verify(self, keys: list[Any] | None = None, **kwargs: Any) -> VerifyReport:
        """Verify the store (all chains) in a worker thread: ``audit.verify.verify_store``.

        ``keys`` default to this server's public key; keyword arguments (``chain``, ``start``,
        ``end``, ``now_ms``, ``anchors``) are passed on. Returns a ``VerifyReport``; the caller
        records an ``audit_verified`` event with its outcome. Raises ``AuditConfigError`` (no key),
        and from ``verify_store``: ``UnknownChainError`` (no such chain), ``AuditRangeError`` (bad
        range, or ``start`` past the chain's last record) and ``AuditStoreError``.
        """
        trusted: list[Any] = keys if keys is not None else [self._verifier]
        if not trusted or trusted[0] is None:
            raise AuditConfigError("no public key to verify with")

        def run() -> VerifyReport:
            with self._store_factory() as store:
                return verify_store(store, trusted, **kwargs)

        return await asyncio.to_thread(run)

    async def stream(self, flt: QueryFilter, *, chunk: int = 500) -> AsyncIterator[dict[str, Any]]:
        """Matching records as export dicts (see ``audit.query.stored_to_json``), streamed.

        For ``AuditService``'s JSON-lines export: a worker thread reads on its own connection
        and hands over chunks through a bounded queue, so memory stays flat for any range.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=4)
        stop = threading.Event()
        done = object()

        def put(item: Any) -> None:
            asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

        def produce() -> None:
            try:
                with self._store_factory() as store:
                    buf: list[dict[str, Any]] = []
                    for obj in query_records(store, flt):
                        buf.append(obj)
                        if len(buf) >= chunk:
                            put(buf)
                            buf = []
                            if stop.is_set():
                                return
                    if buf:
                        put(buf)
            except BaseException as exc:
                put(exc)
            finally:
                put(done)

        producer = loop.run_in_executor(None, produce)
        try:
            while (item := await queue.get()) is not done:
                if isinstance(item, BaseException):
                    if isinstance(item, AuditStoreError):
                        raise AuditUnavailable(f"audit store unavailable: {item}") from None
                    raise item
                for obj in item:
                    yield obj
        finally:
            stop.set()
            while not producer.done():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                await asyncio.sleep(0)
            with contextlib.suppress(BaseException):
                await producer
