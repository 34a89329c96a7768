"""Evidence providers: configfs-tsm against an emulated kernel layout, Hygon CSV packing against
recorded reports, ``none`` and ``recorded``."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, hmac

from tests.tee.configfs_emulator import KernelConfigfs
from tests.tee.conftest import FIXTURES
from trust.sm3 import sm3
from trust.tee import csv_guest
from trust.tee.config import TeeSettings
from trust.tee.configfs_tsm import ConfigfsTsmProvider
from trust.tee.errors import EvidenceError, TeeReason
from trust.tee.evidence import EvidenceProvider
from trust.tee.none_provider import NoTeeProvider
from trust.tee.parsers import parse_csv_evidence, parse_sample_evidence, parse_snp_report, parse_tdx_quote
from trust.tee.providers import provider_from_settings
from trust.tee.recorded import RecordedProvider


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "sys" / "kernel" / "config" / "tsm" / "report"
    r.mkdir(parents=True)
    return r


def test_configfs_tdx_round_trip_and_cleanup(root: Path) -> None:
    kernel = KernelConfigfs("tdx_guest")
    provider = ConfigfsTsmProvider(root, "tdx_guest", ops=kernel)
    assert isinstance(provider, EvidenceProvider)
    evidence = provider.collect(b"hello")
    assert evidence.tee == "tdx" and evidence.provider == "tdx_guest" and evidence.generation == 1
    assert parse_tdx_quote(evidence.raw).report_data == b"hello".ljust(64, b"\0")
    assert evidence.aux == b""
    assert list(root.iterdir()) == []  # the report directory is removed


def test_configfs_snp_reads_auxblob(root: Path) -> None:
    provider = ConfigfsTsmProvider(root, None, ops=KernelConfigfs("sev_guest"))
    assert provider.tee == "snp"  # probed from the kernel's provider attribute
    assert list(root.iterdir()) == []
    evidence = provider.collect(b"\x07" * 64)
    assert evidence.tee == "snp" and evidence.aux == b"\x01CERT-TABLE"
    assert parse_snp_report(evidence.raw).report_data == b"\x07" * 64


def test_concurrent_writer_is_retried_then_succeeds(root: Path) -> None:
    kernel = KernelConfigfs("tdx_guest", interfere=1)
    evidence = ConfigfsTsmProvider(root, "tdx_guest", ops=kernel).collect(b"x")
    assert parse_tdx_quote(evidence.raw).report_data[:1] == b"x"
    assert len(kernel.created) == 2 and list(root.iterdir()) == []


def test_concurrent_writer_every_time_is_refused(root: Path) -> None:
    kernel = KernelConfigfs("tdx_guest", interfere=100)
    with pytest.raises(EvidenceError) as err:
        ConfigfsTsmProvider(root, "tdx_guest", ops=kernel).collect(b"x")
    assert err.value.reason is TeeReason.CONCURRENT_WRITER
    assert "generation went from 0 to 2" in err.value.detail
    assert list(root.iterdir()) == []


def test_oversized_inblob_is_refused_before_the_kernel_sees_it(root: Path) -> None:
    kernel = KernelConfigfs("tdx_guest")
    with pytest.raises(EvidenceError) as err:
        ConfigfsTsmProvider(root, "tdx_guest", ops=kernel).collect(b"\0" * 65)
    assert err.value.reason is TeeReason.REPORT_DATA_SIZE
    assert kernel.created == []


def test_kernel_einval_is_a_provider_error(root: Path) -> None:
    class Lying(KernelConfigfs):
        def write(self, path: Path, data: bytes) -> None:
            super().write(path, data + b"\0" * 64)  # the kernel sees 65+ bytes: EINVAL

    with pytest.raises(EvidenceError) as err:
        ConfigfsTsmProvider(root, "tdx_guest", ops=Lying("tdx_guest")).collect(b"x")
    assert err.value.reason is TeeReason.PROVIDER_ERROR and "Invalid argument" in err.value.detail
    assert list(root.iterdir()) == []


def test_missing_configfs_is_provider_missing(tmp_path: Path) -> None:
    provider = ConfigfsTsmProvider(tmp_path / "absent", ops=KernelConfigfs())
    with pytest.raises(EvidenceError) as err:
        provider.collect(b"x")
    assert err.value.reason is TeeReason.PROVIDER_MISSING
    with pytest.raises(EvidenceError) as err:
        _ = provider.tee
    assert err.value.reason is TeeReason.PROVIDER_MISSING


def test_provider_mismatch(root: Path) -> None:
    with pytest.raises(EvidenceError) as err:
        ConfigfsTsmProvider(root, "tdx_guest", ops=KernelConfigfs("sev_guest")).collect(b"x")
    assert err.value.reason is TeeReason.PROVIDER_MISMATCH


def test_unknown_provider_name_in_kernel(root: Path) -> None:
    with pytest.raises(EvidenceError) as err:
        ConfigfsTsmProvider(root, None, ops=KernelConfigfs("weird_guest")).collect(b"x")
    assert err.value.reason is TeeReason.PROVIDER_ERROR


def test_real_configfs_root_absent_here() -> None:
    if Path("/sys/kernel/config/tsm/report").is_dir():
        pytest.skip("this machine has a real configfs-tsm, so its absence cannot be shown here")
    with pytest.raises(EvidenceError) as err:
        ConfigfsTsmProvider().collect(b"x")
    assert err.value.reason is TeeReason.PROVIDER_MISSING


# --- Hygon CSV ------------------------------------------------------------------------------


def test_csv_ioctl_number_and_argument() -> None:
    # _IOWR('D', 1, struct {u64 addr; u32 len;}) as the csv-guest driver declares it.
    assert csv_guest.CSV_CMD_GET_REPORT == 0xC0104401
    assert csv_guest.pack_ioctl_arg(0x1000, 4096) == struct.pack("<QI", 0x1000, 4096) + b"\0" * 4


def test_csv_request_page_matches_csv_rs_vector() -> None:
    # csv-rs ReportReq::new test vector (Apache-2.0): data, mnonce and SM3(data || mnonce).
    data = bytes.fromhex(
        "67c6697351ff4aec29cdbaabf2fbe3467cc254f81be8e78d765a2e63339fc99a66320db73158a35a255d051758e95ed4"
        "abb2cdc69bb454110e827441213ddc87"
    )
    mnonce = bytes.fromhex("70e93ea141e1fc673e017e97eadc6b96")
    page = csv_guest.pack_request(data, mnonce)
    assert len(page) == 4096 and page[:64] == data and page[64:80] == mnonce
    assert page[80:112].hex() == "134c086221f6f79b1c15f5b9764aa280520fa0e9d4826ab1590677f382150399"
    assert page[80:112] == sm3(data + mnonce) and page[112:] == bytes(4096 - 112)


def test_csv_recorded_report_parses() -> None:
    doc = json.loads((FIXTURES / "csv_evidence.json").read_bytes())
    report = csv_guest.parse_report(bytes(doc["attestation_report"]["data"]))
    assert report.anonce == 0x5DC7D726
    assert report.report_data == bytes(64)
    assert report.mnonce.hex() == "ad998a845c45cf30944d1c285629e768"
    assert report.policy == 0x45 and report.sig_usage == 0x1002 and report.sig_algo == 0x4


def _firmware_answer(report_data: bytes, mnonce: bytes, anonce: int = 0x11223344) -> bytes:
    """A response page built the way the firmware does (XOR with anonce, HMAC-SM3 signer MAC)."""
    a = struct.pack("<I", anonce)
    xor = lambda b: bytes(x ^ a[i % 4] for i, x in enumerate(b))  # noqa: E731
    body = xor(bytes(64)) + xor(report_data.ljust(64, b"\0")) + xor(mnonce) + xor(b"\x5a" * 32)
    body += struct.pack("<III", 0x45 ^ anonce, 0x1002 ^ anonce, 4 ^ anonce) + a + bytes(144)
    signer = xor(b"P" * 2084) + xor(b"SN".ljust(64, b"\0")) + bytes(32)
    mac = hmac.HMAC(mnonce, hashes.SM3())
    mac.update(signer)
    return (body + signer + mac.finalize()).ljust(4096, b"\0")


def test_csv_fresh_answer_is_checked_and_restored() -> None:
    mnonce = os.urandom(16)
    page = _firmware_answer(b"bind me", mnonce)
    report = csv_guest.check_response(page, b"bind me", mnonce)
    assert report.measure == b"\x5a" * 32
    restored = csv_guest.restore_signer(page)
    parsed = parse_csv_evidence(csv_guest.evidence_json(restored))
    assert parsed.report_data == b"bind me".ljust(64, b"\0")
    doc = json.loads(csv_guest.evidence_json(restored))
    assert bytes(doc["serial_number"]).rstrip(b"\0") == b"SN"


@pytest.mark.parametrize("damage", ["mnonce", "mac", "report_data", "truncated"])
def test_csv_answer_not_ours_is_refused(damage: str) -> None:
    mnonce = os.urandom(16)
    page = bytearray(_firmware_answer(b"bind me", mnonce))
    expected_data, expected_mnonce = b"bind me", mnonce
    if damage == "mnonce":
        expected_mnonce = bytes(16)
    elif damage == "mac":
        page[0x150 + 10] ^= 1
    elif damage == "report_data":
        expected_data = b"other"
    else:
        page = page[:1000]
    with pytest.raises(EvidenceError) as err:
        csv_guest.check_response(bytes(page), expected_data, expected_mnonce)
    assert err.value.reason is TeeReason.PROVIDER_ERROR


def test_csv_device_missing(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError) as err:
        csv_guest.CsvGuestProvider(str(tmp_path / "csv-guest")).collect(b"x")
    assert err.value.reason is TeeReason.PROVIDER_MISSING


# --- none and recorded ----------------------------------------------------------------------


def test_none_fails_closed() -> None:
    with pytest.raises(EvidenceError) as err:
        NoTeeProvider().collect(b"x")
    assert err.value.reason is TeeReason.NO_TEE


def test_recorded_refused_unless_allowed(recorded_file: Path) -> None:
    with pytest.raises(EvidenceError) as err:
        RecordedProvider(recorded_file, allow=False)
    assert err.value.reason is TeeReason.RECORDED_NOT_ALLOWED
    with pytest.raises(ValueError, match="allow_recorded"):
        TeeSettings(provider="recorded", recorded_evidence_file=recorded_file)


def test_recorded_is_marked_and_binds_report_data(recorded_file: Path) -> None:
    provider = provider_from_settings(
        TeeSettings(provider="recorded", recorded_evidence_file=recorded_file, allow_recorded=True)
    )
    evidence = provider.collect(b"abc")
    assert evidence.recorded and provider.recorded and evidence.tee == "sample"
    parsed = parse_sample_evidence(evidence.raw)
    assert parsed.recorded and parsed.report_data == b"abc".ljust(64, b"\0")
    assert json.loads(evidence.raw)["source"] == "tdx_quote_4.dat"


def test_default_settings_mean_no_tee() -> None:
    assert isinstance(provider_from_settings(TeeSettings()), NoTeeProvider)
