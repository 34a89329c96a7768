"""What every ``xinserve audit`` command shares: exit codes, one-line errors, the store named
by ``--store`` and the checks of the options.

Exit codes: 0 ok, 1 verification failed, 2 usage or bad input, 3 environment error (store
unreachable). Errors are one line on stderr: never a stack trace, a DSN or key material.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from audit.errors import AuditConfigError, AuditEncodingError, AuditRangeError, AuditStoreError, UnknownChainError
from audit.records import MAX_SAFE_INT

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ENV = 0, 1, 2, 3
DEFAULT_STORE = "/var/lib/xinserve/audit/audit.db"


def err(msg: str) -> None:
    """Print ``msg`` as one ``xinserve audit:`` line on stderr."""
    print(f"xinserve audit: {msg}", file=sys.stderr)


def guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``fn`` with the options checked and every error turned into one line and an exit code."""

    def wrapper(args: argparse.Namespace) -> int:
        from trust.errors import TrustError

        try:
            check_text_options(args)
            return fn(args)
        except AuditStoreError as exc:
            err(f"audit store unreachable: {exc}")
            return EXIT_ENV
        except (AuditConfigError, AuditEncodingError, AuditRangeError, UnknownChainError, TrustError) as exc:
            err(str(exc))
            return EXIT_USAGE
        except BrokenPipeError:
            return EXIT_OK
        except OSError as exc:
            err(f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}".rstrip(": "))
            return EXIT_USAGE
        except Exception as exc:  # never a stack trace (it could carry a DSN or data)
            err(f"unexpected error ({type(exc).__name__}); nothing was changed")
            return EXIT_ENV

    wrapper.__name__ = fn.__name__
    return wrapper


MAX_CHAIN_NAME = 128
"""Longest chain name (a writer's ``node_id``)."""


def check_text_options(args: argparse.Namespace) -> None:
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


def store_from_args(args: argparse.Namespace) -> Any:
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


def open_readonly(args: argparse.Namespace) -> Any:
    """The store of ``--store``, opened read-only."""
    from audit.stores import open_store

    return open_store(store_from_args(args), readonly=True)


def check_record_range(start: int | None, end: int | None) -> None:
    """``--from``/``--to``: record numbers ``1..2**53-1``, ``--from <= --to`` (``AuditRangeError``)."""
    for flag, value in (("--from", start), ("--to", end)):
        if value is not None and not 1 <= value <= MAX_SAFE_INT:
            raise AuditRangeError(f"{flag} must be a record number from 1 to {MAX_SAFE_INT} (got {value})")
    if start is not None and end is not None and start > end:
        raise AuditRangeError(f"--from {start} is after --to {end}")
