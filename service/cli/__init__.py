"""The ``xinserve`` command: one entry point with subcommands.

Subcommands are contributed by the packages that own them: ``service`` (serve, devices, generate,
chat, embed, models), ``trust`` (keys, sign, verify) and ``audit`` (audit). Each
contributor exposes ``add_commands(subparsers)``; every subcommand sets ``func(args) -> int``,
the process exit code.
"""

from __future__ import annotations

import argparse
import importlib

from service.lifecycle.exit_codes import ExitCode

_CONTRIBUTORS = ("service.cli.commands", "service.cli.device_commands", "xinserve_client.cli", "trust.cli", "audit.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xinserve",
        description="xinserve: a gRPC inference service over vLLM with SM2-signed models and an audit log.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in _CONTRIBUTORS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
