"""Device readings become GetServerInfo messages and xinserve_device_* gauges, from the last
background reading (a tool never runs on a scrape or a request)."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine_backends.devices import read_inventory
from service.frontends.grpc.server_servicer import ServerServicer
from service.runtime.device_monitor import _MONITORS, DeviceMetrics, DeviceMonitor, device_message, ensure_monitor
from service.runtime.state import Runtime
from service.settings.config import ConfigError, Settings, load_settings
from xinserve.v1 import server_pb2


def _scrape(monitor: DeviceMonitor) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry()
    registry.register(DeviceMetrics([monitor]))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_recorded_ascend_reading_as_gauges_and_messages(fake_tools):
    fake_tools.printing("npu-smi", "npu-smi-info_910b2c.txt")
    calls = []

    def reader(kind):
        calls.append(kind)
        return read_inventory(kind)

    monitor = DeviceMonitor("ascend", reader=reader)
    monitor.refresh()
    metrics = _scrape(monitor)
    key = (("index", "1"), ("kind", "ascend"))
    assert metrics[("xinserve_device_memory_used_bytes", key)] == 20687 * 1024**2
    assert metrics[("xinserve_device_power_watts", key)] == 99.6
    assert metrics[("xinserve_device_utilization_ratio", key)] == 0.0
    assert metrics[("xinserve_device_healthy", key)] == 1.0
    assert calls == ["ascend"]  # scraping did not run the tool again

    read_at, devices = monitor.snapshot()
    msg = device_message(devices[1], read_at)
    assert (msg.kind, msg.index, msg.name, msg.health) == ("ascend", 1, "910B2C", server_pb2.DEVICE_HEALTH_OK)
    assert msg.memory_total_bytes == 65536 * 1024**2 and msg.temperature_celsius == 50.0
    assert msg.driver_version == "23.0.2.1" and msg.read_at_unix_seconds == read_at > 0


def test_missing_tool_is_degraded_in_both(fake_tools):
    monitor = DeviceMonitor("mlu")
    monitor.refresh()
    metrics = _scrape(monitor)
    key = (("index", "0"), ("kind", "mlu"))
    assert metrics[("xinserve_device_healthy", key)] == 0.0
    assert ("xinserve_device_memory_total_bytes", key) not in metrics  # absent, not zero
    info = [k for k in metrics if k[0] == "xinserve_device_info"]
    assert dict(info[0][1])["health"] == "degraded"
    _, (device,) = monitor.snapshot()
    msg = device_message(device, 0.0)
    assert msg.health == server_pb2.DEVICE_HEALTH_DEGRADED and "cnmon not found" in msg.error
    assert not msg.HasField("memory_total_bytes") and not msg.HasField("power_watts")


def test_before_the_first_reading_the_device_is_degraded_not_read_yet():
    monitor = DeviceMonitor("cpu")
    read_at, (device,) = monitor.snapshot()
    assert read_at == 0 and device.error == "device inventory not read yet"
    assert not monitor.wait_first(0)


def test_background_thread_reads_at_start_and_on_its_interval():
    readings = []

    def reader(kind):
        readings.append(kind)
        return read_inventory(kind)

    monitor = DeviceMonitor("cpu", interval=0.05, reader=reader)
    monitor.start()
    try:
        assert monitor.wait_first(60)
        for _ in range(600):
            if len(readings) >= 3:
                break
            monitor._stop.wait(0.1)
        assert len(readings) >= 3
    finally:
        monitor.stop()


def test_refresh_interval_and_tool_timeout_come_from_the_configuration(fake_tools):
    fake_tools("cnmon", "sleep 30")  # a tool that hangs: the configured timeout ends it
    settings = Settings(devices={"refresh_seconds": 2.0, "tool_timeout_seconds": 0.5})
    monitor = ServerServicer(Runtime(settings), "mlu")._devices
    try:
        assert monitor.interval == 2.0
        assert monitor.wait_first(60)
        (device,) = monitor.snapshot()[1]
        assert device.health.value == "degraded" and "did not answer within 0.5 s" in device.error, device.error
    finally:
        monitor.stop()
        _MONITORS.pop("mlu", None)
    again = ensure_monitor("mlu", 30.0, 5.0)
    try:
        assert again is not monitor and again.interval == 30.0
    finally:
        again.stop()
        _MONITORS.pop("mlu", None)


def test_device_settings_from_file_and_environment_and_bad_values_named(tmp_path, monkeypatch):
    assert (load_settings().devices.refresh_seconds, load_settings().devices.tool_timeout) == (15.0, 10.0)
    assert Settings(devices={"refresh_seconds": 4}).devices.tool_timeout == 4.0  # never past the interval
    cfg = tmp_path / "x.yaml"
    cfg.write_text("devices:\n  refresh_seconds: 60\n")
    monkeypatch.setenv("XINSERVE_DEVICES__TOOL_TIMEOUT_SECONDS", "20")
    devices = load_settings(cfg).devices
    assert (devices.refresh_seconds, devices.tool_timeout) == (60.0, 20.0)
    for bad, named in (
        ("refresh_seconds: 0.1", "devices.refresh_seconds"),
        ("refresh_seconds: 5000", "devices.refresh_seconds"),
        ("refresh_seconds: 5\n  tool_timeout_seconds: 30", "must not exceed refresh_seconds"),
    ):
        cfg.write_text(f"devices:\n  {bad}\n")
        with pytest.raises(ConfigError, match=named):
            load_settings(cfg)
