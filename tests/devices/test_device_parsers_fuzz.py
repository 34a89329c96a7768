"""Hostile and damaged tool output: every parser returns well-formed devices or raises
DeviceParseError naming the tool; nothing else escapes (no crash, no other exception)."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_backends.devices import cnmon, hy_smi, mthreads_gmi, mx_smi, npu_smi, nvidia_smi, xpu_smi
from engine_backends.devices.model import Device, DeviceParseError, Health
from tests.devices.conftest import fixture_text

CASES = [
    (nvidia_smi.parse, "nvidia-smi-q-x_tesla-t4.xml"),
    (npu_smi.parse, "npu-smi-info_910b2c.txt"),
    (npu_smi.parse, "npu-smi-info_310p3.txt"),
    (xpu_smi.parse_kunlun, "xpu-smi_kunlun-p800.txt"),
    (xpu_smi.parse_intel, "xpu-smi_intel-arc-a770.txt"),
    (cnmon.parse, "cnmon_mlu370-x8.txt"),
    (mthreads_gmi.parse, "mthreads-gmi_s5000.txt"),
    (hy_smi.parse, "hy-smi-json_bw.json"),
    (mx_smi.parse, "mx-smi_c550.txt"),
    (npu_smi.parse, "npu-smi-info_a3-ascend910_25.5.1.txt"),
    (npu_smi.parse, "npu-smi-info_ascend950dt_25.6.rc1.txt"),
    (mthreads_gmi.parse, "mthreads-gmi_s5000x8_2.4.1.txt"),
    (mthreads_gmi.parse, "mthreads-gmi_s80_1.14.0.txt"),
    (mx_smi.parse, "mx-smi_c500x8_2.2.9.txt"),
    (mx_smi.parse, "mx-smi_c500_2.3.1.txt"),
    (cnmon.parse, "cnmon_mlu370-x4x3_v4.20.11.txt"),
    (hy_smi.parse, "hy-smi_hcu-x8-400w.txt"),
    (xpu_smi.parse_kunlun, "xpu_smi_kunlun-p800x8_5.0.21.26.txt"),
    (hy_smi.parse, "hy-smi_bw1000_dtk26.04.txt"),
]
TEXTS = {name: fixture_text(name) for _, name in CASES}
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# What a zh_CN locale or a vendor's localised build changes: translated headers and words,
# decimal commas, full-width separators.
LOCALE_SWAPS = [
    ("Health", "健康状态"),
    ("Name", "名称"),
    ("Driver Version", "驱动版本"),
    ("Memory-Usage", "显存使用"),
    ("OK", "正常"),
    (".", ","),
    ("|", "｜"),
    ("MiB", "兆字节"),
]


def check(parser, text: str) -> None:
    try:
        devices = parser(text)
    except DeviceParseError as exc:
        assert exc.tool and exc.reason and len(str(exc)) < 400
        return
    assert isinstance(devices, list)
    for d in devices:
        assert isinstance(d, Device) and 0 <= d.index < 2**16
        assert d.health is not Health.DEGRADED or d.error  # a degraded chip says which field
        if d.utilization_ratio is not None:
            assert 0.0 <= d.utilization_ratio <= 1.0
        for value in (d.memory_total_bytes, d.memory_used_bytes):
            assert value is None or value >= 0
        for value in (d.temperature_celsius, d.power_watts):
            assert value is None or math.isfinite(value)


@st.composite
def case(draw):
    return draw(st.sampled_from(CASES))


@FUZZ
@given(case(), st.floats(0, 1))
def test_truncated(c, fraction):
    parser, name = c
    text = TEXTS[name]
    check(parser, text[: int(len(text) * fraction)])


@FUZZ
@given(case(), st.randoms(use_true_random=False))
def test_lines_reordered(c, rnd):
    parser, name = c
    lines = TEXTS[name].splitlines()
    rnd.shuffle(lines)
    check(parser, "\n".join(lines))


@FUZZ
@given(case(), st.integers(0, 10_000), st.text(max_size=80))
def test_unknown_field_inserted(c, where, extra):
    parser, name = c
    lines = TEXTS[name].splitlines()
    at = where % (len(lines) + 1)
    check(parser, "\n".join([*lines[:at], extra, *lines[at:]]))


@FUZZ
@given(case(), st.lists(st.sampled_from(LOCALE_SWAPS), min_size=1, max_size=3, unique=True))
def test_other_locale(c, swaps):
    parser, name = c
    text = TEXTS[name]
    for old, new in swaps:
        text = text.replace(old, new)
    check(parser, text)


@FUZZ
@given(case(), st.integers(0, 10_000), st.integers(1, 20), st.text(max_size=20))
def test_bytes_overwritten(c, at, length, junk):
    parser, name = c
    text = TEXTS[name]
    at %= len(text)
    check(parser, text[:at] + junk + text[at + length :])


@FUZZ
@given(st.sampled_from([p for p, _ in CASES]), st.text(max_size=400))
def test_arbitrary_text(parser, text):
    check(parser, text)


def test_nvidia_xml_entity_expansion_refused():
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>'
    try:
        nvidia_smi.parse(bomb)
    except DeviceParseError as exc:
        assert "entity" in exc.reason
    else:
        raise AssertionError("an XML entity declaration was accepted")
