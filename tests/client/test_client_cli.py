"""The client subcommands of the ``xinserve`` CLI, in-process and as the installed command."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys

import pytest

from xinserve_client import cli

TINY = "xinserve-tiny-llama"


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_streams_text(stand_in, capsys):
    code, out, err = run(["generate", "--target", stand_in.target, "alpha beta gamma", "--max-tokens", "3"], capsys)
    assert (code, out, err) == (0, "alpha beta gamma\n", "")
    params = stand_in.state.last("GenerateStream").request.sampling_params
    assert params.max_tokens == 3 and not params.HasField("temperature")


def test_generate_sampling_flags(stand_in, capsys):
    argv = ["generate", "--target", stand_in.target, "x", "--temperature", "0", "--top-p", "0.9"]
    argv += ["--seed", "7", "--stop", "a", "--stop", "b", "--request-id", "cli-1", "--usage"]
    code, _, err = run(argv, capsys)
    assert code == 0
    call = stand_in.state.last("GenerateStream")
    params = call.request.sampling_params
    assert params.HasField("temperature") and params.temperature == 0.0
    assert params.top_p == pytest.approx(0.9) and params.seed == 7 and list(params.stop) == ["a", "b"]
    assert call.metadata["x-request-id"] == "cli-1"
    assert "usage: prompt_tokens=1 completion_tokens=1" in err


def test_generate_output_is_flushed_as_it_arrives(stand_in, monkeypatch):
    """The stand-in sends 'first ', then waits until the CLI has flushed it to stdout before
    sending the rest; a CLI that buffered would make it send GATE-TIMEOUT instead."""
    gate = stand_in.state.gate

    class Watcher(io.StringIO):
        def flush(self):
            super().flush()
            if "first " in self.getvalue():
                gate.set()

    out = Watcher()
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["generate", "--target", stand_in.target, "gated"]) == 0
    assert out.getvalue() == "first second\n"


def test_generate_no_stream_and_n(stand_in, capsys):
    code, out, _ = run(["generate", "--target", stand_in.target, "abc", "--n", "2"], capsys)
    assert code == 0
    assert out == "--- completion 0 ---\ncba\n--- completion 1 ---\ncba\n"
    code, out, _ = run(["generate", "--target", stand_in.target, "abc", "--no-stream"], capsys)
    assert (code, out) == (0, "cba\n")


def test_generate_prompt_from_stdin(stand_in, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("from stdin"))
    code, out, _ = run(["generate", "--target", stand_in.target, "-"], capsys)
    assert (code, out) == (0, "from stdin\n")


def test_invalid_argument_exits_2_naming_the_field(stand_in, capsys):
    code, out, err = run(["generate", "--target", stand_in.target, "x", "--temperature", "-1"], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("xinserve generate: error: INVALID_ARGUMENT:")
    assert "sampling_params.temperature: must be a finite number >= 0" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_server_error_exits_1(stand_in, capsys):
    code, _, err = run(["generate", "--target", stand_in.target, "-m", "missing", "x"], capsys)
    assert code == 1
    assert "NOT_FOUND: model 'missing' is not served" in err
    code, _, err = run(["models", "--target", stand_in.target, "nope"], capsys)
    assert code == 1 and "NOT_FOUND" in err
    code, _, err = run(["embed", "--target", stand_in.target, "-m", "status:PERMISSION_DENIED", "x"], capsys)
    assert code == 1 and "PERMISSION_DENIED" in err


def test_unreachable_exits_3(closed_port_target, capsys):
    code, _, err = run(["models", "--target", closed_port_target, "--timeout", "5"], capsys)
    assert code == 3
    assert "UNAVAILABLE" in err and closed_port_target in err and "Traceback" not in err


def test_server_sent_unavailable_exits_3_without_the_connection_hint(stand_in, capsys):
    code, _, err = run(["generate", "--target", stand_in.target, "-m", "loading", "x"], capsys)
    assert code == 3
    assert "UNAVAILABLE: model 'loading' is loading" in err
    assert "is the server running" not in err and "Traceback" not in err


def test_resource_exhausted_exits_1_with_retry_hint(stand_in, capsys):
    code, _, err = run(["chat", "--target", stand_in.target, "-m", "busy", "hi"], capsys)
    assert code == 1 and "RESOURCE_EXHAUSTED" in err and "retry after 2.5 s" in err


def test_usage_errors_exit_2(stand_in, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["generate", "--max-tokens", "many", "x"])
    assert info.value.code == 2
    capsys.readouterr()
    code, _, err = run(["models", "--target", stand_in.target, "--cert", "c.pem"], capsys)
    assert code == 2 and "client_cert and client_key" in err
    code, _, err = run(["models", "--target", "10.1.2.3:50051", "--token", "t"], capsys)
    assert code == 2 and "plaintext" in err
    code, _, err = run(["generate", "--target", stand_in.target, "--ca", "/nonexistent.pem", "x"], capsys)
    assert code == 2 and "cannot read ca_cert" in err


def test_token_from_env(stand_in, capsys, monkeypatch):
    monkeypatch.setenv("XINSERVE_TOKEN", "env-token")
    monkeypatch.setenv("XINSERVE_TARGET", stand_in.target)
    code, _, _ = run(["models"], capsys)
    assert code == 0
    assert stand_in.state.last("ListModels").metadata["authorization"] == "Bearer env-token"


def test_chat_streams_reply(stand_in, capsys):
    code, out, _ = run(["chat", "--target", stand_in.target, "--system", "be brief", "hello there"], capsys)
    assert (code, out) == (0, "hello there\n")
    request = stand_in.state.last("ChatStream").request
    assert [(m.role, m.content) for m in request.messages] == [("system", "be brief"), ("user", "hello there")]


def test_chat_no_stream(stand_in, capsys):
    code, out, _ = run(["chat", "--target", stand_in.target, "--no-stream", "hi"], capsys)
    assert (code, out) == (0, "you said: hi\n")


def test_embed_one_text_prints_vector(stand_in, capsys):
    code, out, _ = run(["embed", "--target", stand_in.target, "ab"], capsys)
    assert code == 0
    values = [float(v) for v in out.strip().strip("[]").split(",")]
    assert len(values) == 26 and values[0] == pytest.approx(2**-0.5, abs=1e-6)


def test_embed_several_texts_prints_similarities(stand_in, capsys):
    code, out, _ = run(["embed", "--target", stand_in.target, "abc", "cab", "xyz"], capsys)
    assert code == 0
    lines = [line.split("\t") for line in out.splitlines()]
    assert [(a, b) for _, a, b in lines] == [("abc", "cab"), ("abc", "xyz"), ("cab", "xyz")]
    assert float(lines[0][0]) == pytest.approx(1.0) and float(lines[1][0]) == pytest.approx(0.0)
    request = stand_in.state.last("Embed").request
    assert request.model == "all-MiniLM-L6-v2" and not request.HasField("normalize")


def test_models_table_and_detail(stand_in, capsys):
    code, out, _ = run(["models", "--target", stand_in.target], capsys)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "KIND", "STATE", "VERIFICATION", "CONTEXT", "DEVICE"]
    assert rows[1] == [TINY, "generate", "ready", "not_checked", "2048", "cpu"]
    assert rows[2] == ["all-MiniLM-L6-v2", "embed", "ready", "verified", "512", "cpu"]
    assert out.splitlines()[3].split()[:3] == ["tampered", "generate", "failed"]
    assert "(signature does not verify)" in out
    code, out, _ = run(["models", "--target", stand_in.target, "all-MiniLM-L6-v2"], capsys)
    assert code == 0 and "manifest_digest:     sm3:00ff" in out


def test_registered_on_the_xinserve_command(stand_in, capsys):
    import service.cli as service_cli

    assert "xinserve_client.cli" in service_cli._CONTRIBUTORS
    assert service_cli.main(["models", "--target", stand_in.target]) == 0
    assert "xinserve-tiny-llama" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv not on PATH")
def test_installed_xinserve_command_exit_codes(stand_in, closed_port_target):
    env = {**os.environ, "XINSERVE_TARGET": stand_in.target}
    ok = subprocess.run(
        ["uv", "run", "--no-sync", "xinserve", "generate", "one two"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert (ok.returncode, ok.stdout) == (0, "one two\n"), ok.stderr
    down = subprocess.run(
        ["uv", "run", "--no-sync", "xinserve", "models", "--target", closed_port_target, "--timeout", "5"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert down.returncode == 3 and "UNAVAILABLE" in down.stderr and "Traceback" not in down.stderr
