"""``xinserve audit verify`` (a store, its anchors, or one retention archive) and
``xinserve audit seal`` (close a chain whose writer crashed and never came back).

``verify`` exits 1 also for no log, or one without records, unless ``--allow-empty``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from audit.cli_support import (
    EXIT_ENV,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    check_record_range,
    err,
    guard,
    store_from_args,
)
from audit.errors import AuditConfigError, AuditStoreError, UnknownChainError


def _load_keys(paths: list[str]) -> list[Any]:
    from trust.sm2 import Sm2PublicKey

    if not paths:
        raise AuditConfigError("--public-key is required: verification needs the server's trusted key")
    return [Sm2PublicKey.from_pem(Path(p).read_bytes()) for p in paths]


def _load_tsa_roots(paths: list[str]) -> list[Any]:
    from audit.timestamping import load_tsa_roots

    roots: list[Any] = []
    for p in paths:
        try:
            roots.extend(load_tsa_roots(Path(p).read_bytes()))
        except ValueError:
            raise AuditConfigError(f"--tsa-cert {Path(p).name} is not a PEM certificate") from None
    return roots


@guard
def run_verify(args: argparse.Namespace) -> int:
    """``xinserve audit verify``: the report on stdout (text or ``--json``), the exit code."""
    from audit.config import parse_sm4_key

    check_record_range(args.start, args.end)
    keys = _load_keys(args.public_key)
    if args.archive is not None:
        return _verify_one_archive(args, keys)
    from audit.anchors import AnchorSet, load_anchors

    anchors = load_anchors(args.anchor) if args.anchor else AnchorSet()
    for name, n in anchors.skipped.items():
        err(f"note: {n} lines of anchor file {name} skipped: not text (not UTF-8 or NUL bytes), no anchor in them")
    tsa_roots = _load_tsa_roots(args.tsa_cert) if args.tsa_cert else None
    archive_key = parse_sm4_key(args.archive_key_file.read_bytes()) if args.archive_key_file else None
    report, missing = _verify(args, keys, anchors, tsa_roots, archive_key)
    # Nothing to verify proves nothing: an auditor must not read a deleted, emptied or dropped log as intact.
    empty = not report.chains
    ok = report.ok and (args.allow_empty or not empty)
    if args.json:
        doc = report.to_json()
        doc["ok"] = ok
        if empty:
            doc["empty"] = "missing" if missing else "no_records"
        print(json.dumps(doc, ensure_ascii=False))
    else:
        if empty:
            _print_empty(missing, args.allow_empty)
        for c in report.chains:
            _print_chain(c, args.start)
    return EXIT_OK if ok else EXIT_FAILED


def _verify(
    args: argparse.Namespace, keys: list[Any], anchors: Any, tsa_roots: list[Any] | None, archive_key: bytes | None
) -> tuple[Any, bool]:
    """The ``VerifyReport`` of the store of ``--store``, and whether that store is missing (then
    the report says what the anchors show was deleted)."""
    from audit.verify import VerifyReport, missing_store_report, verify_store

    try:
        settings = store_from_args(args)
    except AuditStoreError as exc:
        if "does not exist" not in str(exc):
            raise
        if anchors:
            return missing_store_report(anchors, "the audit database does not exist (deleted)", keys), True
        return VerifyReport(chains=[]), True
    from audit.stores import open_store

    bar = _progress(args)
    with open_store(settings, readonly=True) as store:
        report = verify_store(
            store,
            keys,
            chain=args.chain,
            start=args.start,
            end=args.end,
            now_ms=None if args.offline else int(time.time() * 1000),
            anchors=anchors,
            progress=bar.update if bar is not None else None,
            tsa_roots=tsa_roots,
            archive_dir=args.archive_dir,
            archive_key=archive_key,
        )
    if bar is not None:
        bar.close()
    return report, False


def _verify_one_archive(args: argparse.Namespace, keys: list[Any]) -> int:
    """``verify --archive FILE``: one retention archive (chain and signed checkpoints)."""
    from audit.archive import verify_archive
    from audit.config import parse_sm4_key

    key = parse_sm4_key(args.archive_key_file.read_bytes()) if args.archive_key_file else None
    problems = verify_archive(args.archive, keys, key)
    if args.json:
        print(json.dumps({"ok": not problems, "archive": args.archive.name, "problems": problems}))
    else:
        for msg in problems:
            print(f"FAIL {args.archive.name}: {msg}")
        if not problems:
            print(f"OK   {args.archive.name}: chain and signed checkpoints verify")
    return EXIT_OK if not problems else EXIT_FAILED


def _print_empty(missing: bool, allow_empty: bool) -> None:
    what = "the audit database does not exist" if missing else "no audit records or checkpoints found"
    if allow_empty:
        print(f"OK   {what} (--allow-empty)")
    else:
        print(f"FAIL {what}: nothing proves the log was never written (--allow-empty accepts an empty log)")


def _print_chain(c: Any, start: int | None) -> None:
    """The text lines of one chain's report (an ``audit.verify.ChainReport``)."""
    from audit.query import format_time_ms

    status = "OK  " if c.ok else "FAIL"
    span = f"records {c.first_seq}..{c.last_seq}" if c.first_seq is not None else "no records"
    if c.out_of_range:
        span = f"no records from {start} on (last record: {c.last_record or 'none'})"
    cp = (
        f"last checkpoint {c.last_checkpoint} at {format_time_ms(c.last_checkpoint_time_ms)}"
        if c.last_checkpoint is not None and c.last_checkpoint_time_ms is not None
        else "no checkpoint"
    )
    print(f"{status} chain {c.chain}: {span}, {c.checkpoints_checked} checkpoints, {cp}")
    if c.unsigned_tail:
        print(f"     {c.unsigned_tail} records after the last checkpoint (not yet signed)")
    for r in c.recoveries:
        print(f"     recovered: {r}")
    for p_ in c.purges:
        print(f"     purged: {p_}")
    if c.first_broken is not None:
        print(f"     first broken record: {c.first_broken}")
    for p in c.problems:
        print(f"     {p.kind}: {p.message}")


@guard
def run_seal(args: argparse.Namespace) -> int:
    """``xinserve audit seal``: reopen the chain (sealing a crashed tail) and close it."""
    import asyncio

    from audit.errors import AuditUnavailable, WriterConflict
    from audit.log import AuditIntegrityError, AuditLog, load_signer
    from audit.stores import open_store
    from trust.errors import InvalidSignature

    store_settings = store_from_args(args)
    settings = store_settings.model_copy(
        update={
            "node_id": args.chain,
            "signing_key_path": args.key,
            "signing_key_password_env": args.key_password_env,
            "signing_key_password_file": args.key_password_file,
            "allow_insecure_key_permissions": args.allow_insecure_key_permissions,
            "archive_dir": args.archive_dir,
            "writer_lock_wait_s": 2.0,
        }
    )
    signer = load_signer(settings)
    key_id = signer.public_key().key_id
    # Refuse before anything is written: a chain the store does not hold, or a key not the chain's.
    with open_store(store_settings, readonly=True) as store:
        if not store.has_chain(args.chain):
            err(f"--chain: {UnknownChainError(args.chain, store.chains())}; nothing was written")
            return EXIT_USAGE
        last = store.last_checkpoint(args.chain)
    if last is not None:
        if last.checkpoint.key_id != key_id:
            err(
                f"--key: key id {key_id} is not the key of chain {args.chain!r} (its checkpoints are signed "
                f"with key id {last.checkpoint.key_id}); nothing was written"
            )
            return EXIT_USAGE
        try:
            signer.public_key().verify(last.signature, last.payload)
        except InvalidSignature:
            err(
                f"chain {args.chain!r}: its last checkpoint {last.checkpoint.n} does not verify with the key; "
                "run `xinserve audit verify`; nothing was written"
            )
            return EXIT_FAILED

    async def seal() -> Any:
        log = await AuditLog.open(settings, signer, start_ticker=False)
        recovery = log.recovery
        await log.close()
        return recovery

    try:
        recovery = asyncio.run(seal())
    except WriterConflict:
        err(f"chain {args.chain!r} has a running writer; nothing to seal")
        return EXIT_USAGE
    except AuditIntegrityError as exc:
        err(f"{exc}")
        return EXIT_FAILED
    except AuditUnavailable as exc:
        err(str(exc))
        return EXIT_ENV
    if recovery is not None and recovery.unclean_shutdown:
        print(
            f"sealed chain {args.chain}: {recovery.unsigned_tail} unsigned records were intact; "
            f"recovery and closing checkpoints written (record {recovery.last_seq + 1} notes the recovery)"
        )
    else:
        print(f"chain {args.chain} was already closed cleanly; reopened and closed again")
    return EXIT_OK


def _progress(args: argparse.Namespace) -> Any:
    if args.json or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(unit=" records", unit_scale=True, desc="verifying", file=sys.stderr)
