"""Stopping the audit log ends its background tasks even when a cancellation meets work that
would swallow it: a writer-thread job in flight, and a shipper task whose cancellation
``asyncio.wait_for`` dropped (CPython before 3.12, gh-86296). Real SQLite store."""

from __future__ import annotations

import asyncio
import threading

import pytest
from audit_helpers import Backend

from audit.log import AuditLog
from audit.syslog_shipper import _cancel_and_wait


async def test_abort_ends_while_a_writer_thread_job_runs(sqlite_backend: Backend, key) -> None:
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    started, release = threading.Event(), threading.Event()

    def job(store, log_):  # type: ignore[no-untyped-def]
        started.set()
        release.wait(60)
        return "done"

    caller = asyncio.create_task(log.run_in_writer(job))
    assert await asyncio.to_thread(started.wait, 60)
    stopping = asyncio.create_task(log.abort())
    await asyncio.sleep(0)  # abort cancels the writer task while the job is in flight
    release.set()
    await asyncio.wait_for(stopping, 30)
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_a_task_that_dropped_its_cancellation_is_cancelled_again() -> None:
    loop = asyncio.get_running_loop()
    inner: asyncio.Future[None] = loop.create_future()
    after_the_drop = asyncio.Event()

    async def run() -> None:
        try:
            await inner
        except asyncio.CancelledError:
            pass  # what asyncio.wait_for does when its inner result arrives with the cancel
        after_the_drop.set()
        await asyncio.Event().wait()  # waits for a message that never comes

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    await asyncio.wait_for(_cancel_and_wait(task), 60)
    assert after_the_drop.is_set() and task.cancelled()
