"""Device inventory kept current off the request path: a background refresh, Prometheus gauges
and the ``ServerService.GetServerInfo.devices`` messages read from the last refresh.

Gauges (labels ``kind``, ``index``; units per the Prometheus naming guide):
``xinserve_device_memory_total_bytes``, ``xinserve_device_memory_used_bytes``,
``xinserve_device_utilization_ratio`` (0..1), ``xinserve_device_temperature_celsius``,
``xinserve_device_power_watts``, ``xinserve_device_healthy`` (1 when health is OK),
``xinserve_device_info`` (1, with ``name``, ``health``, ``driver_version`` labels) and
``xinserve_device_last_refresh_timestamp_seconds``. A figure the tool does not report is
absent, not zero.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine_backends.devices import Device, Health, read_inventory
from engine_backends.devices.inventory import DEFAULT_TIMEOUT_SECONDS
from engine_backends.devices.model import failed_device
from xinserve.v1 import server_pb2

DEFAULT_REFRESH_SECONDS = 15.0  # service.settings.config.DevicesSettings.refresh_seconds' default

_HEALTH = {
    Health.OK: server_pb2.DEVICE_HEALTH_OK,
    Health.WARNING: server_pb2.DEVICE_HEALTH_WARNING,
    Health.CRITICAL: server_pb2.DEVICE_HEALTH_CRITICAL,
    Health.DEGRADED: server_pb2.DEVICE_HEALTH_DEGRADED,
}


class DeviceMonitor:
    """Reads the inventory of one device kind now and then every ``interval`` seconds.

    The reading runs in a daemon thread (vendor tools are subprocesses with a timeout);
    ``snapshot`` returns the last reading without running anything.
    """

    def __init__(
        self,
        kind: str,
        interval: float = DEFAULT_REFRESH_SECONDS,
        reader: Callable[[str], list[Device]] = read_inventory,
    ) -> None:
        self.kind = kind
        self.interval = interval
        self._reader = reader
        self._lock = threading.Lock()
        self._devices: list[Device] = [failed_device(kind, "device inventory not read yet")]
        self._read_at = 0.0
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> list[Device]:
        """Read the inventory now (blocking: call from a thread) and keep it."""
        devices = self._reader(self.kind)
        with self._lock:
            self._devices, self._read_at = devices, time.time()
        self._first.set()
        return devices

    def wait_first(self, timeout: float) -> bool:
        """Block until the first reading exists (or ``timeout`` s); True when it does."""
        return self._first.wait(timeout)

    def snapshot(self) -> tuple[float, list[Device]]:
        """(Unix time of the last reading, its devices); time 0 before the first reading."""
        with self._lock:
            return self._read_at, list(self._devices)

    def start(self) -> None:
        """Read now, then every ``interval`` seconds, in a daemon thread until ``stop``."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"xinserve-devices-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        self.refresh()
        while not self._stop.wait(self.interval):
            self.refresh()


def device_message(device: Device, read_at: float) -> server_pb2.Device:
    """``xinserve.v1.Device`` for one reading (absent figures stay unset)."""
    msg = server_pb2.Device(
        kind=device.kind,
        index=device.index,
        name=device.name,
        health=_HEALTH[device.health],
        driver_version=device.driver_version,
        firmware_version=device.firmware_version,
        error=device.error,
        read_at_unix_seconds=read_at,
    )
    if device.memory_total_bytes is not None:
        msg.memory_total_bytes = device.memory_total_bytes
    if device.memory_used_bytes is not None:
        msg.memory_used_bytes = device.memory_used_bytes
    if device.utilization_ratio is not None:
        msg.utilization_ratio = device.utilization_ratio
    if device.temperature_celsius is not None:
        msg.temperature_celsius = device.temperature_celsius
    if device.power_watts is not None:
        msg.power_watts = device.power_watts
    return msg


class DeviceMetrics(Collector):
    """The ``xinserve_device_*`` gauges of the last reading of each monitor: the given ones, or
    by default the process's running monitors (one per device kind, see ``ensure_monitor``).
    No tool runs on scrape."""

    def __init__(self, monitors: Iterable[DeviceMonitor] | None = None) -> None:
        self._monitors = None if monitors is None else list(monitors)

    def _current(self) -> list[DeviceMonitor]:
        if self._monitors is not None:
            return self._monitors
        with _MONITORS_LOCK:
            return list(_MONITORS.values())

    def collect(self) -> Iterator[Metric]:
        labels = ["kind", "index"]
        families = {
            "memory_total_bytes": GaugeMetricFamily(
                "xinserve_device_memory_total_bytes", "Device memory, bytes.", labels=labels
            ),
            "memory_used_bytes": GaugeMetricFamily(
                "xinserve_device_memory_used_bytes", "Device memory in use, bytes.", labels=labels
            ),
            "utilization_ratio": GaugeMetricFamily(
                "xinserve_device_utilization_ratio", "Compute utilisation, 0..1.", labels=labels
            ),
            "temperature_celsius": GaugeMetricFamily(
                "xinserve_device_temperature_celsius", "Chip temperature, degrees Celsius.", labels=labels
            ),
            "power_watts": GaugeMetricFamily("xinserve_device_power_watts", "Board power draw, watts.", labels=labels),
        }
        healthy = GaugeMetricFamily(
            "xinserve_device_healthy", "1 when the vendor tool reports the device healthy.", labels=labels
        )
        info = GaugeMetricFamily(
            "xinserve_device_info",
            "Device identity and health (always 1).",
            labels=[*labels, "name", "health", "driver_version"],
        )
        refreshed = GaugeMetricFamily(
            "xinserve_device_last_refresh_timestamp_seconds",
            "Unix time of the last device inventory reading.",
            labels=["kind"],
        )
        for monitor in self._current():
            read_at, devices = monitor.snapshot()
            for d in devices:
                key = [d.kind, str(d.index)]
                for attr, family in families.items():
                    value = getattr(d, attr)
                    if value is not None:
                        family.add_metric(key, float(value))
                healthy.add_metric(key, 1.0 if d.health is Health.OK else 0.0)
                info.add_metric([*key, d.name, d.health.value, d.driver_version], 1.0)
            if read_at:
                refreshed.add_metric([monitor.kind], read_at)
        yield from families.values()
        yield from (healthy, info, refreshed)


_MONITORS: dict[str, DeviceMonitor] = {}
_MONITORS_LOCK = threading.Lock()

DEVICE_METRICS = DeviceMetrics()
REGISTRY.register(DEVICE_METRICS)


def ensure_monitor(
    kind: str, interval: float = DEFAULT_REFRESH_SECONDS, tool_timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> DeviceMonitor:
    """The process's monitor for ``kind``, started on first use; /metrics reports the readings
    of every monitor so started. One per kind per process: the inventory is the host's.

    ``interval`` (seconds between readings) and ``tool_timeout`` (seconds one vendor tool may
    run) come from ``devices.*`` in the configuration; a later call with other values
    applies them from the next reading on.
    """
    reader = functools.partial(read_inventory, timeout=tool_timeout)
    with _MONITORS_LOCK:
        monitor = _MONITORS.get(kind)
        if monitor is None:
            monitor = _MONITORS[kind] = DeviceMonitor(kind, interval, reader)
            monitor.start()
        else:
            monitor.interval, monitor._reader = interval, reader
        return monitor
