"""Each vendor tool's parser on real recorded outputs (tests/fixtures/devices/SOURCES.md)."""

import pytest

from engine_backends.devices import cnmon, cpu, hy_smi, mthreads_gmi, mx_smi, npu_smi, nvidia_smi, xpu_smi
from engine_backends.devices.model import DeviceParseError, Health
from tests.devices.conftest import fixture_text

MIB = 1024**2


def test_nvidia_smi_a100_v12():
    (gpu,) = nvidia_smi.parse(fixture_text("nvidia-smi-q-x_a100-sxm4.xml"))
    assert (gpu.kind, gpu.index, gpu.name) == ("cuda", 0, "NVIDIA A100-SXM4-80GB")
    assert gpu.memory_total_bytes == 81920 * MIB and gpu.memory_used_bytes == 50 * MIB
    assert gpu.utilization_ratio is None  # N/A in MIG mode, as recorded
    assert (gpu.temperature_celsius, gpu.power_watts) == (27.0, 67.03)
    assert (gpu.driver_version, gpu.firmware_version) == ("535.54.03", "92.00.36.00.02")
    assert gpu.bus_id == "00000000:01:00.0"


def test_nvidia_smi_v13_reads_instant_power_draw():
    (gpu,) = nvidia_smi.parse(fixture_text("nvidia-smi-q-x_rtx4000-ada.xml"))
    assert gpu.name == "NVIDIA RTX 4000 SFF Ada Generation"
    assert gpu.power_watts == 8.44 and gpu.utilization_ratio == 0.0
    assert gpu.memory_used_bytes == 3534 * MIB and gpu.driver_version == "595.84"


def test_nvidia_smi_pre_v12_power_readings():
    (gpu,) = nvidia_smi.parse(fixture_text("nvidia-smi-q-x_tesla-t4.xml"))
    assert (gpu.name, gpu.power_watts, gpu.temperature_celsius) == ("Tesla T4", 26.78, 40.0)


def test_npu_smi_910b_reads_hbm_not_ddr():
    chips = npu_smi.parse(fixture_text("npu-smi-info_910b2c.txt"))
    assert [c.index for c in chips] == [0, 1]
    assert chips[0].name == "910B2C" and chips[0].health is Health.OK
    assert chips[0].memory_used_bytes == 20701 * MIB and chips[0].memory_total_bytes == 65536 * MIB
    assert (chips[1].power_watts, chips[1].temperature_celsius) == (99.6, 50.0)
    assert chips[1].bus_id == "0000:19:00.0" and chips[1].driver_version == "23.0.2.1"


def test_npu_smi_310b_alarm_is_warning_and_ddr_memory():
    (chip,) = npu_smi.parse(fixture_text("npu-smi-info_310b4.txt"))
    assert chip.health is Health.WARNING
    assert chip.memory_used_bytes == 3628 * MIB and chip.memory_total_bytes == 15609 * MIB
    assert chip.bus_id == ""  # "NA"


def test_npu_smi_310p_narrow_layout_and_power_na():
    chips = npu_smi.parse(fixture_text("npu-smi-info_310p3.txt"))
    assert [c.index for c in chips] == [0, 64]
    assert chips[0].power_watts is None and chips[1].memory_used_bytes == 1764 * MIB


def test_kunlun_xpu_smi():
    xpus = xpu_smi.parse_kunlun(fixture_text("xpu-smi_kunlun-p800.txt"))
    assert [x.index for x in xpus] == list(range(8))
    assert {x.name for x in xpus} == {"P800 OAM"}
    assert xpus[1].temperature_celsius == 41.0 and xpus[1].power_watts == 90.0
    assert xpus[0].memory_total_bytes == 98304 * MIB  # HBM, not the 96 MiB L3 row
    assert xpus[0].driver_version == "5.0.21.21" and xpus[7].bus_id == "00000000:A5:00.0"


def test_xpu_smi_kunlun_and_intel_are_told_apart():
    kunlun, intel = fixture_text("xpu-smi_kunlun-p800.txt"), fixture_text("xpu-smi_intel-arc-a770.txt")
    assert xpu_smi.detect(kunlun) == "kunlunxin" and xpu_smi.detect(intel) == "intel"
    with pytest.raises(DeviceParseError, match="Intel's XPU Manager, not Kunlunxin's"):
        xpu_smi.parse_kunlun(intel)
    with pytest.raises(DeviceParseError, match="Kunlunxin's, not Intel's"):
        xpu_smi.parse_intel(kunlun)
    (arc,) = xpu_smi.parse_intel(intel)
    assert (arc.kind, arc.name, arc.power_watts) == ("xpu", "Intel(R) Arc(TM) A770", 45.0)
    assert arc.memory_used_bytes == 3642 * MIB and arc.utilization_ratio is None


def test_cnmon():
    cards = cnmon.parse(fixture_text("cnmon_mlu370-x8.txt"))
    assert [(c.index, c.name) for c in cards] == [(0, "MLU370-X8"), (1, "MLU370-X8")]
    assert cards[1].temperature_celsius == 39.0 and cards[1].power_watts == 106.0
    assert cards[0].memory_total_bytes == 23374 * MIB and cards[0].memory_used_bytes == 0
    assert (cards[0].driver_version, cards[0].firmware_version) == ("5.10.13", "1.1.6")
    assert cards[1].bus_id == "0000:3D:00.0"


def test_mthreads_gmi():
    gpus = mthreads_gmi.parse(fixture_text("mthreads-gmi_s5000.txt"))
    assert [(g.index, g.name) for g in gpus] == [(0, "MTT S5000"), (1, "MTT S5000")]
    assert gpus[0].memory_used_bytes == 66641 * MIB and gpus[0].memory_total_bytes == 81920 * MIB
    assert gpus[1].temperature_celsius == 51.0 and gpus[0].power_watts is None
    assert gpus[0].driver_version == "3.3.5-server"


def test_hy_smi_malformed_json_as_printed():
    dcus = hy_smi.parse(fixture_text("hy-smi-json_bw.json"))
    assert [d.index for d in dcus] == [0, 1]
    assert dcus[0].name == "BW" and dcus[0].power_watts == 91.0
    assert dcus[0].temperature_celsius == 57.0  # junction
    assert dcus[1].memory_used_bytes == 64104 * MIB and dcus[1].memory_total_bytes == 65520 * MIB


def test_hy_smi_rocm_style_valid_json_in_bytes():
    text = '{"card1": {"DCU use (%)": "12", "VRAM Total Memory (B)": "1024", "VRAM Total Used Memory (B)": "512"}}'
    (dcu,) = hy_smi.parse(text)
    assert (dcu.index, dcu.utilization_ratio, dcu.memory_total_bytes, dcu.memory_used_bytes) == (1, 0.12, 1024, 512)


def test_mx_smi():
    gpus = mx_smi.parse(fixture_text("mx-smi_c550.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[2].power_watts == 47.0 and gpus[4].temperature_celsius == 30.0
    assert gpus[0].memory_used_bytes == 810 * MIB and gpus[0].memory_total_bytes == 65536 * MIB
    assert (gpus[0].driver_version, gpus[0].firmware_version) == ("2.5.014", "1.13.4.0")


def test_cpu_recorded_proc():
    host = cpu.parse(fixture_text("proc-cpuinfo_amd-epyc-vm.txt"), fixture_text("proc-meminfo_amd-epyc-vm.txt"))
    assert host.kind == "cpu" and host.index == 0 and host.name.startswith("AMD EPYC (2 logical CPUs")
    assert host.memory_total_bytes == 24684084 * 1024
    assert 0 < host.memory_used_bytes < host.memory_total_bytes


def test_cpu_utilisation_from_two_stat_samples():
    before = "cpu  100 0 100 800 0 0 0 0 0 0\n"
    after = "cpu  150 0 150 900 0 0 0 0 0 0\n"
    host = cpu.parse("processor\t: 0\n", "MemTotal: 10 kB\nMemAvailable: 5 kB\n", before, after)
    assert host.utilization_ratio == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("parser", "fixture"),
    [
        (npu_smi.parse, "cnmon_mlu370-x8.txt"),
        (cnmon.parse, "mx-smi_c550.txt"),
        (mx_smi.parse, "npu-smi-info_910b2c.txt"),
        (mthreads_gmi.parse, "xpu-smi_kunlun-p800.txt"),
        (hy_smi.parse, "mthreads-gmi_s5000.txt"),
        (nvidia_smi.parse, "hy-smi-json_bw.json"),
        (xpu_smi.parse_kunlun, "cnmon_mlu370-x8.txt"),
    ],
)
def test_another_tools_output_is_refused_precisely(parser, fixture):
    with pytest.raises(DeviceParseError) as info:
        parser(fixture_text(fixture))
    assert info.value.tool and info.value.reason


def test_npu_smi_a3_one_device_per_die_with_card_and_logical_ids():
    dies = npu_smi.parse(fixture_text("npu-smi-info_a3-ascend910_25.5.1.txt"))
    assert [d.index for d in dies] == [0, 1, 2, 3, 4]  # Phy-ID, distinct per die
    assert [d.card for d in dies] == [0, 0, 1, 1, 2]  # NPU id, shared by a card's two dies
    assert [d.visible_id for d in dies] == [0, 1, 2, 3, 4]
    assert all(d.health is Health.OK and not d.error and d.name == "Ascend910" for d in dies)
    assert dies[1].power_watts is None and dies[1].temperature_celsius == 43.0  # "-" on the second die
    assert dies[0].memory_used_bytes == 46904 * MIB and dies[0].memory_total_bytes == 65536 * MIB
    assert dies[3].bus_id == "0000:9B:00.0" and dies[0].driver_version == "25.5.1"


def test_npu_smi_950_separate_id_cells_and_logical_ids_in_listing_order():
    chips = npu_smi.parse(fixture_text("npu-smi-info_ascend950dt_25.6.rc1.txt"))
    assert [c.index for c in chips] == [0, 1, 6, 7]
    assert [c.visible_id for c in chips] == [0, 1, 2, 3]
    assert {c.name for c in chips} == {"Ascend950DT"} and all(c.health is Health.OK for c in chips)
    assert chips[1].utilization_ratio == 0.05 and chips[2].memory_used_bytes == 66466 * MIB
    assert chips[0].memory_total_bytes == 86016 * MIB and chips[0].bus_id == ""  # "NA"


def test_npu_smi_310p_logical_ids_are_positions_not_npu_ids():
    chips = npu_smi.parse(fixture_text("npu-smi-info_310p3.txt"))
    assert [(c.index, c.card, c.visible_id) for c in chips] == [(0, 0, 0), (64, 64, 1)]


def test_npu_smi_unreadable_figure_degrades_that_die_only():
    text = fixture_text("npu-smi-info_a3-ascend910_25.5.1.txt").replace(
        "| OK          | 160.4", "| OK          | 1x0.4"
    )
    dies = npu_smi.parse(text)
    assert len(dies) == 5
    bad = [d for d in dies if d.health is Health.DEGRADED]
    assert len(bad) == 1 and "Power(W)" in bad[0].error and bad[0].card == 1 and bad[0].visible_id == 2
    assert [d.health for d in dies if d is not bad[0]] == [Health.OK] * 4


def test_npu_smi_unknown_health_word_names_the_field():
    text = fixture_text("npu-smi-info_910b2c.txt").replace("| OK            | 99.6", "| Bogus         | 99.6")
    chips = npu_smi.parse(text)
    assert chips[0].health is Health.OK
    assert chips[1].health is Health.DEGRADED and "Health: unknown word 'Bogus'" in chips[1].error


@pytest.mark.parametrize(
    ("fixture", "count", "driver", "total_mib"),
    [("mthreads-gmi_s5000x8_2.4.1.txt", 8, "5.1.0-server", 81920), ("mthreads-gmi_s80_1.14.0.txt", 1, "2.7.0", 16384)],
)
def test_mthreads_gmi_full_output_with_processes_block(fixture, count, driver, total_mib):
    gpus = mthreads_gmi.parse(fixture_text(fixture))
    assert [g.index for g in gpus] == list(range(count))
    assert all(g.health is Health.OK and not g.error and g.driver_version == driver for g in gpus)
    assert all(g.memory_total_bytes == total_mib * MIB and g.temperature_celsius for g in gpus)


def test_mthreads_gmi_s5000_figures():
    gpus = mthreads_gmi.parse(fixture_text("mthreads-gmi_s5000x8_2.4.1.txt"))
    assert (gpus[5].temperature_celsius, gpus[5].bus_id, gpus[5].name) == (50.0, "00000000:ba:00.0", "MTT S5000")
    assert gpus[0].memory_used_bytes == 0 and gpus[0].utilization_ratio == 0.0


def test_mthreads_gmi_virtual_gpu_zero_temperature_is_unknown():
    text = fixture_text("mthreads-gmi_s80_1.14.0.txt").replace(
        "Physical       |4x(16x)             |49C", "Virtual        |4x(16x)             |0C "
    )
    (gpu,) = mthreads_gmi.parse(text)
    assert gpu.temperature_celsius is None and gpu.health is Health.OK
    physical = fixture_text("mthreads-gmi_s80_1.14.0.txt").replace("|49C", "|0C ")
    assert mthreads_gmi.parse(physical)[0].temperature_celsius == 0.0


def test_mx_smi_229_board_layout():
    gpus = mx_smi.parse(fixture_text("mx-smi_c500x8_2.2.9.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"MetaX C500"} and all(g.health is Health.OK for g in gpus)
    assert (gpus[3].power_watts, gpus[3].temperature_celsius, gpus[3].bus_id) == (60.0, 35.0, "0000:12:00.0")
    assert gpus[0].memory_used_bytes == 826 * MIB and gpus[0].memory_total_bytes == 65536 * MIB
    assert (gpus[0].driver_version, gpus[0].firmware_version) == ("3.4.4", "1.30.0.0")


def test_mx_smi_unavailable_state_is_critical_and_bad_field_degrades_one_gpu():
    text = fixture_text("mx-smi_c500x8_2.2.9.txt")
    text = text.replace(
        "| 58W / 350W       | 37C          P0 | 826/65536 MiB       | Available            |",
        "| 58W / 350W       | 37C          P0 | 826/65536 MiB       | Unavailable          |",
    )
    text = text.replace("| 60W / 350W       | 35C ", "| 60W / 350W       | hotC")
    gpus = mx_smi.parse(text)
    assert len(gpus) == 8 and gpus[1].health is Health.CRITICAL
    assert gpus[3].health is Health.DEGRADED and "Temp" in gpus[3].error and gpus[3].index == 3
    assert sum(g.health is Health.OK for g in gpus) == 6


def test_cnmon_one_bad_card_does_not_hide_the_others():
    text = fixture_text("cnmon_mlu370-x8.txt")
    lines = text.splitlines()
    mem_line = next(i for i, line in enumerate(lines) if "MiB/" in line)
    lines[mem_line] = lines[mem_line].replace("MiB/", "XiB/", 1)
    cards = cnmon.parse("\n".join(lines))
    good = cnmon.parse(text)
    assert [c.index for c in cards] == [c.index for c in good] and len(cards) == len(good) > 1
    assert cards[0].health is Health.DEGRADED and "memory" in cards[0].error
    assert all(c.health is Health.OK for c in cards[1:])


def test_cnmon_ecc_errors_are_critical():
    text = fixture_text("cnmon_mlu370-x8.txt").replace("| 0%                N/A |", "| 0%                  3 |", 1)
    cards = cnmon.parse(text)
    assert cards[0].health is Health.CRITICAL and cards[1].health is Health.OK


def test_nvidia_smi_uncorrectable_ecc_and_pending_retirement():
    xml = fixture_text("nvidia-smi-q-x_a100-sxm4.xml")
    assert nvidia_smi.parse(xml)[0].health is Health.OK
    ecc = xml.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    assert nvidia_smi.parse(ecc)[0].health is Health.CRITICAL
    t4 = fixture_text("nvidia-smi-q-x_tesla-t4.xml")
    pending = t4.replace("<pending_retirement>No</pending_retirement>", "<pending_retirement>Yes</pending_retirement>")
    assert pending != t4 and nvidia_smi.parse(pending)[0].health is Health.WARNING


def test_nvidia_smi_vgpu_guest_zero_temperature_is_unknown():
    xml = fixture_text("nvidia-smi-q-x_a100-sxm4.xml").replace("<gpu_temp>27 C</gpu_temp>", "<gpu_temp>0 C</gpu_temp>")
    assert nvidia_smi.parse(xml)[0].temperature_celsius == 0.0
    guest = xml.replace(
        "<virtualization_mode>None</virtualization_mode>", "<virtualization_mode>VGPU</virtualization_mode>"
    )
    assert nvidia_smi.parse(guest)[0].temperature_celsius is None


@pytest.mark.parametrize(
    ("fixture", "count", "power0", "temp0"),
    [
        ("hy-smi_k100-ai_dtk24.04.1.txt", 4, 118.0, 49.0),
        ("hy-smi_hcu-x8-400w.txt", 8, 114.0, 59.0),
        ("hy-smi_bw1000_dtk26.04.txt", 2, 80.0, 50.0),
    ],
)
def test_hy_smi_plain_summary_tables(fixture, count, power0, temp0):
    cards = hy_smi.parse(fixture_text(fixture))
    assert [c.index for c in cards] == list(range(count))
    assert all(c.health is Health.OK and not c.error and c.utilization_ratio == 0.0 for c in cards)
    assert (cards[0].power_watts, cards[0].temperature_celsius) == (power0, temp0)
    assert cards[0].memory_total_bytes is None  # the table has VRAM% only


def test_hy_smi_text_printed_around_the_json_is_ignored():
    text = "Driver version: 6.3.8\n" + fixture_text("hy-smi-json_bw.json") + "\n====== End of SMI Log ======\n"
    assert [c.index for c in hy_smi.parse(text)] == [0, 1]


def test_hy_smi_one_bad_figure_degrades_that_card():
    text = fixture_text("hy-smi_hcu-x8-400w.txt").replace("61.0C    109.0W", "61.0C    hot.0W ")
    cards = hy_smi.parse(text)
    assert len(cards) == 8 and cards[1].health is Health.DEGRADED and "AvgPwr" in cards[1].error
    assert sum(c.health is Health.OK for c in cards) == 7


@pytest.mark.parametrize(
    ("fixture", "ids", "driver"),
    [
        ("xpu_smi_kunlun-p800x8_5.0.21.26.txt", list(range(8)), "5.0.21.26"),
        ("xpu-smi_kunlun-p800_5.19.0.0.txt", [0, 1, 7], "5.19.0.0"),
    ],
)
def test_kunlun_xpu_smi_versions(fixture, ids, driver):
    xpus = xpu_smi.parse_kunlun(fixture_text(fixture))
    assert [x.index for x in xpus] == ids
    assert all(x.health is Health.OK and x.driver_version == driver and x.name == "P800 OAM" for x in xpus)
    assert all(x.memory_total_bytes == 98304 * MIB for x in xpus)


def test_kunlun_uncorrectable_ecc_is_critical():
    text = fixture_text("xpu-smi_kunlun-p800_5.19.0.0.txt").replace(
        "| 00000000:05:00.0 N/A |                    0 |", "| 00000000:05:00.0 N/A |                    2 |"
    )
    assert [x.health for x in xpu_smi.parse_kunlun(text)] == [Health.OK, Health.CRITICAL, Health.OK]


def test_npu_smi_a3_full_host_sixteen_dies_of_eight_cards():
    dies = npu_smi.parse(fixture_text("npu-smi-info_a3-ascend910x16_25.2.3.txt"))
    assert [d.index for d in dies] == list(range(16))
    assert [d.card for d in dies] == [n // 2 for n in range(16)]
    assert [d.visible_id for d in dies] == list(range(16))
    assert all(d.health is Health.OK and not d.error for d in dies)
    assert [d.power_watts is None for d in dies] == [n % 2 == 1 for n in range(16)]  # "-" on each second die
    assert dies[15].memory_used_bytes == 50242 * MIB and dies[15].bus_id == "0000:83:00.0"
    assert dies[12].utilization_ratio == 0.17 and dies[0].driver_version == "25.2.3"


def test_mx_smi_231():
    (gpu,) = mx_smi.parse(fixture_text("mx-smi_c500_2.3.1.txt"))
    assert (gpu.index, gpu.name, gpu.health, gpu.bus_id) == (0, "MetaX C500", Health.OK, "0000:12:00.0")
    assert (gpu.power_watts, gpu.temperature_celsius, gpu.utilization_ratio) == (37.0, 32.0, 0.0)
    assert (gpu.driver_version, gpu.firmware_version, gpu.memory_used_bytes) == ("3.8.30", "1.33.5.0", 826 * MIB)


def test_cnmon_v4_inited_driver_layout():
    cards = cnmon.parse(fixture_text("cnmon_mlu370-x4x3_v4.20.11.txt"))
    assert [c.index for c in cards] == [0, 1, 2]
    assert all(c.name == "MLU370-X4" and c.health is Health.OK and c.driver_version == "4.20.11" for c in cards)
    assert (cards[1].temperature_celsius, cards[1].power_watts) == (33.0, 25.0)
    assert cards[0].memory_total_bytes == 23308 * MIB and cards[0].bus_id == ""


def test_cnmon_v5_ecc_count_zero_is_ok():
    cards = cnmon.parse(fixture_text("cnmon_mlu370-x8_v5.10.22.txt"))
    assert [c.index for c in cards] == [0, 1] and all(c.health is Health.OK for c in cards)
    assert cards[1].bus_id == "0000:16:00.0" and cards[0].memory_total_bytes == 20638 * MIB
