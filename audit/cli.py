"""``xinserve audit verify | export | tail | seal``.

Exit codes: 0 ok, 1 verification failed (for ``verify`` also: no log, or one without records,
unless ``--allow-empty``), 2 usage or bad input, 3 environment error (store unreachable).
Errors are one line on stderr: never a stack trace, a DSN or key material.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from audit.errors import AuditConfigError, AuditEncodingError, AuditRangeError, AuditStoreError, UnknownChainError
from audit.records import MAX_SAFE_INT

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ENV = 0, 1, 2, 3
DEFAULT_STORE = "/var/lib/xinserve/audit/audit.db"


def add_commands(subparsers: Any) -> None:
    """Register ``audit`` and its subcommands on the ``xinserve`` subparsers."""
    audit = subparsers.add_parser(
        "audit",
        help="verify, export and follow the tamper-evident audit log",
        description="Work with the audit log: verify its integrity, export records, follow new ones. "
        "Exit codes: 0 ok, 1 verification failed, 2 bad usage or input, 3 store unreachable.",
    )
    sub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    def store_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--store",
            default=os.environ.get("XINSERVE_AUDIT_STORE", DEFAULT_STORE),
            help="SQLite file (or sqlite:///path) or postgresql://... DSN "
            f"(default: $XINSERVE_AUDIT_STORE or {DEFAULT_STORE}, the container image's layout; a server "
            "with the default data_dir writes ~/.local/share/xinserve/audit/audit.db); a DSN may also come "
            "from $XINSERVE_AUDIT_DSN so it stays out of the process list",
        )
        p.add_argument("--chain", help="only this writer's chain (node id); default: all chains")

    v = sub.add_parser(
        "verify",
        help="check the hash chain and signed checkpoints; name the first broken record",
        description="Verify the audit log against the server's SM2 public key(s). Detects modified, "
        "deleted, inserted and reordered records, truncation, re-chained forgeries and purges "
        "before the retention period; reports crash recoveries (not tampering).",
    )
    store_arg(v)
    v.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="PEM",
        help="trusted SM2 public key (PEM) of the server; repeat for rotated keys (required)",
    )
    v.add_argument(
        "--from",
        dest="start",
        type=int,
        help="first record (sequence number, >= 1) to check; past a chain's last record is an error",
    )
    v.add_argument("--to", dest="end", type=int, help="last record to check (>= --from)")
    v.add_argument(
        "--anchor",
        action="append",
        default=[],
        metavar="FILE",
        help="anchors kept off the host: a checkpoint exported earlier (JSON), `export --checkpoints` "
        "output, an anchor file, or the syslog collector's file of the shipped stream; repeatable. The "
        "log must still hold every anchored checkpoint and record: rollback, wipe and truncation fail",
    )
    v.add_argument(
        "--tsa-cert",
        action="append",
        default=[],
        metavar="PEM",
        help="trusted root certificate(s) of the RFC 3161 time-stamping authority: check the anchors' "
        "time-stamps and prove every purge's age with them",
    )
    v.add_argument(
        "--archive-dir",
        type=Path,
        help="retention archive directory: every purge's archive must be there, unaltered, and verify",
    )
    v.add_argument(
        "--offline",
        action="store_true",
        help="skip the staleness check (the last checkpoint of a running writer must be recent)",
    )
    v.add_argument("--archive", type=Path, help="verify this retention archive instead of the store")
    v.add_argument("--archive-key-file", type=Path, help="SM4 key (hex) of an encrypted archive")
    v.add_argument(
        "--allow-empty",
        action="store_true",
        help="accept a log with no records (no tables, no records, or no SQLite file): exit 0 instead of 1",
    )
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(func=_run_verify)

    e = sub.add_parser(
        "export",
        help="export records as JSON lines (filter by time, subject, method, outcome)",
        description="Export matching records as JSON lines, oldest first. Times are ISO 8601 (UTC if "
        "no offset) or epoch milliseconds.",
    )
    store_arg(e)
    e.add_argument("--since", help="records at or after this time (not before 1970)")
    e.add_argument("--until", help="records before this time (not before --since)")
    e.add_argument(
        "--principal",
        help="the authenticated principal: a token's principal, or a certificate subject as a "
        "distinguished name, e.g. 'CN=teller-7,O=Bank' (attribute types in any case, spaces after "
        "commas, either RDN order: 'O=Bank,CN=teller-7' matches too)",
    )
    e.add_argument("--method", help="full gRPC method, e.g. /xinserve.v1.InferenceService/Generate")
    e.add_argument("--outcome", help="gRPC status code name (grpc.StatusCode), e.g. OK, PERMISSION_DENIED; any case")
    e.add_argument("--event", help="event type, e.g. rpc, model_loaded (see docs/audit.md)")
    e.add_argument("--limit", type=int, help="at most this many records (>= 1)")
    e.add_argument(
        "--checkpoints",
        action="store_true",
        help="export the signed checkpoints instead (keep the latest as an --anchor)",
    )
    e.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    e.set_defaults(func=_run_export)

    sl = sub.add_parser(
        "seal",
        help="seal the chain of a writer that crashed and will not come back (needs the server key)",
        description="Open a chain as its writer, re-verify its unsigned tail and write a recovery and a "
        "closing checkpoint, so `verify` no longer reports it as stale. For replicas that were removed "
        "after a crash. Fails if the chain's writer is still running.",
    )
    sl.add_argument(
        "--store",
        default=os.environ.get("XINSERVE_AUDIT_STORE", DEFAULT_STORE),
        help="SQLite file or postgresql://... DSN (or $XINSERVE_AUDIT_DSN)",
    )
    sl.add_argument("--chain", required=True, help="the node id of the chain to seal")
    sl.add_argument("--key", required=True, type=Path, help="the server's SM2 private key (PEM)")
    sl.add_argument("--key-password-env", help="environment variable holding the key's password")
    sl.add_argument("--key-password-file", type=Path, help="file holding the key's password (first line, 0600)")
    sl.add_argument(
        "--allow-insecure-key-permissions",
        action="store_true",
        help="warn instead of refusing a key or password file its group or others can access",
    )
    sl.add_argument("--archive-dir", type=Path, help="(PostgreSQL) retention archive directory")
    sl.set_defaults(func=_run_seal)

    t = sub.add_parser("tail", help="show the latest records; -f to follow")
    store_arg(t)
    t.add_argument("-n", "--lines", type=int, default=20, help="how many recent records (default 20; 0 with -f)")
    t.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    t.add_argument("--interval", type=float, default=1.0, help="poll interval with -f, seconds (0 < s <= 3600)")
    t.set_defaults(func=_run_tail)


def _err(msg: str) -> None:
    print(f"xinserve audit: {msg}", file=sys.stderr)


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapper(args: argparse.Namespace) -> int:
        from trust.errors import TrustError

        try:
            _check_text_options(args)
            return fn(args)
        except AuditStoreError as exc:
            _err(f"audit store unreachable: {exc}")
            return EXIT_ENV
        except (AuditConfigError, AuditEncodingError, AuditRangeError, UnknownChainError, TrustError) as exc:
            _err(str(exc))
            return EXIT_USAGE
        except BrokenPipeError:
            return EXIT_OK
        except OSError as exc:
            _err(f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}".rstrip(": "))
            return EXIT_USAGE
        except Exception as exc:  # never a stack trace (it could carry a DSN or data)
            _err(f"unexpected error ({type(exc).__name__}); nothing was changed")
            return EXIT_ENV

    wrapper.__name__ = fn.__name__
    return wrapper


MAX_CHAIN_NAME = 128
"""Longest chain name (a writer's ``node_id``)."""


def _check_text_options(args: argparse.Namespace) -> None:
    """Every text option must be UTF-8 (the store's encoding) and ``--chain`` 1..128 characters;
    ``AuditConfigError`` (exit 2) naming the option otherwise."""
    for dest, value in vars(args).items():
        if not isinstance(value, str):
            continue
        flag = "--" + dest.replace("_", "-")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise AuditConfigError(f"{flag}: not UTF-8 text") from None
    chain = getattr(args, "chain", None)
    if chain is not None and not 1 <= len(chain) <= MAX_CHAIN_NAME:
        raise AuditConfigError(f"--chain: a chain name is 1 to {MAX_CHAIN_NAME} characters (got {len(chain)})")


def _store_settings(args: argparse.Namespace) -> Any:
    """``AuditSettings`` of the store named by ``--store`` (or ``$XINSERVE_AUDIT_DSN``), which must exist."""
    from audit.config import store_from_url

    url = args.store
    dsn_env = os.environ.get("XINSERVE_AUDIT_DSN")
    if dsn_env and "XINSERVE_AUDIT_STORE" not in os.environ and args.store == DEFAULT_STORE:
        url = dsn_env
    settings = store_from_url(url)
    if settings.store == "sqlite" and not settings.path.exists():
        raise AuditStoreError("sqlite: the audit database does not exist")
    return settings


def _open(args: argparse.Namespace) -> Any:
    from audit.stores import open_store

    return open_store(_store_settings(args), readonly=True)


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


@_guard
def _run_verify(args: argparse.Namespace) -> int:
    from audit.config import parse_sm4_key
    from audit.query import format_time_ms
    from audit.verify import verify_store

    _check_record_range(args.start, args.end)
    keys = _load_keys(args.public_key)
    if args.archive is not None:
        from audit.archive import verify_archive

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
    from audit.anchors import AnchorSet, load_anchors
    from audit.verify import missing_store_report

    anchors = load_anchors(args.anchor) if args.anchor else AnchorSet()
    for name, n in anchors.skipped.items():
        _err(f"note: {n} lines of anchor file {name} skipped: not text (not UTF-8 or NUL bytes), no anchor in them")
    tsa_roots = _load_tsa_roots(args.tsa_cert) if args.tsa_cert else None
    archive_key = parse_sm4_key(args.archive_key_file.read_bytes()) if args.archive_key_file else None
    from audit.verify import VerifyReport

    missing = False
    try:
        settings = _store_settings(args)
    except AuditStoreError as exc:
        if "does not exist" not in str(exc):
            raise
        missing = True
        if anchors:
            report = missing_store_report(anchors, "the audit database does not exist (deleted)", keys)
        else:
            report = VerifyReport(chains=[])
    else:
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
            what = "the audit database does not exist" if missing else "no audit records or checkpoints found"
            if args.allow_empty:
                print(f"OK   {what} (--allow-empty)")
            else:
                print(f"FAIL {what}: nothing proves the log was never written (--allow-empty accepts an empty log)")
        for c in report.chains:
            status = "OK  " if c.ok else "FAIL"
            span = f"records {c.first_seq}..{c.last_seq}" if c.first_seq is not None else "no records"
            if c.out_of_range:
                span = f"no records from {args.start} on (last record: {c.last_record or 'none'})"
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
    return EXIT_OK if ok else EXIT_FAILED


@_guard
def _run_seal(args: argparse.Namespace) -> int:
    import asyncio

    from audit.errors import AuditUnavailable, WriterConflict
    from audit.log import AuditIntegrityError, AuditLog, load_signer
    from audit.stores import open_store
    from trust.errors import InvalidSignature

    store_settings = _store_settings(args)
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
            _err(f"--chain: {UnknownChainError(args.chain, store.chains())}; nothing was written")
            return EXIT_USAGE
        last = store.last_checkpoint(args.chain)
    if last is not None:
        if last.checkpoint.key_id != key_id:
            _err(
                f"--key: key id {key_id} is not the key of chain {args.chain!r} (its checkpoints are signed "
                f"with key id {last.checkpoint.key_id}); nothing was written"
            )
            return EXIT_USAGE
        try:
            signer.public_key().verify(last.signature, last.payload)
        except InvalidSignature:
            _err(
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
        _err(f"chain {args.chain!r} has a running writer; nothing to seal")
        return EXIT_USAGE
    except AuditIntegrityError as exc:
        _err(f"{exc}")
        return EXIT_FAILED
    except AuditUnavailable as exc:
        _err(str(exc))
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


def _check_record_range(start: int | None, end: int | None) -> None:
    """``--from``/``--to``: record numbers ``1..2**53-1``, ``--from <= --to`` (``AuditRangeError``)."""
    for flag, value in (("--from", start), ("--to", end)):
        if value is not None and not 1 <= value <= MAX_SAFE_INT:
            raise AuditRangeError(f"{flag} must be a record number from 1 to {MAX_SAFE_INT} (got {value})")
    if start is not None and end is not None and start > end:
        raise AuditRangeError(f"--from {start} is after --to {end}")


def _flag(flag: str, parse: Callable[[str], Any], text: str | None) -> Any:
    """``parse(text)`` for an option that was given, its message prefixed with the option."""
    if text is None:
        return None
    try:
        return parse(text)
    except AuditConfigError as exc:
        raise AuditConfigError(f"{flag}: {exc}") from None


def _filter(args: argparse.Namespace, **kw: Any) -> Any:
    """The ``QueryFilter`` of the command's options; ``AuditConfigError`` (exit 2) for a bad one.

    Times must lie in ``0..2**53-1`` ms with ``--since <= --until``; ``--event`` must be an
    ``EventType`` and ``--outcome`` a gRPC status code name (either in any case).
    ``--principal`` matches as ``audit.principals.principal_candidates`` says: as typed, or
    as the same distinguished name in canonical form, in the order typed or reversed.
    """
    from audit.principals import principal_candidates
    from audit.query import parse_event, parse_outcome, parse_time_ms
    from audit.stores.base import QueryFilter

    since = _flag("--since", parse_time_ms, getattr(args, "since", None))
    until = _flag("--until", parse_time_ms, getattr(args, "until", None))
    if since is not None and until is not None and since > until:
        raise AuditConfigError(f"--since {args.since} is later than --until {args.until}")
    principal = getattr(args, "principal", None)
    return QueryFilter(
        chain=args.chain,
        since_ms=since,
        until_ms=until,
        principal_any=principal_candidates(principal) if principal is not None else None,
        method=getattr(args, "method", None),
        outcome=_flag("--outcome", parse_outcome, getattr(args, "outcome", None)),
        event=_flag("--event", parse_event, getattr(args, "event", None)),
        **kw,
    )


@_guard
def _run_export(args: argparse.Namespace) -> int:
    from audit.query import export_jsonl

    if args.limit is not None and not 1 <= args.limit <= MAX_SAFE_INT:
        raise AuditConfigError(f"--limit must be from 1 to {MAX_SAFE_INT} (got {args.limit})")
    flt = _filter(args, limit=args.limit)
    with _open(args) as store:
        if args.chain is not None:
            store.require_chain(args.chain)
        out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
        try:
            if args.checkpoints:
                chains = [args.chain] if args.chain else store.chains()
                for c in chains:
                    for cp in store.checkpoints(c):
                        out.write(json.dumps(cp.to_json(), sort_keys=True) + "\n")
            else:
                export_jsonl(store, flt, out)
        finally:
            if args.output:
                out.close()
    return EXIT_OK


@_guard
def _run_tail(args: argparse.Namespace) -> int:
    from audit.query import stored_to_json

    if not 0 <= args.lines <= MAX_SAFE_INT:
        raise AuditConfigError(f"--lines must be from 0 to {MAX_SAFE_INT} (got {args.lines})")
    if not (math.isfinite(args.interval) and 0 < args.interval <= 3600):
        raise AuditConfigError(f"--interval must be more than 0 and at most 3600 seconds (got {args.interval})")
    with _open(args) as store:
        if args.chain is not None:
            store.require_chain(args.chain)
        rows = list(store.query(_filter(args, limit=args.lines, descending=True)))
        rows.reverse()
        last: dict[str, int] = {}
        for r in rows:
            print(json.dumps(stored_to_json(r), sort_keys=True, ensure_ascii=False), flush=True)
            last[r.chain] = max(last.get(r.chain, 0), r.seq)
        if not args.follow:
            return EXIT_OK
        from audit.stores.base import QueryFilter

        try:
            while True:
                time.sleep(args.interval)
                chains = [args.chain] if args.chain else store.chains()
                for c in chains:
                    for r in store.query(QueryFilter(chain=c, after_seq=last.get(c, 0))):
                        print(json.dumps(stored_to_json(r), sort_keys=True, ensure_ascii=False), flush=True)
                        last[c] = max(last.get(c, 0), r.seq)
        except KeyboardInterrupt:
            return EXIT_OK
