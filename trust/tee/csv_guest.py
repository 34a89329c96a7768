"""Evidence from a Hygon CSV guest (``/dev/csv-guest``, ioctl ``CSV_CMD_GET_REPORT``).

Layout follows the Linux ``csv-guest`` driver and Hygon's csv-rs (Apache-2.0) as used by
Confidential Containers' attester and Trustee's CSV verifier:

* ioctl ``_IOWR('D', 1, struct csv_report_req)`` where ``csv_report_req`` is
  ``{u64 addr; u32 len}`` (16 bytes with padding) pointing at one page;
* the page starts with the request ``data[64] ‖ mnonce[16] ‖ SM3(data ‖ mnonce)[32]`` and the
  firmware overwrites it with the report (4096 bytes): ``TeeInfoV1`` (0x150 bytes:
  user_pubkey_digest[32], vm_id[16], vm_version[16], report_data[64], mnonce[16], measure[32],
  policy u32, sig_usage u32, sig_algo u32, anonce u32, signature[144]) then the signer
  (pek_cert[2084], sn[64], reserved[32], mac[32]). Every TeeInfoV1 field but ``anonce`` and the
  signer's pek_cert/sn arrive XOR-ed with ``anonce`` (little-endian, byte ``i`` with byte ``i % 4``);
  ``mac`` is HMAC-SM3 keyed with the mnonce over pek_cert ‖ sn ‖ reserved.

The evidence handed to a KBS is Trustee's CSV evidence JSON: ``{"attestation_report": {"magic":
[16 bytes], "flags": 0, "data": [4096 bytes]}, "serial_number": [bytes], "cert_chain": ...,
"cc_eventlog": null}``.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, hmac

from trust.sm3 import sm3
from trust.tee.errors import EvidenceError, EvidenceParseError, TeeReason
from trust.tee.evidence import TEE_CSV, Evidence, padded_report_data

DEVICE = "/dev/csv-guest"
PAGE = 4096
MNONCE_SIZE = 16
TEE_INFO_V1_SIZE = 0x150
SIGNER_OFFSET = TEE_INFO_V1_SIZE
PEK_CERT_SIZE = 2084
SN_SIZE = 64
SIGNER_SIZE = PEK_CERT_SIZE + SN_SIZE + 32 + 32
_IOC_WRITE_READ = 3
CSV_CMD_GET_REPORT = (_IOC_WRITE_READ << 30) | (16 << 16) | (ord("D") << 8) | 0x1


def pack_request(report_data: bytes, mnonce: bytes) -> bytes:
    """The page the ioctl is given: ``data[64] ‖ mnonce[16] ‖ SM3(data ‖ mnonce)``, zero-padded to 4096.

    Raises EvidenceError(report_data_size) for report data outside 1..64 bytes, ValueError for an
    mnonce that is not 16 bytes.
    """
    data = padded_report_data(report_data)
    if len(mnonce) != MNONCE_SIZE:
        raise ValueError("mnonce must be 16 bytes")
    return (data + mnonce + sm3(data + mnonce)).ljust(PAGE, b"\0")


def pack_ioctl_arg(address: int, length: int = PAGE) -> bytes:
    """``struct csv_report_req {u64 addr; u32 len;}`` in native layout (16 bytes)."""
    return struct.pack("=QI4x", address, length)


def _unxor(data: bytes, anonce: bytes) -> bytes:
    return bytes(b ^ anonce[i % 4] for i, b in enumerate(data))


@dataclass(frozen=True)
class CsvReport:
    """The fields of a version-1 CSV attestation report, with the anonce XOR removed."""

    user_pubkey_digest: bytes
    vm_id: bytes
    vm_version: bytes
    report_data: bytes
    mnonce: bytes
    measure: bytes
    policy: int
    sig_usage: int
    sig_algo: int
    anonce: int


def parse_report(page: bytes) -> CsvReport:
    """Parse a CSV report page (at least 0x150 bytes of TeeInfoV1).

    Raises EvidenceParseError for a truncated page.
    """
    if not isinstance(page, bytes | bytearray):
        raise EvidenceParseError("a CSV report is bytes", 0)
    if len(page) < TEE_INFO_V1_SIZE:
        raise EvidenceParseError(f"a CSV report is at least {TEE_INFO_V1_SIZE} bytes, got {len(page)}", len(page))
    page = bytes(page)
    anonce_b = page[188:192]
    anonce = struct.unpack("<I", anonce_b)[0]
    policy, usage, algo = (struct.unpack_from("<I", page, off)[0] ^ anonce for off in (176, 180, 184))
    return CsvReport(
        user_pubkey_digest=_unxor(page[0:32], anonce_b),
        vm_id=_unxor(page[32:48], anonce_b),
        vm_version=_unxor(page[48:64], anonce_b),
        report_data=_unxor(page[64:128], anonce_b),
        mnonce=_unxor(page[128:144], anonce_b),
        measure=_unxor(page[144:176], anonce_b),
        policy=policy,
        sig_usage=usage,
        sig_algo=algo,
        anonce=anonce,
    )


def check_response(page: bytes, report_data: bytes, mnonce: bytes) -> CsvReport:
    """Check a fresh firmware response against our request: mnonce echoed, signer MAC valid,
    report data ours. Returns the parsed report.

    Raises EvidenceError(provider_error) when the response is not an answer to this request.
    """
    if len(page) < SIGNER_OFFSET + SIGNER_SIZE:
        raise EvidenceError(TeeReason.PROVIDER_ERROR, "CSV firmware returned a truncated report")
    report = parse_report(page)
    if report.mnonce != mnonce:
        raise EvidenceError(TeeReason.PROVIDER_ERROR, "CSV report does not echo our mnonce")
    signer = page[SIGNER_OFFSET : SIGNER_OFFSET + SIGNER_SIZE]
    mac = hmac.HMAC(mnonce, hashes.SM3())
    mac.update(signer[: PEK_CERT_SIZE + SN_SIZE + 32])
    try:
        mac.verify(signer[PEK_CERT_SIZE + SN_SIZE + 32 :])
    except Exception:
        raise EvidenceError(TeeReason.PROVIDER_ERROR, "CSV report signer MAC does not verify") from None
    if report.report_data != padded_report_data(report_data):
        raise EvidenceError(TeeReason.PROVIDER_ERROR, "CSV report carries other report data than requested")
    return report


def restore_signer(page: bytes) -> bytes:
    """The page with the signer's pek_cert and serial number un-XOR-ed and ``reserved`` zeroed,
    as Trustee's verifier expects it."""
    anonce_b = page[188:192]
    start = SIGNER_OFFSET
    pek = _unxor(page[start : start + PEK_CERT_SIZE], anonce_b)
    sn = _unxor(page[start + PEK_CERT_SIZE : start + PEK_CERT_SIZE + SN_SIZE], anonce_b)
    rest = page[start + PEK_CERT_SIZE + SN_SIZE + 32 :]
    return page[:start] + pek + sn + b"\0" * 32 + rest


def evidence_json(page: bytes) -> bytes:
    """Trustee's CSV evidence JSON for a restored report page (serial number from the signer).

    The PEK certificate stays inside the report (``attestation_report.data``); a verifier that
    wants the decoded chain (``cert_chain``) decodes it from there or fetches it by serial number.
    """
    sn = page[SIGNER_OFFSET + PEK_CERT_SIZE : SIGNER_OFFSET + PEK_CERT_SIZE + SN_SIZE]
    doc = {
        "attestation_report": {"magic": [0] * 16, "flags": 0, "data": list(page[:PAGE].ljust(PAGE, b"\0"))},
        "serial_number": list(sn),
        "cc_eventlog": None,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


class CsvGuestProvider:
    """An :class:`~trust.tee.evidence.EvidenceProvider` over ``/dev/csv-guest``."""

    tee = TEE_CSV
    recorded = False

    def __init__(self, device: str = DEVICE) -> None:
        self.device = device

    def collect(self, report_data: bytes) -> Evidence:
        """Ask the Hygon secure processor for a report over ``report_data`` (≤ 64 bytes).

        Raises EvidenceError: ``report_data_size``, ``provider_missing`` (no device),
        ``provider_error`` (the ioctl failed, or the answer is not ours).
        """
        import fcntl
        import mmap

        padded_report_data(report_data)
        mnonce = os.urandom(MNONCE_SIZE)
        try:
            fd = os.open(self.device, os.O_RDWR)
        except FileNotFoundError:
            raise EvidenceError(TeeReason.PROVIDER_MISSING, f"no {self.device} (not a Hygon CSV guest?)") from None
        except OSError as exc:
            raise EvidenceError(TeeReason.PROVIDER_ERROR, f"cannot open {self.device}: {exc.strerror}") from None
        page = mmap.mmap(-1, PAGE)  # anonymous mapping: page-aligned, as the driver requires
        try:
            page[:] = pack_request(report_data, mnonce)
            import ctypes

            address = ctypes.addressof(ctypes.c_char.from_buffer(page))
            try:
                fcntl.ioctl(fd, CSV_CMD_GET_REPORT, pack_ioctl_arg(address))
            except OSError as exc:
                raise EvidenceError(
                    TeeReason.PROVIDER_ERROR, f"CSV_CMD_GET_REPORT failed: {exc.strerror or 'I/O error'}"
                ) from None
            response = bytes(page[:])
        finally:
            os.close(fd)
            try:
                page.close()
            except BufferError:
                pass
        report = check_response(response, report_data, mnonce)
        restored = restore_signer(response)
        return Evidence(
            tee=TEE_CSV,
            raw=evidence_json(restored),
            report_data=report.report_data,
            generation=int.from_bytes(mnonce, "big"),
            provider="csv-guest",
        )
