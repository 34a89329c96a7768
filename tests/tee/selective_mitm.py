"""A selective TLS man-in-the-middle on loopback, for channel-binding tests (Python ssl + asyncio).

The first connection it accepts is terminated with its own certificate (one the client's CA
issued, as a rogue or compromised issuer would) and relayed to the real server over a second TLS
connection, reading the client's bytes in clear; every later connection is spliced through at
TCP level, so a probe over it sees the real server's certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl


class SelectiveMitm:
    """Listens on 127.0.0.1 (``port`` once started) in front of ``upstream`` (host, port).

    Args:
        upstream: the real server's address.
        server_context: the TLS context it terminates the first connection with (its certificate).
        upstream_context: the TLS context it reaches the real server with.
        upstream_name: the server name (SNI, certificate check) used towards the real server.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        server_context: ssl.SSLContext,
        upstream_context: ssl.SSLContext,
        upstream_name: str,
    ) -> None:
        self.upstream = upstream
        self.server_context = server_context
        self.upstream_context = upstream_context
        self.upstream_name = upstream_name
        self.connections = 0
        self.intercepted = 0
        """Connections it tried to terminate (whether or not the client accepted its certificate)."""
        self.cleartext = bytearray()
        """What the intercepted clients sent, decrypted (bounded to 1 MiB)."""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> SelectiveMitm:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        intercept = self.connections == 1
        up_writer: asyncio.StreamWriter | None = None
        try:
            if intercept:
                self.intercepted += 1
                await writer.start_tls(self.server_context)
                up_reader, up_writer = await asyncio.open_connection(
                    *self.upstream, ssl=self.upstream_context, server_hostname=self.upstream_name
                )
            else:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            await asyncio.gather(
                self._pipe(reader, up_writer, record=intercept), self._pipe(up_reader, writer, record=False)
            )
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, record: bool) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while data := await reader.read(65536):
                if record and len(self.cleartext) < 1 << 20:
                    self.cleartext += data
                writer.write(data)
                await writer.drain()
        except (OSError, ssl.SSLError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
                if writer.can_write_eof():
                    writer.write_eof()
                else:
                    writer.close()
