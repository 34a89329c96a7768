"""An SM4-encrypted copy of the built-in tiny model, served after a KBS releases its key, answers
greedily exactly like the plaintext model; a model whose key is refused is not served."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from audit import EventType, QueryFilter, decode_record
from engine_backends.builtin_models import builtin_models
from service.lifecycle.server import Server
from service.runtime.state import ModelState
from service.settings.config import load_settings
from tests.conftest import TINY
from tests.tee.conftest import FIXTURES
from tests.tee.kbs_server import KbsServer
from trust import sm4
from trust.model_signing import sign_model
from trust.sm2 import Sm2PrivateKey
from trust.tee.model_encryption import encrypt_model
from trust.tee.private_dir import filesystem_type
from trust.trust_store import TrustStore
from xinserve_client import XinserveClient

pytestmark = pytest.mark.asyncio(loop_scope="session")

RELEASED = "xinserve/model-key/tiny"
DENIED = "xinserve/model-key/denied"
PROMPT = "你好，信"


def _greedy(target: str, model: str) -> tuple[list[int], str]:
    with XinserveClient(target) as client:
        reply = client.generate(model, PROMPT, temperature=0.0, max_tokens=24, ignore_eos=True)
    return list(reply.outputs[0].token_ids), reply.outputs[0].text


def _trust_store(tmp_path: Path, signer: Sm2PrivateKey) -> Path:
    from service.cli import main

    pub = tmp_path / "signer.pub.pem"
    pub.write_bytes(signer.public_key().to_pem())
    store = tmp_path / "trust"
    assert main(["keys", "trust", str(pub), "--trust-store", str(store), "--name", "model-owner"]) == 0
    TrustStore.load(store)
    return store


async def test_encrypted_model_served_after_key_release_and_refused_key_not_served(
    live_server, kbs: KbsServer, tmp_path: Path
) -> None:
    if filesystem_type(Path("/dev/shm")) not in ("tmpfs", "ramfs"):
        pytest.skip("/dev/shm is not tmpfs here: decrypted models are only ever written to tmpfs")
    (tiny_model,) = await asyncio.to_thread(builtin_models, live_server.data_dir, [TINY])
    tiny = tiny_model.path
    key = sm4.generate_key()
    signer = Sm2PrivateKey.generate()
    enc, denied = tmp_path / "tiny-enc", tmp_path / "tiny-denied"
    await asyncio.to_thread(encrypt_model, tiny, enc, key, RELEASED)
    await asyncio.to_thread(encrypt_model, tiny, denied, sm4.generate_key(), DENIED)
    await asyncio.to_thread(sign_model, enc, signer, "tiny-enc")
    await asyncio.to_thread(sign_model, denied, signer, "tiny-denied")
    kbs.state.resources[RELEASED] = key
    kbs.state.resources[DENIED] = b"\0" * 16
    kbs.state.resource_policy = lambda claims, resource: resource != DENIED

    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"]},
            "metrics_listen": None,
            "drain_grace_seconds": 5,
            "models": [
                {"name": "tiny-enc", "path": str(enc)},
                {"name": "tiny-denied", "path": str(denied)},
            ],
            "trust": {"trust_store_dir": str(_trust_store(tmp_path, signer))},
            "engine": {"max_model_len": 512, "max_num_seqs": 4},
            "tee": {
                "provider": "recorded",
                "recorded_evidence_file": str(FIXTURES / "tdx_quote_4.dat"),
                "allow_recorded": True,
                "kbs_url": kbs.url,
            },
            "audit": {"path": str(tmp_path / "audit.db"), "node_id": "tee-e2e"},
        }
    )
    server = await Server.create(settings)
    rt = server.runtime
    decrypted: Path | None = None
    try:
        assert await server.load_models()
        served, refused = rt.models["tiny-enc"], rt.models["tiny-denied"]
        assert served.state is ModelState.READY, served.state_reason
        decrypted = served.load_path
        assert decrypted is not None and filesystem_type(decrypted) in ("tmpfs", "ramfs")
        assert refused.state is ModelState.FAILED
        assert refused.reason_code == "key_refused" and "policy_denied" in refused.state_reason
        target = f"127.0.0.1:{next(iter(server.frontend.ports.values()))}"

        def calls():
            with XinserveClient(target) as client:
                health = client.health("xinserve.v1.InferenceService/tiny-denied")
                info = client.server_info()
            return health, info

        health, info = await asyncio.to_thread(calls)
        assert health == "NOT_SERVING"
        assert info.tee.tee == "sample" and info.tee.recorded and info.tee.keys_from_kbs
        plain = await asyncio.to_thread(_greedy, live_server.target, TINY)
        encrypted = await asyncio.to_thread(_greedy, target, "tiny-enc")
        assert encrypted == plain and len(plain[0]) == 24

        assert rt.audit is not None
        rows = await rt.audit.log.query(QueryFilter())
        records = [decode_record(r.body)[2] for r in rows]
        events = [(r.event, r.outcome, r.model, r.detail.get("resource"), r.detail.get("reason")) for r in records]
        assert (EventType.KEY_RELEASED, "OK", "tiny-enc", RELEASED, None) in events
        assert (EventType.KEY_REFUSED, "PERMISSION_DENIED", "tiny-denied", DENIED, "policy_denied") in events
        kinds = [r.event for r in records]
        assert kinds.index(EventType.ATTESTATION_COLLECTED) < kinds.index(EventType.MODEL_VERIFIED)
        assert kinds.index(EventType.KEY_RELEASED) < kinds.index(EventType.MODEL_LOADED)
        assert all(key.hex() not in r.body.decode("utf-8", "replace") for r in rows)
    finally:
        await server.drain_and_stop()
    assert decrypted is not None and not decrypted.exists()  # zeroed and removed at stop
