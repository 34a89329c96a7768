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

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from audit import metrics
from audit.archive import ARCHIVE_TYPE, file_sm3, read_archive, write_archive
from audit.chain import GENESIS, CheckpointKind, SignedCheckpoint
from audit.config import MIN_RETENTION_DAYS, AuditSettings
from audit.errors import AuditConfigError, AuditError
from audit.records import AuditRecord, EventType
from audit.stores.base import Store
from audit.verify import DAY_MS, verify_archive_records
from audit.writer import ChainWriter

log = structlog.get_logger("xinserve.audit")


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


class RetainedLog(Protocol):
    """What retention needs of an ``AuditLog``: its settings (the defaults) and its chain writer."""

    @property
    def settings(self) -> AuditSettings | None: ...

    @property
    def writer(self) -> ChainWriter: ...


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
    log_: RetainedLog,
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
    writer = log_.writer
    days = retention_days if retention_days is not None else (settings.retention_days if settings else None)
    if days is None or days < MIN_RETENTION_DAYS:
        raise AuditConfigError(f"retention_days must be at least {MIN_RETENTION_DAYS}")
    if archive_dir is None:
        if settings is None:
            raise AuditConfigError("retention needs an archive directory")
        archive_dir = settings.effective_archive_dir()
    if archive_key is None and settings is not None and settings.archive_encrypt:
        archive_key = settings.load_content_key()
    now = now_ms if now_ms is not None else writer.clock()
    cutoff = now - days * DAY_MS

    def job(store: Store, lg: ChainWriter) -> RetentionResult:
        return _retention_sync(store, lg, days, cutoff, archive_dir, archive_key)

    result: RetentionResult = await writer.run_in_writer(job)
    await writer.append(
        AuditRecord(
            event=EventType.RETENTION_RUN,
            time_ms=writer.clock(),
            detail={
                "retention_days": days,
                "cutoff_ms": cutoff,
                "purged": result.purged,
                **({"purged_through": result.purged_through} if result.purged_through is not None else {}),
                **({"archive": result.archive.name} if result.archive is not None else {}),
            },
        )
    )
    log.info("audit_retention_run", chain=writer.chain, purged=result.purged, cutoff_ms=cutoff)
    return result


def _retention_sync(
    store: Store, lg: ChainWriter, days: int, cutoff: int, archive_dir: Path, key: bytes | None
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
    write_archive(path, header, store.iter_hashes(chain, start, through), archived_cps, key)

    # Read back and re-verify before anything is deleted.
    _, rows, _ = read_archive(path, key)
    checked = verify_archive_records(rows, start - 1, prev_hash)
    anchor = store.hash_at(chain, through)
    if not isinstance(checked, tuple) or checked != (through, anchor):
        raise AuditError("the archive does not re-verify; nothing was purged")
    digest = file_sm3(path)
    assert anchor is not None
    cp, n = lg.commit_checkpoint(
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
        lambda cp: store.purge(chain, through, cp),
    )
    return RetentionResult(chain, cutoff, n, start, through, path, cp)


def _safe(chain: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in chain)[:64]
