"""Token file and trust store: refused when others can read the token file (exit 3), reloaded
on SIGHUP with each change audited (principals added/removed/re-roled, key ids
trusted/revoked), a failed reload keeps the old state and is recorded, and the configuration
fields changed from their defaults are recorded at start (names only). No engine needed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from audit import QueryFilter, decode_record
from engine_backends.builtin_models import builtin_models
from service.access.auth import AuthenticationFailed, TokenFileError, hash_token
from service.access.policy import AccessPolicy
from service.lifecycle.reload import Reloader, authenticator_for, changed_config_fields
from service.lifecycle.server import open_audit
from service.pipeline.call_core import CallCore
from service.runtime.state import Runtime
from service.settings.config import load_settings
from tests.conftest import REPO, TINY, _data_dir
from trust.model_signing import SIGNATURE_FILENAME, sign_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore, add_trusted_key, revoke_key

ASYNC = pytest.mark.asyncio(loop_scope="session")
ALICE, BOB, CAROL = "alice-token-0123456789", "bob-token-0123456789", "carol-token-0123456789"


def _settings(tmp_path, auth: dict, trust: dict | None = None):
    return load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "auth": auth,
            "trust": trust or {},
        }
    )


def _write(path, text: str, mode: int = 0o600) -> None:
    path.write_text(text)
    path.chmod(mode)


def test_a_token_file_others_can_read_is_refused_unless_allowed(tmp_path):
    tokens = tmp_path / "tokens.txt"
    _write(tokens, f"alice {hash_token(ALICE)}\n", 0o644)
    with pytest.raises(TokenFileError, match=r"tokens\.txt is accessible to its group or others \(mode 0644\)"):
        authenticator_for(_settings(tmp_path, {"token_file": str(tokens)}))
    tokens.chmod(0o640)
    with pytest.raises(TokenFileError, match="mode 0640"):
        authenticator_for(_settings(tmp_path, {"token_file": str(tokens)}))
    allowed = _settings(tmp_path, {"token_file": str(tokens), "allow_insecure_token_file_permissions": True})
    assert authenticator_for(allowed).authenticate(f"Bearer {ALICE}", {}).name == "alice"
    tokens.chmod(0o600)
    assert (
        authenticator_for(_settings(tmp_path, {"token_file": str(tokens)})).authenticate(f"Bearer {ALICE}", {}).name
        == "alice"
    )


def test_serve_with_a_world_readable_token_file_exits_3(tmp_path):
    tokens = tmp_path / "tokens.txt"
    _write(tokens, f"alice {hash_token(ALICE)}\n", 0o644)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-metrics",
            *("--token-file", str(tokens)),
        ],
        cwd=REPO,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 3, result.stderr[-2000:]
    assert "mode 0644" in result.stderr
    assert "Traceback" not in result.stderr


def test_changed_config_fields_are_names_only(tmp_path):
    settings = _settings(tmp_path, {"required": True, "token_file": None})
    fields = changed_config_fields(settings)
    assert "auth.required" in fields
    assert "listen.plaintext" in fields
    assert "auth.token_file" not in fields
    assert "admission.max_in_flight" not in fields
    assert all("127.0.0.1" not in f for f in fields)


async def _events(runtime: Runtime, event: str):
    rows = await runtime.audit.log.query(QueryFilter(event=event))
    return [decode_record(r.body)[2] for r in rows]


@ASYNC
async def test_sighup_reload_swaps_tokens_and_trust_store_and_records_each_change(tmp_path):
    tokens = tmp_path / "tokens.txt"
    _write(tokens, f"alice {hash_token(ALICE)}\nbob {hash_token(BOB)} user\n")
    store_dir = tmp_path / "store"
    first, second = Sm2PrivateKey.generate().public_key(), Sm2PrivateKey.generate().public_key()
    add_trusted_key(store_dir, first, "first")
    settings = _settings(tmp_path, {"token_file": str(tokens)}, {"trust_store_dir": str(store_dir)})
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    core = CallCore(runtime, authenticator_for(settings), AccessPolicy(settings.auth))
    swapped: list[TrustStore | None] = []
    reloader = Reloader(settings, core, runtime.audit, TrustStore.load(store_dir), swapped.append)
    try:
        # Bob becomes an auditor, Alice leaves, Carol arrives; a key is trusted, one revoked.
        _write(tokens, f"bob {hash_token(BOB)} auditor\ncarol {hash_token(CAROL)}\n")
        add_trusted_key(store_dir, second, "second")
        revoke_key(store_dir, first.key_id, "rotated")
        assert await reloader.reload()
        with pytest.raises(AuthenticationFailed):
            core.authenticator.authenticate(f"Bearer {ALICE}", {})
        assert core.authenticator.authenticate(f"Bearer {BOB}", {}).roles == {"auditor"}
        assert core.authenticator.authenticate(f"Bearer {CAROL}", {}).name == "carol"
        assert len(swapped) == 1 and second.key_id in swapped[0].keys and first.key_id in swapped[0].revoked

        [tokens_event] = await _events(runtime, "credentials_reloaded")
        assert tokens_event.outcome == "OK"
        assert tokens_event.detail["principals_added"] == "carol"
        assert tokens_event.detail["principals_removed"] == "alice"
        assert tokens_event.detail["roles_changed"] == "bob"
        assert "tokens_changed" not in tokens_event.detail
        assert all(hash_token(t) not in str(tokens_event.detail) for t in (ALICE, BOB, CAROL))
        [store_event] = await _events(runtime, "trust_store_reloaded")
        assert store_event.detail["keys_trusted"] == second.key_id
        assert store_event.detail["keys_revoked"] == first.key_id

        # A malformed token file: the old tokens stay, the failure is recorded.
        _write(tokens, "carol not-a-digest\n")
        assert not await reloader.reload()
        assert core.authenticator.authenticate(f"Bearer {CAROL}", {}).name == "carol"
        failed = (await _events(runtime, "credentials_reloaded"))[-1]
        assert failed.outcome == "FAILED_PRECONDITION"
        assert "64 hex digits" in failed.detail["reason"]

        # A token file others can read is refused on reload as at start.
        _write(tokens, f"dave {hash_token(ALICE)}\n", 0o644)
        assert not await reloader.reload()
        assert "mode 0644" in (await _events(runtime, "credentials_reloaded"))[-1].detail["reason"]

        # A broken trust store: neither source is swapped in.
        _write(tokens, f"erin {hash_token(ALICE)}\n")
        (store_dir / "trust-store.json").write_text("{not json")
        assert not await reloader.reload()
        assert core.authenticator.authenticate(f"Bearer {CAROL}", {}).name == "carol"
        assert len(swapped) == 1
        assert (await _events(runtime, "trust_store_reloaded"))[-1].outcome == "FAILED_PRECONDITION"
    finally:
        await runtime.audit.close()


def _catches_sighup(pid: int) -> bool:
    """Whether the process has a handler for SIGHUP (``SigCgt`` in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGHUP - 1)))


def test_sighup_reloads_the_token_file_of_a_running_server(tmp_path):
    key = Sm2PrivateKey.generate()
    model = tmp_path / "model"
    source = next(b.path for b in builtin_models(_data_dir(), [TINY]) if b.name == TINY)
    shutil.copytree(source, model, ignore=shutil.ignore_patterns(SIGNATURE_FILENAME))
    sign_model(model, key, TINY)
    add_trusted_key(tmp_path / "trust", key.public_key(), "signer")
    tokens = tmp_path / "tokens.txt"
    _write(tokens, f"alice {hash_token(ALICE)}\n")
    data = tmp_path / "data"
    log_path = tmp_path / "server.log"
    args = [
        sys.executable, "-m", "service.cli", "serve", "--listen", "127.0.0.1:0", "--no-metrics",
        "--model", f"{TINY}={model}", "--trust-store", str(tmp_path / "trust"), "--token-file", str(tokens),
        "--data-dir", str(data), "--log-format", "json",
    ]  # fmt: skip
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(args, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not _catches_sighup(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.1)
        _write(tokens, f"alice {hash_token(ALICE)}\ncarol {hash_token(CAROL)} auditor\n")
        add_trusted_key(tmp_path / "trust", Sm2PrivateKey.generate().public_key(), "second")
        os.kill(proc.pid, signal.SIGHUP)
        while '"event": "reloaded"' not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=600) == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    exported = subprocess.run(
        [sys.executable, "-m", "service.cli", "audit", "export", "--store", str(data / "audit" / "audit.db")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    events = {r["event"]: r for r in map(json.loads, exported.stdout.splitlines()) if "event" in r}
    assert events["credentials_reloaded"]["detail"]["principals_added"] == "carol"
    assert "keys_trusted" in events["trust_store_reloaded"]["detail"]
    assert "auth.token_file" in events["config_loaded"]["detail"]["changed_fields"]
