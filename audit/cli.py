"""``xinserve audit verify | export | tail | seal``.

Exit codes: 0 ok, 1 verification failed (for ``verify`` also: no log, or one without records,
unless ``--allow-empty``), 2 usage or bad input, 3 environment error (store unreachable).
Errors are one line on stderr: never a stack trace, a DSN or key material.

This module builds the parser and runs ``export`` and ``tail``; ``verify`` and ``seal`` run in
``audit.cli_verify``; what all of them share is ``audit.cli_support``.
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

from audit.cli_support import DEFAULT_STORE, EXIT_OK, guard, open_readonly
from audit.cli_verify import run_seal, run_verify
from audit.errors import AuditConfigError
from audit.records import MAX_SAFE_INT


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
    v.set_defaults(func=run_verify)

    e = sub.add_parser(
        "export",
        help="export records as JSON lines (filter by time, subject, method, outcome)",
        description="Export matching records as JSON lines, oldest first. Times are ISO 8601 (UTC if "
        "no offset) or epoch milliseconds.",
    )
    store_arg(e)
    e.add_argument("--since", help="records at or after this time (not before 1970)")
    e.add_argument("--until", help="records before this time (later than --since)")
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
    sl.set_defaults(func=run_seal)

    t = sub.add_parser("tail", help="show the latest records; -f to follow")
    store_arg(t)
    t.add_argument("-n", "--lines", type=int, default=20, help="how many recent records (default 20; 0 with -f)")
    t.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    t.add_argument("--interval", type=float, default=1.0, help="poll interval with -f, seconds (0 < s <= 3600)")
    t.set_defaults(func=_run_tail)


def _flag(flag: str, parse: Callable[[str], Any], text: str | None) -> Any:
    """``parse(text)`` for an option that was given, its message prefixed with the option."""
    if text is None:
        return None
    try:
        return parse(text)
    except AuditConfigError as exc:
        raise AuditConfigError(f"{flag}: {exc}") from None


def _filter(args: argparse.Namespace, **kw: Any) -> Any:
    """The ``QueryFilter`` of the command's options (``audit.query.query_filter``'s rule, as
    AuditService applies it); ``AuditConfigError`` (exit 2) naming each bad option.

    ``--since``/``--until`` are ISO 8601 times or epoch milliseconds (``parse_time_ms``).
    """
    from audit.query import FilterError, parse_time_ms, query_filter

    since = _flag("--since", parse_time_ms, getattr(args, "since", None))
    until = _flag("--until", parse_time_ms, getattr(args, "until", None))
    try:
        return query_filter(
            chain=args.chain,
            since_ms=since,
            until_ms=until,
            principal=getattr(args, "principal", None),
            method=getattr(args, "method", None),
            outcome=getattr(args, "outcome", None),
            event=getattr(args, "event", None),
            **kw,
        )
    except FilterError as exc:
        option = {"since_ms": "--since", "until_ms": "--until"}
        raise AuditConfigError(
            "; ".join(
                f"{option.get(field, '--' + field)} {message.replace('since_ms', '--since')}"
                for field, message in exc.violations
            )
        ) from None


@guard
def _run_export(args: argparse.Namespace) -> int:
    from audit.query import export_jsonl

    if args.limit is not None and not 1 <= args.limit <= MAX_SAFE_INT:
        raise AuditConfigError(f"--limit must be from 1 to {MAX_SAFE_INT} (got {args.limit})")
    flt = _filter(args, limit=args.limit)
    with open_readonly(args) as store:
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


@guard
def _run_tail(args: argparse.Namespace) -> int:
    from audit.query import stored_to_json

    if not 0 <= args.lines <= MAX_SAFE_INT:
        raise AuditConfigError(f"--lines must be from 0 to {MAX_SAFE_INT} (got {args.lines})")
    if not (math.isfinite(args.interval) and 0 < args.interval <= 3600):
        raise AuditConfigError(f"--interval must be more than 0 and at most 3600 seconds (got {args.interval})")
    with open_readonly(args) as store:
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
