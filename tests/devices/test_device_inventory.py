"""The inventory runs each vendor's tool in a subprocess (here: executables on PATH printing
the recorded outputs) and reports a failing or missing tool as a DEGRADED device, not a crash."""

import pytest

from engine_backends.devices import Health, nvidia_smi, read_devices, read_inventory
from engine_backends.devices.model import DeviceToolError
from engine_backends.devices.visible import VisibleDevicesError, check_visible_devices
from tests.devices.conftest import FIXTURES as FIXTURES_DIR
from tests.devices.conftest import fixture_text

RECORDED = [
    ("ascend", "npu-smi", "npu-smi-info_910b2c.txt", 2),
    ("kunlun", "xpu-smi", "xpu-smi_kunlun-p800.txt", 8),
    ("xpu", "xpu-smi", "xpu-smi_intel-arc-a770.txt", 1),
    ("mlu", "cnmon", "cnmon_mlu370-x8.txt", 2),
    ("musa", "mthreads-gmi", "mthreads-gmi_s5000.txt", 2),
    ("dcu", "hy-smi", "hy-smi-json_bw.json", 2),
    ("metax", "mx-smi", "mx-smi_c550.txt", 8),
    ("ascend", "npu-smi", "npu-smi-info_a3-ascend910_25.5.1.txt", 5),
    ("ascend", "npu-smi", "npu-smi-info_a3-ascend910x16_25.2.3.txt", 16),
    ("ascend", "npu-smi", "npu-smi-info_ascend950dt_25.6.rc1.txt", 4),
    ("musa", "mthreads-gmi", "mthreads-gmi_s5000x8_2.4.1.txt", 8),
    ("musa", "mthreads-gmi", "mthreads-gmi_s80_1.14.0.txt", 1),
    ("metax", "mx-smi", "mx-smi_c500x8_2.2.9.txt", 8),
    ("metax", "mx-smi", "mx-smi_c500_2.3.1.txt", 1),
    ("mlu", "cnmon", "cnmon_mlu370-x4x3_v4.20.11.txt", 3),
    ("mlu", "cnmon", "cnmon_mlu370-x8_v5.10.22.txt", 2),
    ("kunlun", "xpu_smi", "xpu_smi_kunlun-p800x8_5.0.21.26.txt", 8),
    ("kunlun", "xpu-smi", "xpu-smi_kunlun-p800_5.19.0.0.txt", 3),
]


@pytest.mark.parametrize(("kind", "tool", "fixture", "count"), RECORDED)
def test_each_kind_read_through_its_tool(fake_tools, kind, tool, fixture, count):
    fake_tools.printing(tool, fixture)
    devices = read_inventory(kind)
    assert len(devices) == count
    assert all(d.kind == kind and d.health is not Health.DEGRADED and not d.error for d in devices)
    assert len({d.index for d in devices}) == count  # distinct ids: one metrics label set per chip


def test_cuda_falls_back_from_nvml_to_nvidia_smi_xml(fake_tools):
    try:
        nvidia_smi.read_nvml()
    except DeviceToolError:
        pass
    else:
        pytest.skip("NVML works on this host: the inventory reads NVML, not the recorded nvidia-smi output")
    fake_tools.printing("nvidia-smi", "nvidia-smi-q-x_tesla-t4.xml")
    (gpu,) = read_inventory("cuda")
    assert gpu.name == "Tesla T4" and gpu.health is Health.OK


def test_missing_tool_is_a_degraded_device_with_the_reason(fake_tools):
    (dev,) = read_inventory("ascend")
    assert dev.kind == "ascend" and dev.health is Health.DEGRADED
    assert "npu-smi not found" in dev.error


def test_cuda_without_driver_names_both_attempts(fake_tools):
    try:
        nvidia_smi.read_nvml()
    except DeviceToolError:
        pass
    else:
        pytest.skip("NVML works on this host (an NVIDIA driver is loaded): the no-driver path cannot be shown")
    (dev,) = read_inventory("cuda")
    assert dev.health is Health.DEGRADED
    assert "NVML" in dev.error and "nvidia-smi not found" in dev.error


def test_failing_tool_reports_exit_status_and_first_stderr_line(fake_tools):
    fake_tools("cnmon", 'echo "cnmon: no MLU device found" >&2; echo "line two" >&2; exit 3')
    (dev,) = read_inventory("mlu")
    assert dev.health is Health.DEGRADED
    assert dev.error == "cnmon exited with status 3: cnmon: no MLU device found"


def test_hanging_tool_is_killed_at_the_timeout(fake_tools):
    fake_tools("mx-smi", "exec sleep 600")
    (dev,) = read_inventory("metax", timeout=0.5)
    assert dev.health is Health.DEGRADED and "did not answer within 0.5 s" in dev.error


def test_unparseable_output_is_degraded_with_the_parser_reason(fake_tools):
    fake_tools("mthreads-gmi", "echo 'Segmentation fault'")
    (dev,) = read_inventory("musa")
    assert dev.health is Health.DEGRADED and dev.error.startswith("mthreads-gmi: no 'ID Name")


def test_intel_xpu_smi_on_a_kunlun_host_is_not_taken_for_kunlun(fake_tools):
    fake_tools.printing("xpu-smi", "xpu-smi_intel-arc-a770.txt")
    (dev,) = read_inventory("kunlun")
    assert dev.health is Health.DEGRADED and "Intel's XPU Manager" in dev.error


def test_read_devices_raises_the_tool_error(fake_tools):
    with pytest.raises(DeviceToolError, match="hy-smi not found"):
        read_devices("dcu")


def test_cpu_inventory_of_this_host():
    (host,) = read_inventory("cpu")
    assert host.kind == "cpu" and host.health is Health.OK and not host.error
    assert host.memory_total_bytes and 0 < host.memory_used_bytes <= host.memory_total_bytes
    assert host.utilization_ratio is not None and 0.0 <= host.utilization_ratio <= 1.0


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown device kind 'tpu'"):
        read_inventory("tpu")


def test_visible_devices_checked_against_recorded_inventory(fake_tools):
    fake_tools.printing("npu-smi", "npu-smi-info_910b2c.txt")
    inventory = read_inventory("ascend")
    assert check_visible_devices("ascend", "1,0", inventory) == [1, 0]
    with pytest.raises(VisibleDevicesError, match=r"visible ascend device\(s\) 7 not present; the host has 0, 1"):
        check_visible_devices("ascend", "0,7", inventory)


def test_visible_devices_cannot_be_checked_without_the_tool(fake_tools):
    with pytest.raises(VisibleDevicesError, match="cannot check visible mlu devices '0': cnmon not found"):
        check_visible_devices("mlu", "0", read_inventory("mlu"))


@pytest.mark.parametrize("selection", ["", "0,,1", "a", "0,0", "-1", "١"])
def test_malformed_visible_devices_refused(selection):
    with pytest.raises(VisibleDevicesError):
        check_visible_devices("ascend", selection, [])


def test_visible_devices_are_logical_ids_on_a3(fake_tools):
    fake_tools.printing("npu-smi", "npu-smi-info_a3-ascend910_25.5.1.txt")
    inventory = read_inventory("ascend")
    assert check_visible_devices("ascend", "3,4", inventory) == [3, 4]  # second die of NPU 1, die of NPU 2
    with pytest.raises(VisibleDevicesError, match=r"device\(s\) 5 not present; the host has 0, 1, 2, 3, 4"):
        check_visible_devices("ascend", "5", inventory)


def test_visible_devices_in_a_container_showing_later_npus(fake_tools):
    fake_tools.printing("npu-smi", "npu-smi-info_ascend950dt_25.6.rc1.txt")  # NPU 0, 1, 6, 7 shown
    inventory = read_inventory("ascend")
    assert check_visible_devices("ascend", "2,3", inventory) == [2, 3]  # NPU 6 and 7 by logical id
    with pytest.raises(VisibleDevicesError, match=r"device\(s\) 6 not present"):
        check_visible_devices("ascend", "6", inventory)


def test_one_unreadable_device_does_not_block_the_visible_check(fake_tools, tmp_path):
    damaged = tmp_path / "mx.txt"
    damaged.write_text(
        fixture_text("mx-smi_c500x8_2.2.9.txt").replace("| 60W / 350W       | 35C ", "| 60W / 350W       | hotC")
    )
    fake_tools("mx-smi", f"cat '{damaged}'")
    inventory = read_inventory("metax")
    assert len(inventory) == 8 and sum(d.health is Health.DEGRADED for d in inventory) == 1
    assert check_visible_devices("metax", "0,3,7", inventory) == [0, 3, 7]


def test_kunlun_tool_missing_under_both_names(fake_tools):
    (dev,) = read_inventory("kunlun")
    assert dev.health is Health.DEGRADED and dev.placeholder and dev.error.startswith("xpu-smi / xpu_smi not found")


def test_hy_smi_without_json_falls_back_to_the_plain_table(fake_tools):
    table = FIXTURES_DIR / "hy-smi_hcu-x8-400w.txt"
    fake_tools(
        "hy-smi", f'case "$*" in *--json*) echo "unrecognized arguments: --json" >&2; exit 2;; esac; cat \'{table}\''
    )
    devices = read_inventory("dcu")
    assert [d.index for d in devices] == list(range(8)) and all(d.health is Health.OK for d in devices)


def test_a3_host_second_die_of_npu_4_is_logical_9(fake_tools):
    fake_tools.printing("npu-smi", "npu-smi-info_a3-ascend910x16_25.2.3.txt")
    inventory = read_inventory("ascend")
    assert check_visible_devices("ascend", "8,9", inventory) == [8, 9]
    assert {d.card for d in inventory if d.visible_id in (8, 9)} == {4}


def test_hy_smi_driver_version_is_asked_apart_from_the_json_call(fake_tools, tmp_path):
    calls = tmp_path / "calls"
    json_out = FIXTURES_DIR / "hy-smi-json_bw.json"
    fake_tools(
        "hy-smi",
        f"echo \"$*\" >> '{calls}'\n"
        'case "$*" in\n'
        f"  *--json*) cat '{json_out}';;\n"
        '  --showdriverversion) echo "Driver Version: 6.3.27-V1.2.5";;\n'
        "  *) exit 2;;\n"
        "esac",
    )
    devices = read_inventory("dcu")
    assert [d.driver_version for d in devices] == ["6.3.27-V1.2.5"] * 2
    lines = calls.read_text().splitlines()
    assert "--showdriverversion" in lines
    assert all("--showdriverversion" not in line for line in lines if "--json" in line)
