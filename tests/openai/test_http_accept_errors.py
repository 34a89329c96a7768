"""An HTTP listener out of descriptors does not flood the log: asyncio reports each failed
``accept()`` (EMFILE) to the loop's exception handler, once per pending connection on every
retry; the front end's handler counts them and logs them in aggregate. Run in a child process
whose descriptors are exhausted on purpose (loopback only, bounded in time and count)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    from prometheus_client import REGISTRY
    from service.frontends.openai.connections import ConnectionGuard, accept_error_handler

    install = sys.argv[1] == "guarded"

    async def main():
        loop = asyncio.get_running_loop()
        if install:
            guard = ConnectionGuard(65536, 10.0, 100, 100)
            loop.set_exception_handler(accept_error_handler(guard, loop.get_exception_handler()))
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        sys.stdin.readline()  # the parent has connected
        await asyncio.sleep(2.5)  # asyncio retries accept() about once a second
        for fd in held:
            os.close(fd)
        value = REGISTRY.get_sample_value(
            "xinserve_http_connections_refused_total", {"reason": "accept_out_of_resources"}
        )
        print("refused", value or 0, flush=True)

    asyncio.run(main())
    """
)


def _run(mode: str) -> tuple[int, float]:
    """(log lines the child wrote, accept failures it counted) with 8 connections pending."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(8)]
        child.stdin.write("\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=60)
        for c in clients:
            c.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    refused = float(out.strip().splitlines()[-1].split()[1])
    return len(err.splitlines()) + len(out.splitlines()) - 1, refused


def test_accept_failures_for_want_of_descriptors_are_logged_in_aggregate():
    lines, refused = _run("guarded")
    assert refused >= 8  # at least one report per pending connection
    assert lines <= 4, f"{lines} log lines"


def test_without_the_handler_each_failure_is_a_log_entry():
    # What the listener did before: the same exhaustion writes a traceback per report.
    lines, _ = _run("plain")
    assert lines > 100
