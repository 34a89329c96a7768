import grpc
import pytest_asyncio

from tests.server.stubs import stubs


@pytest_asyncio.fixture(loop_scope="session")
async def api(live_server):
    channel = grpc.aio.insecure_channel(live_server.target)
    s = stubs(channel)
    try:
        yield s
    finally:
        await s.close()
