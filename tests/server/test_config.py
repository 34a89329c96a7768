"""Configuration: file < environment < flags, and every bad option is named."""

from __future__ import annotations

import pytest

from service.cli import main
from service.settings.config import ConfigError, load_settings


def test_defaults_are_loopback_plaintext():
    s = load_settings()
    assert s.listen.plaintext == ["127.0.0.1:50051"]
    assert s.limits.max_message_bytes == 64 * 1024 * 1024
    assert s.reflection is True


def test_precedence_file_env_cli(tmp_path, monkeypatch):
    cfg = tmp_path / "x.yaml"
    cfg.write_text("admission:\n  max_in_flight: 3\n  max_queue: 7\nengine:\n  max_num_seqs: 2\n")
    monkeypatch.setenv("XINSERVE_ADMISSION__MAX_IN_FLIGHT", "5")
    s = load_settings(cfg, {"engine": {"max_num_seqs": 9}})
    assert s.admission.max_in_flight == 5  # env beats file
    assert s.admission.max_queue == 7  # file beats default
    assert s.engine.max_num_seqs == 9  # CLI beats file


def test_all_bad_options_named(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("admission:\n  max_in_flight: 0\nengine:\n  device: quantum\nbogus: 1\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    text = str(err.value)
    assert "admission.max_in_flight" in text
    assert "engine.device" in text
    assert "bogus" in text


def test_plaintext_remote_listener_refused_unless_allowed():
    with pytest.raises(ConfigError) as err:
        load_settings(overrides={"listen": {"plaintext": ["0.0.0.0:50051"]}})
    assert "listen.plaintext" in str(err.value)
    s = load_settings(overrides={"listen": {"plaintext": ["0.0.0.0:50051"], "allow_insecure_remote": True}})
    assert s.listen.plaintext == ["0.0.0.0:50051"]


def test_tls_listener_needs_cert_files(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_settings(overrides={"listen": {"tls": ["0.0.0.0:443"]}})
    assert "tls.cert_file" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_settings(
            overrides={"listen": {"tls": ["0.0.0.0:443"]}, "tls": {"cert_file": str(tmp_path / "a"), "key_file": "b"}}
        )
    assert "no such file" in str(err.value)


def test_invalid_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")


def test_serve_exits_2_on_bad_config(capsys):
    assert main(["serve", "--max-in-flight", "0", "--no-metrics"]) == 2
    err = capsys.readouterr().err
    assert "admission.max_in_flight" in err
    assert "Traceback" not in err


def test_serve_exits_2_on_bad_model_spec(capsys):
    assert main(["serve", "--model", "nameonly"]) == 2
    assert "--model" in capsys.readouterr().err


def test_token_new_prints_a_usable_line(capsys, tmp_path):
    from service.access.auth import Authenticator, load_token_file

    assert main(["token", "new", "--principal", "svc-b", "--roles", "user,admin"]) == 0
    out = capsys.readouterr().out.splitlines()
    token = out[0].rsplit(" ", 1)[1]
    line = out[1].split(": ", 1)[1]
    path = tmp_path / "tokens"
    path.write_text(line + "\n")
    principal = Authenticator(load_token_file(path), required=True).authenticate(f"Bearer {token}", {})
    assert principal.name == "svc-b" and principal.roles == {"user", "admin"}


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--principal", "svc", "--roles", "bogus"], "unknown role(s) 'bogus'"),
        (["--principal", "svc", "--roles", "user,"], "unknown role(s) ''"),
        (["--principal", "svc", "--roles", "us er"], "unknown role(s) 'us er'"),
        (["--principal", "two words"], "--principal"),
        (["--principal", "svc#x"], "--principal"),
        (["--principal", "svc\x1b[31m"], "--principal"),
    ],
)
def test_token_new_refuses_what_the_token_file_cannot_hold(capsys, argv, words):
    assert main(["token", "new", *argv]) == 2
    captured = capsys.readouterr()
    assert words in captured.err and captured.out == ""  # no token printed for a refused line


def test_token_new_takes_custom_roles_when_asked(capsys):
    assert main(["token", "new", "--principal", "svc", "--roles", "teller", "--allow-custom-roles"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(" teller")


def test_bad_config_is_reported_before_the_engine_is_imported(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from service.cli import main; "
        "rc = main(['serve', '--max-in-flight', '0']); print(rc, 'vllm' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.stdout.split() == ["2", "False"], result.stderr[-1000:]
