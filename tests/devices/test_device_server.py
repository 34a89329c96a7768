"""The live server (real engine on CPU) reports this host's CPU inventory in GetServerInfo and
in /metrics."""

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from xinserve.v1 import server_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_get_server_info_reports_the_cpu_inventory(api):
    info = await api.server.GetServerInfo(server_pb2.GetServerInfoRequest())
    (cpu,) = info.devices
    assert (cpu.kind, cpu.index, cpu.health) == ("cpu", 0, server_pb2.DEVICE_HEALTH_OK)
    assert "logical CPUs" in cpu.name and not cpu.error
    assert 0 < cpu.memory_used_bytes < cpu.memory_total_bytes
    assert cpu.read_at_unix_seconds > 0 and cpu.driver_version.startswith("Linux ")


async def test_metrics_expose_the_cpu_device_gauges(api):
    await api.server.GetServerInfo(server_pb2.GetServerInfoRequest())  # first reading taken
    text = generate_latest(REGISTRY).decode()
    samples = {
        (s.name, s.labels.get("kind"), s.labels.get("index"))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for name in ("xinserve_device_memory_total_bytes", "xinserve_device_memory_used_bytes", "xinserve_device_healthy"):
        assert (name, "cpu", "0") in samples
