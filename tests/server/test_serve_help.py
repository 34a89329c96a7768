"""``xinserve serve --help`` documents every exit code the server uses."""

from __future__ import annotations

import argparse

import pytest

from service.cli.commands import add_commands


def test_serve_help_lists_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="xinserve")
    add_commands(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code, meaning in [
        ("0", "stopped cleanly"),
        ("2", "invalid configuration"),
        ("3", "environment error"),
        ("4", "no model could be served"),
        ("5", "signature did not verify"),
        ("6", "audit log"),
        ("7", "engine died"),
    ]:
        assert f"{code} " in text and meaning in text, (code, meaning)
    assert "7 a model's engine died" in text
