"""Models are verified before the engine loads them; failures are not served and say why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.lifecycle.server import Server
from service.lifecycle.startup_checks import StartupRefused, verify_running_image
from service.runtime.state import ModelEntry, ModelState, Verification
from service.runtime.verification import verify_entry
from service.settings.config import load_settings
from tests.conftest import MINILM, REPO, TINY
from tests.server.stubs import stubs
from trust.image_signing import sign_image
from trust.model_signing import SIGNATURE_FILENAME, sign_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore, add_trusted_key
from xinserve.v1 import model_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def signer(tmp_path_factory):
    root = tmp_path_factory.mktemp("signing")
    key = Sm2PrivateKey.generate()
    add_trusted_key(root / "store", key.public_key(), "release-2026")
    return key, root / "store"


@pytest.fixture
def model_copy(live_server, tmp_path):
    src = live_server.runtime.models[TINY].path
    dst = tmp_path / "tiny"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(SIGNATURE_FILENAME))
    return dst


@ASYNC
async def test_builtin_models_are_verified_by_default(api):
    reply = await api.models.ListModels(model_pb2.ListModelsRequest())
    for model in reply.models:
        assert model.verification_status == model_pb2.VERIFICATION_STATUS_VERIFIED, model.name
        assert model.manifest_digest.startswith("sm3:") and len(model.manifest_digest) == 4 + 64
        assert "xinserve-local-demo" in model.verification_detail
    assert {m.name for m in reply.models} == {TINY, MINILM}


@ASYNC
async def test_signed_model_verifies_and_tampered_model_is_refused(model_copy, signer, tmp_path):
    key, store_dir = signer
    store = TrustStore.load(store_dir)
    sign_model(model_copy, key, "mine")
    ok = ModelEntry("mine", "generate", model_copy)
    assert await verify_entry(ok, store, False, tmp_path / "copies")
    assert ok.verification is Verification.VERIFIED
    assert ok.manifest_digest.startswith("sm3:")
    assert ok.load_path == tmp_path / "copies" / "mine" / "model"
    assert (ok.load_path / "model.safetensors").read_bytes() == (model_copy / "model.safetensors").read_bytes()

    weights = model_copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    bad = ModelEntry("mine", "generate", model_copy)
    assert not await verify_entry(bad, store, False, tmp_path / "copies")
    assert bad.verification is Verification.FAILED
    assert bad.state is ModelState.FAILED
    assert bad.verification_reason == "file_modified" and "file_modified" in bad.state_reason
    assert "model.safetensors" in bad.state_detail and "model.safetensors" not in bad.state_reason
    assert bad.load_path is None and not (tmp_path / "copies" / "mine" / "model").exists()


@ASYNC
async def test_unsigned_model_refused_unless_allowed(model_copy, signer, tmp_path):
    store = TrustStore.load(signer[1])
    entry = ModelEntry("plain", "generate", model_copy)
    assert not await verify_entry(entry, store, False, tmp_path / "copies")
    assert "unsigned" in entry.verification_detail
    allowed = ModelEntry("plain", "generate", model_copy)
    assert await verify_entry(allowed, store, True, tmp_path / "copies")
    assert allowed.verification is Verification.UNSIGNED_ALLOWED


@ASYNC
async def test_model_signed_by_untrusted_key_is_refused(model_copy, signer, tmp_path):
    sign_model(model_copy, Sm2PrivateKey.generate(), "mine")
    entry = ModelEntry("mine", "generate", model_copy)
    assert not await verify_entry(entry, TrustStore.load(signer[1]), False, tmp_path / "copies")
    assert "untrusted_key" in entry.verification_detail


@ASYNC
async def test_failed_model_is_not_served_and_getmodel_says_why(live_server, model_copy, signer, tmp_path):
    key, store_dir = signer
    sign_model(model_copy, key, "tampered")
    (model_copy / "extra.bin").write_bytes(b"smuggled")
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "models": [{"name": "tampered", "path": str(model_copy)}],
            "trust": {"trust_store_dir": str(store_dir)},
        }
    )
    server = await Server.create(settings)
    try:
        assert await server.load_models() is False  # nothing servable; no engine was started
        entry = server.runtime.models["tampered"]
        assert entry.engine is not None and entry.engine._llm is None  # type: ignore[attr-defined]
        port = next(iter(server.frontend.ports.values()))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            model = (await stubs(channel).models.GetModel(model_pb2.GetModelRequest(name="tampered"))).model
            assert model.state == model_pb2.MODEL_STATE_FAILED
            assert model.verification_status == model_pb2.VERIFICATION_STATUS_FAILED
            assert model.state_reason_code == "verification_failed"
            assert model.verification_reason_code == "file_added" and "file_added" in model.state_reason
            # An ordinary caller gets no file name, path or parser text.
            assert "extra.bin" not in model.state_reason and "extra.bin" not in model.verification_detail
            assert str(model_copy) not in model.state_reason + model.verification_detail
            assert "extra.bin" in entry.state_detail  # the operator's detail (log, admin, auditor)
            health = health_pb2_grpc.HealthStub(channel)
            status = await health.Check(health_pb2.HealthCheckRequest(service="xinserve.v1.InferenceService/tampered"))
            assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
            overall = await health.Check(health_pb2.HealthCheckRequest(service=""))
            assert overall.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await server.frontend.stop(0)


def test_running_image_signature(signer, tmp_path):
    key, store_dir = signer
    envelope = tmp_path / "image.dsse.json"
    envelope.write_bytes(sign_image(DIGEST, "registry.example/xinserve", key))
    store = TrustStore.load(store_dir)
    good = load_settings(
        overrides={
            "trust": {"image_signature_file": str(envelope), "image_digest": DIGEST, "trust_store_dir": str(store_dir)}
        }
    )
    verify_running_image(good, store)
    other = "sha256:" + "cd" * 32
    bad = load_settings(
        overrides={
            "trust": {"image_signature_file": str(envelope), "image_digest": other, "trust_store_dir": str(store_dir)}
        }
    )
    with pytest.raises(StartupRefused, match="does not verify"):
        verify_running_image(bad, store)


def _serve(args, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--listen", "127.0.0.1:0", "--no-metrics", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_serve_exits_4_when_no_model_can_be_served(model_copy, signer, tmp_path):
    result = _serve(
        ["--model", f"bad={model_copy}", "--trust-store", str(signer[1]), "--data-dir", str(tmp_path)], tmp_path
    )
    assert result.returncode == 4, result.stderr[-2000:]
    assert "model_verification_failed" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_exits_5_on_image_digest_mismatch(signer, tmp_path):
    key, store_dir = signer
    envelope = tmp_path / "image.dsse.json"
    envelope.write_bytes(sign_image(DIGEST, "registry.example/xinserve", key))
    result = _serve(
        ["--trust-store", str(store_dir), "--image-signature", str(envelope), "--image-digest", "sha256:" + "00" * 32],
        tmp_path,
    )
    assert result.returncode == 5, result.stderr[-2000:]
    assert "refusing to start" in result.stderr
