"""Unusable TLS files refuse the start with one line naming the setting, before anything binds:
a garbage certificate or key, a key of another certificate, an encrypted key, a file that
cannot be read, a garbage client CA bundle. The gRPC and the HTTPS front ends check the same
way; ``xinserve serve`` exits 3 with that line and no traceback. No engine needed."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from service.core.tls_material import TlsMaterialError, load_tls_material
from service.frontends.grpc.server import Frontend
from service.frontends.openai.listener import HttpFrontend
from service.lifecycle.wiring import shared_core
from service.runtime.state import Runtime
from service.settings.config import load_settings
from tests.support.pki import Pki, make_pki

ASYNC = pytest.mark.asyncio(loop_scope="session")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pki(tmp_path) -> Pki:
    return make_pki(tmp_path / "pki")


def _settings(tmp_path: Path, cert: Path, key: Path, client_ca: Path | None = None, kind: str = "tls"):
    listen: dict = {"plaintext": [] if kind == "tls" else ["127.0.0.1:0"], kind: ["127.0.0.1:0"]}
    tls = {"cert_file": str(cert), "key_file": str(key)}
    if client_ca is not None:
        tls["client_ca_file"] = str(client_ca)
    return load_settings(
        overrides={"data_dir": str(tmp_path / "data"), "listen": listen, "tls": tls, "metrics_listen": None}
    )


def _garbage(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(b"garbage\n")
    return path


async def _frontend_error(settings) -> str:
    """The TlsMaterialError message building the gRPC front end raises (fails if none)."""
    try:
        frontend = Frontend(*shared_core(Runtime(settings), settings), settings, "cpu")
    except TlsMaterialError as exc:
        return str(exc)
    await frontend.stop(None)
    pytest.fail("the front end was built over unusable TLS files")


def _one_safe_line(message: str, tmp_path: Path) -> None:
    assert "\n" not in message
    assert str(tmp_path) not in message and str(REPO) not in message


@ASYNC
async def test_good_files_serve_tls(tmp_path, pki):
    settings = _settings(tmp_path, pki.server_cert, pki.server_key, pki.ca_cert)
    material = load_tls_material(settings.tls)
    assert material.client_ca_pem == pki.ca_cert.read_bytes()
    frontend = Frontend(*shared_core(Runtime(settings), settings), settings, "cpu")
    try:
        assert list(frontend.ports) == ["127.0.0.1:0"] and frontend.ports["127.0.0.1:0"] > 0
    finally:
        await frontend.stop(None)


@ASYNC
async def test_garbage_certificate(tmp_path, pki):
    message = await _frontend_error(_settings(tmp_path, _garbage(tmp_path, "bad.pem"), pki.server_key))
    assert message.startswith("tls.cert_file: not a PEM certificate chain")
    _one_safe_line(message, tmp_path)


@ASYNC
async def test_garbage_key(tmp_path, pki):
    message = await _frontend_error(_settings(tmp_path, pki.server_cert, _garbage(tmp_path, "bad.key")))
    assert message == "tls.key_file: not a PEM private key"


@ASYNC
async def test_key_of_another_certificate(tmp_path, pki):
    message = await _frontend_error(_settings(tmp_path, pki.server_cert, pki.client_key))
    assert message.startswith("tls.key_file does not match tls.cert_file")
    _one_safe_line(message, tmp_path)


@ASYNC
async def test_encrypted_key(tmp_path, pki):
    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret passphrase"),
        )
    )
    message = await _frontend_error(_settings(tmp_path, pki.server_cert, encrypted))
    assert message.startswith("tls.key_file: the private key is encrypted")


@ASYNC
async def test_file_gone_after_configuration(tmp_path, pki):
    settings = _settings(tmp_path, pki.server_cert, pki.server_key)
    pki.server_key.unlink()
    message = await _frontend_error(settings)
    assert message == "tls.key_file: cannot be read (No such file or directory)"


_LOAD = """
import sys
from service.settings.config import TlsSettings
from service.core.tls_material import TlsMaterialError, load_tls_material
try:
    load_tls_material(TlsSettings(cert_file=sys.argv[1], key_file=sys.argv[2]))
except TlsMaterialError as exc:
    print(exc)
"""


@ASYNC
async def test_unreadable_file(tmp_path, pki):
    pki.server_cert.chmod(0)
    if os.geteuid() != 0:
        message = await _frontend_error(_settings(tmp_path, pki.server_cert, pki.server_key))
    else:
        # Root reads any file through CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH: check in a child
        # without them (util-linux setpriv), where file modes bind root as any user.
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "util-linux's setpriv is needed to drop root's file capabilities"
        argv = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--", sys.executable, "-c", _LOAD]
        result = await asyncio.to_thread(
            subprocess.run,
            [*argv, str(pki.server_cert), str(pki.server_key)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        message = result.stdout.strip()
    assert message == "tls.cert_file: cannot be read (Permission denied)"


@ASYNC
async def test_garbage_client_ca(tmp_path, pki):
    settings = _settings(tmp_path, pki.server_cert, pki.server_key, _garbage(tmp_path, "ca.pem"))
    message = await _frontend_error(settings)
    assert message.startswith("tls.client_ca_file: not a PEM CA certificate bundle")


@ASYNC
async def test_https_front_end_checks_the_same_files(tmp_path, pki):
    settings = _settings(tmp_path, pki.server_cert, pki.client_key, kind="https")
    frontend = Frontend(*shared_core(Runtime(settings), settings), settings, "cpu")
    try:
        with pytest.raises(TlsMaterialError, match=r"^tls\.key_file does not match tls\.cert_file"):
            HttpFrontend(frontend.core, frontend.inference, settings)
    finally:
        await frontend.stop(None)


def test_serve_with_garbage_certificate_exits_3_with_one_line(tmp_path, pki):
    (tmp_path / "bad.pem").write_bytes(b"garbage\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable, "-m", "service.cli", "serve",
            "--tls-listen", "127.0.0.1:0",
            "--tls-cert", "bad.pem",
            "--tls-key", str(pki.server_key.relative_to(tmp_path)),
            "--data-dir", "data",
            "--no-metrics",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xinserve serve: tls.cert_file: not a PEM certificate chain")
    assert "Traceback" not in proc.stderr and str(REPO) not in proc.stderr
    assert not (tmp_path / "data").exists()
