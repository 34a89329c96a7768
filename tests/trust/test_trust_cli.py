"""``xinserve keys|sign|verify`` end to end, in-process: messages and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trust_testutil import make_layout, make_model

from trust.cli import EXIT_ENV, EXIT_FAILED, EXIT_OK, EXIT_USAGE, main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def setup(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("XS_PW", "correct horse")
    rc, out, _ = run(capsys, "keys", "generate", "--private-key", tmp_path / "k.pem", "--password", "env:XS_PW")
    assert rc == EXIT_OK and "key id:" in out
    key_id = out.split("key id:")[1].strip()
    rc, _, _ = run(capsys, "keys", "trust", tmp_path / "k.pub.pem", "--trust-store", tmp_path / "ts", "--name", "dev")
    assert rc == EXIT_OK
    model = make_model(tmp_path / "model")
    return tmp_path, key_id, model


def test_keys_generate_protects_the_private_key(setup, capsys) -> None:
    tmp, key_id, _ = setup
    assert (tmp / "k.pem").stat().st_mode & 0o777 == 0o600
    assert b"ENCRYPTED PRIVATE KEY" in (tmp / "k.pem").read_bytes()
    rc, out, _ = run(capsys, "keys", "id", tmp / "k.pub.pem")
    assert rc == EXIT_OK and out.strip() == key_id
    rc, _, err = run(capsys, "keys", "generate", "--private-key", tmp / "k.pem", "--no-password")
    assert rc == EXIT_USAGE and "exists" in err
    rc, _, err = run(capsys, "keys", "generate", "--private-key", tmp / "k2.pem")
    assert rc == EXIT_USAGE and "--password" in err


def test_one_strict_password_reader_for_keys_generate_and_sign(setup, capsys, monkeypatch) -> None:
    tmp, _, model = setup
    generate = ["keys", "generate", "--private-key", tmp / "new.pem", "--password"]
    monkeypatch.setenv("ONE_CHAR", "x")
    rc, _, err = run(capsys, *generate, "env:ONE_CHAR")
    assert rc == EXIT_USAGE and "too short (1 characters; at least 8)" in err
    pw = tmp / "pw.txt"
    pw.write_text("long enough password\n")
    pw.chmod(0o644)
    rc, _, err = run(capsys, *generate, f"file:{pw}")
    assert rc == EXIT_USAGE and "mode 0644" in err and "chmod 600" in err
    pw.write_text("")
    pw.chmod(0o600)
    rc, _, err = run(capsys, *generate, f"file:{pw}")
    assert rc == EXIT_USAGE and "empty" in err
    assert not (tmp / "new.pem").exists()
    rc, _, err = run(capsys, *generate, "file:")
    assert rc == EXIT_USAGE and "env:VAR or file:PATH" in err
    pw.write_text("correct horse\n")
    rc, _, _ = run(capsys, *generate, f"file:{pw}")
    assert rc == EXIT_OK and b"ENCRYPTED PRIVATE KEY" in (tmp / "new.pem").read_bytes()
    # `sign` reads the password the same way: a file others can read is refused.
    pw.chmod(0o640)
    rc, _, err = run(capsys, "sign", "model", model, "--key", tmp / "new.pem", "--password", f"file:{pw}")
    assert rc == EXIT_USAGE and "mode 0640" in err and "Traceback" not in err
    pw.chmod(0o600)
    rc, _, _ = run(capsys, "sign", "model", model, "--key", tmp / "new.pem", "--password", f"file:{pw}")
    assert rc == EXIT_OK


def test_sign_and_verify_model(setup, capsys) -> None:
    tmp, key_id, model = setup
    rc, out, err = run(
        capsys, "sign", "model", model, "--key", tmp / "k.pem", "--password", "env:XS_PW", "--name", "tiny"
    )
    assert rc == EXIT_OK, err
    rc, out, _ = run(capsys, "verify", "model", model, "--trust-store", tmp / "ts")
    assert rc == EXIT_OK and "OK" in out and "dev" in out
    rc, out, _ = run(capsys, "verify", "model", model, "--trust-store", tmp / "ts", "--json", "--jobs", "1")
    assert rc == EXIT_OK and json.loads(out)["key_id"] == key_id
    (model / "config.json").write_text('{"architectures": ["EvilForCausalLM"]}')
    rc, out, err = run(capsys, "verify", "model", model, "--trust-store", tmp / "ts", "--json")
    assert rc == EXIT_FAILED
    assert json.loads(out)["reason"] == "file_size_changed"
    assert "[file_size_changed]" in err and "Traceback" not in err


def test_revoke_via_cli(setup, capsys) -> None:
    tmp, key_id, model = setup
    run(capsys, "sign", "model", model, "--key", tmp / "k.pem", "--password", "env:XS_PW")
    assert run(capsys, "keys", "revoke", key_id, "--trust-store", tmp / "ts", "--reason", "test")[0] == EXIT_OK
    rc, _, err = run(capsys, "verify", "model", model, "--trust-store", tmp / "ts")
    assert rc == EXIT_FAILED and "revoked_key" in err


def test_exit_codes_for_bad_input_and_environment(setup, capsys, monkeypatch) -> None:
    tmp, _, model = setup
    rc, _, err = run(capsys, "sign", "model", model, "--key", tmp / "k.pem", "--password", "env:NOPE")
    assert rc == EXIT_USAGE and "NOPE" in err
    monkeypatch.setenv("BAD_PW", "wrong")
    rc, _, err = run(capsys, "sign", "model", model, "--key", tmp / "k.pem", "--password", "env:BAD_PW")
    assert rc == EXIT_USAGE and "password" in err and "Traceback" not in err
    rc, _, err = run(capsys, "sign", "model", model, "--key", tmp / "missing.pem")
    assert rc == EXIT_ENV
    rc, _, _ = run(capsys, "sign", "model", tmp / "nope", "--key", tmp / "k.pem")
    assert rc == EXIT_ENV
    rc, _, err = run(capsys, "verify", "model", model, "--trust-store", tmp / "no-store")
    assert rc == EXIT_ENV
    rc, _, err = run(capsys, "verify", "model", model, "--trust-store", tmp / "ts")
    assert rc == EXIT_FAILED and "[unsigned]" in err
    rc, _, _ = run(capsys, "verify", "model", tmp / "nope", "--trust-store", tmp / "ts")
    assert rc == EXIT_ENV
    (tmp / "k.pub.pem").write_text("garbage")
    rc, _, err = run(capsys, "keys", "trust", tmp / "k.pub.pem", "--trust-store", tmp / "ts", "--name", "x")
    assert rc == EXIT_USAGE
    with pytest.raises(SystemExit) as ei:
        main(["verify", "model"])
    assert ei.value.code == 2


def test_sign_and_verify_image_by_digest(setup, capsys) -> None:
    tmp, _, _ = setup
    digest = "sha256:" + "12" * 32
    rc, _, err = run(
        capsys,
        "sign",
        "image",
        "--digest",
        digest,
        "--reference",
        "reg.cn/x:1",
        "--key",
        tmp / "k.pem",
        "--password",
        "env:XS_PW",
        "-o",
        tmp / "img.sig",
    )
    assert rc == EXIT_OK, err
    rc, out, _ = run(
        capsys,
        "verify",
        "image",
        "--digest",
        digest,
        "--signature",
        tmp / "img.sig",
        "--trust-store",
        tmp / "ts",
    )
    assert rc == EXIT_OK and "reg.cn/x:1" in out
    rc, _, err = run(
        capsys,
        "verify",
        "image",
        "--digest",
        "sha256:" + "34" * 32,
        "--signature",
        tmp / "img.sig",
        "--trust-store",
        tmp / "ts",
    )
    assert rc == EXIT_FAILED and "subject_mismatch" in err
    rc, _, _ = run(
        capsys,
        "sign",
        "image",
        "--digest",
        "sha256:zz",
        "--reference",
        "r:1",
        "--key",
        tmp / "k.pem",
        "--password",
        "env:XS_PW",
        "-o",
        tmp / "x",
    )
    assert rc == EXIT_USAGE


def test_service_cli_registers_trust_commands() -> None:
    try:
        from service.cli import build_parser
    except Exception as e:  # the service package is another engineer's, and may be mid-change
        pytest.skip(f"service.cli not importable here: {type(e).__name__}: {e}")
    parser = build_parser()
    args = parser.parse_args(["verify", "model", "d", "--trust-store", "t"])
    assert callable(args.func)


def test_sign_and_verify_image_layout_with_referrer(setup, capsys, tmp_path: Path) -> None:
    tmp, _, _ = setup
    layout = tmp_path / "layout"
    digest = make_layout(layout, multi_platform=True)
    rc, out, err = run(
        capsys,
        "sign",
        "image",
        "--layout",
        layout,
        "--reference",
        "reg.cn/x:1",
        "--attach",
        "--key",
        tmp / "k.pem",
        "--password",
        "env:XS_PW",
    )
    assert rc == EXIT_OK, err
    assert digest in out and "referrer" in out
    rc, out, err = run(capsys, "verify", "image", "--layout", layout, "--trust-store", tmp / "ts", "--json")
    assert rc == EXIT_OK, err
    assert json.loads(out)["digest"] == digest
    rc, _, err = run(capsys, "verify", "image", "--layout", tmp_path / "nope", "--trust-store", tmp / "ts")
    assert rc == EXIT_ENV, err
