"""Retention: archive old records into sealed files, then purge them under a signed record.

A run (``await run_retention(log)``), on the log's writer thread so it serialises with appends:

1. ``cutoff = now - retention_days``; the purge range is the prefix of the chain whose records
   are all older than the cutoff *and* covered by a signed checkpoint.
2. The range and every checkpoint up to the first one covering its end are written to
   ``audit-<chain>-<from>-<to>.jsonl.gz`` (optionally SM4-GCM sealed in 1 MiB chunks,
   ``.sm4``), fsync'd and renamed into place, then read back and re-verified.
3. One transaction inserts a ``purge`` checkpoint (signed: range, ``anchor_hash`` = chain hash
   of the last purged record, cutoff, retention_days, archive name and SM3) and deletes the
   range. Verification then starts the chain at the anchor; a purge younger than 180 days,
   or a deletion without such a checkpoint, fails verification.
4. A ``retention_run`` record is appended to the log.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from audit import metrics
from audit.chain import GENESIS, CheckpointKind, SignedCheckpoint
from audit.config import MIN_RETENTION_DAYS
from audit.errors import AuditConfigError, AuditEncodingError, AuditError
from audit.records import AuditRecord, EventType
from audit.verify import DAY_MS, verify_archive_records
from trust.sm3 import sm3

if TYPE_CHECKING:
    from audit.log import AuditLog
    from audit.stores.base import Store

log = structlog.get_logger("xinserve.audit")

ARCHIVE_TYPE = "xinserve.audit.archive"
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class DiskStatus:
    used_ratio: float
    free_bytes: int
    warning: str | None


def check_disk(path: str | os.PathLike[str], warn_ratio: float = 0.9) -> DiskStatus:
    """Disk usage of the filesystem holding ``path``; warns (log + metric) above ``warn_ratio``."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return DiskStatus(0.0, 0, "audit filesystem usage cannot be read")
    ratio = usage.used / usage.total if usage.total else 1.0
    metrics.DISK_USED_RATIO.set(ratio)
    warning = None
    if ratio >= warn_ratio:
        warning = f"audit filesystem {ratio:.0%} full (warning at {warn_ratio:.0%})"
        log.warning("audit_disk_watermark", used_ratio=round(ratio, 4), free_bytes=usage.free)
    return DiskStatus(ratio, usage.free, warning)


@dataclass(frozen=True, slots=True)
class RetentionResult:
    chain: str
    cutoff_ms: int
    purged: int
    purged_from: int | None = None
    purged_through: int | None = None
    archive: Path | None = None
    checkpoint: SignedCheckpoint | None = None


async def run_retention(
    log_: AuditLog,
    *,
    retention_days: int | None = None,
    archive_dir: Path | None = None,
    archive_key: bytes | None = None,
    now_ms: int | None = None,
) -> RetentionResult:
    """Archive then purge everything older than ``retention_days`` on the log's own chain.

    Defaults come from ``log_.settings``; ``now_ms`` defaults to the log's clock (inject a
    clock into the log to test). Raises ``AuditConfigError`` for ``retention_days < 180``.
    """
    settings = log_.settings
    days = retention_days if retention_days is not None else (settings.retention_days if settings else None)
    if days is None or days < MIN_RETENTION_DAYS:
        raise AuditConfigError(f"retention_days must be at least {MIN_RETENTION_DAYS}")
    if archive_dir is None:
        if settings is None:
            raise AuditConfigError("retention needs an archive directory")
        archive_dir = settings.effective_archive_dir()
    if archive_key is None and settings is not None and settings.archive_encrypt:
        archive_key = settings.load_content_key()
    now = now_ms if now_ms is not None else log_._clock()
    cutoff = now - days * DAY_MS

    def job(store: Store, lg: AuditLog) -> RetentionResult:
        return _retention_sync(store, lg, days, cutoff, archive_dir, archive_key)

    result: RetentionResult = await log_.run_in_writer(job)
    await log_.append(
        AuditRecord(
            event=EventType.RETENTION_RUN,
            time_ms=log_._clock(),
            detail={
                "retention_days": days,
                "cutoff_ms": cutoff,
                "purged": result.purged,
                **({"purged_through": result.purged_through} if result.purged_through is not None else {}),
                **({"archive": result.archive.name} if result.archive is not None else {}),
            },
        )
    )
    log.info("audit_retention_run", chain=log_.chain, purged=result.purged, cutoff_ms=cutoff)
    return result


def _retention_sync(
    store: Store, lg: AuditLog, days: int, cutoff: int, archive_dir: Path, key: bytes | None
) -> RetentionResult:
    chain = lg.chain
    bounds = store.bounds(chain)
    if bounds is None:
        return RetentionResult(chain, cutoff, 0)
    cps = store.checkpoints(chain)
    covered = max((c.checkpoint.tree_size for c in cps), default=0)
    first_young = store.first_seq_at_or_after(chain, cutoff)
    through = (first_young - 1) if first_young is not None else bounds[1]
    through = min(through, covered)
    start = bounds[0]
    if through < start:
        return RetentionResult(chain, cutoff, 0)
    prev_hash = GENESIS
    for c in cps:
        if c.checkpoint.kind is CheckpointKind.PURGE:
            prev_hash = bytes.fromhex(str(c.checkpoint.extra["anchor_hash"]))
    if start > 1 and prev_hash == GENESIS:
        raise AuditError("records before the purge range are missing; refusing to purge (run verify)")
    # Checkpoints up to (and including) the first one covering the end of the range.
    sealing = [c for c in cps if c.checkpoint.tree_size >= through]
    last_n = sealing[0].checkpoint.n if sealing else cps[-1].checkpoint.n
    archived_cps = [c for c in cps if c.checkpoint.n <= last_n]

    archive_dir.mkdir(parents=True, exist_ok=True)
    name = f"audit-{_safe(chain)}-{start:012d}-{through:012d}.jsonl.gz" + (".sm4" if key else "")
    path = archive_dir / name
    header = {
        "type": ARCHIVE_TYPE,
        "v": 1,
        "chain": chain,
        "from": start,
        "through": through,
        "prev_hash": prev_hash.hex(),
        "cutoff_ms": cutoff,
        "retention_days": days,
        "encrypted": key is not None,
    }
    _write_archive(path, header, store.iter_hashes(chain, start, through), archived_cps, key)

    # Read back and re-verify before anything is deleted.
    _, rows, _ = read_archive(path, key)
    checked = verify_archive_records(rows, start - 1, prev_hash)
    anchor = store.hash_at(chain, through)
    if not isinstance(checked, tuple) or checked != (through, anchor):
        raise AuditError("the archive does not re-verify; nothing was purged")
    digest = file_sm3(path)
    st = lg._state
    saved = (st.cp_n, st.cp_digest)
    assert anchor is not None
    cp = lg._make_checkpoint(
        CheckpointKind.PURGE,
        {
            "purged_from": start,
            "purged_through": through,
            "anchor_hash": anchor.hex(),
            "cutoff_ms": cutoff,
            "retention_days": days,
            "archive": name,
            "archive_sm3": digest.hex(),
            "records": through - start + 1,
        },
    )
    try:
        n = store.purge(chain, through, cp)
    except BaseException:
        st.cp_n, st.cp_digest = saved
        raise
    lg._after_checkpoint(cp)
    return RetentionResult(chain, cutoff, n, start, through, path, cp)


def _safe(chain: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in chain)[:64]


def file_sm3(path: Path) -> bytes:
    from trust.sm3 import sm3_file

    return sm3_file(path)[0]


def _write_archive(
    path: Path,
    header: dict[str, Any],
    rows: Iterator[tuple[int, bytes, bytes]],
    checkpoints: list[SignedCheckpoint],
    key: bytes | None,
) -> None:
    tmp = path.with_name(path.name + ".tmp")
    raw = io.BytesIO() if key is not None else None
    with open(tmp, "wb") as fh:
        sink = raw if raw is not None else fh
        with gzip.GzipFile(fileobj=sink, mode="wb", mtime=0) as gz:
            gz.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            for seq, body, h in rows:
                gz.write(
                    b'{"seq":%d,"hash":"%s","body":%s}\n'
                    % (seq, h.hex().encode(), json.dumps(body.decode("utf-8"), ensure_ascii=False).encode())
                )
            for c in checkpoints:
                gz.write(json.dumps({"checkpoint": c.to_json()}, sort_keys=True).encode() + b"\n")
        if raw is not None and key is not None:
            from trust import sm4

            data = raw.getvalue()
            chunks = [data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK)] or [b""]
            fh.write(b"XAUDSM4\x01")
            for i, chunk in enumerate(chunks):
                aad = _aad(path.name, i, i == len(chunks) - 1)
                sealed = sm4.seal(key, chunk, aad)
                fh.write(struct.pack(">I", len(sealed)) + sealed)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _aad(name: str, index: int, last: bool) -> bytes:
    return f"{name}|{index}|{int(last)}".encode()


def read_archive(
    path: Path, key: bytes | None = None
) -> tuple[dict[str, Any], list[tuple[int, bytes, bytes]], list[SignedCheckpoint]]:
    """``(header, [(seq, body, hash)], checkpoints)`` of an archive (decrypting with ``key``)."""
    data = path.read_bytes()
    if data.startswith(b"XAUDSM4\x01"):
        if key is None:
            raise AuditConfigError("the archive is encrypted: an SM4 key is needed")
        from trust import sm4
        from trust.errors import DecryptionError

        name = path.name
        pos, i, out = 8, 0, []
        while pos < len(data):
            (length,) = struct.unpack(">I", data[pos : pos + 4])
            sealed = data[pos + 4 : pos + 4 + length]
            pos += 4 + length
            try:
                out.append(sm4.open_(key, sealed, _aad(name, i, pos >= len(data))))
            except DecryptionError:
                raise AuditEncodingError("archive chunk fails SM4-GCM authentication") from None
            i += 1
        data = b"".join(out)
    try:
        lines = gzip.decompress(data).splitlines()
        header = json.loads(lines[0])
        if header.get("type") != ARCHIVE_TYPE:
            raise AuditEncodingError("not an audit archive")
        rows: list[tuple[int, bytes, bytes]] = []
        cps: list[SignedCheckpoint] = []
        for line in lines[1:]:
            obj = json.loads(line)
            if "checkpoint" in obj:
                cps.append(SignedCheckpoint.from_json(obj["checkpoint"]))
            else:
                rows.append((int(obj["seq"]), obj["body"].encode("utf-8"), bytes.fromhex(obj["hash"])))
    except (OSError, EOFError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise AuditEncodingError(f"malformed archive: {type(exc).__name__}") from None
    return header, rows, cps


def verify_archive(path: Path, keys: list[Any], key: bytes | None = None) -> list[str]:
    """Problems found in an archive (empty list: it verifies): chain, signatures, signed heads."""
    from trust.errors import InvalidSignature

    header, rows, cps = read_archive(path, key)
    problems: list[str] = []
    trusted = {k.key_id: k for k in keys}
    heads = {}
    for c in cps:
        k = trusted.get(c.checkpoint.key_id)
        if k is None:
            problems.append(f"checkpoint {c.checkpoint.n}: untrusted key")
            continue
        try:
            k.verify(c.signature, c.payload)
        except InvalidSignature:
            problems.append(f"checkpoint {c.checkpoint.n}: invalid signature")
            continue
        heads[c.checkpoint.tree_size] = c.checkpoint
    h = bytes.fromhex(header["prev_hash"])
    expect = int(header["from"])
    for seq, body, stored in rows:
        if seq != expect:
            problems.append(f"record {expect} missing")
            break
        h = sm3(h + body)
        if h != stored:
            problems.append(f"record {seq} altered")
            break
        cp = heads.get(seq)
        if cp is not None and cp.head != h:
            problems.append(f"records up to {seq} do not match signed checkpoint {cp.n}")
            break
        expect += 1
    if not problems and expect - 1 != int(header["through"]):
        problems.append(f"archive ends at {expect - 1}, header says {header['through']}")
    return problems
