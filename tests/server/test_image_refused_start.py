"""``xinserve serve`` refused for the running image's signature (exit 5) leaves a record in the
audit log when one exists, and creates nothing on a host that never ran the server.

The audit store is made by the real ``open_audit`` (key + SQLite database, closing checkpoint),
as a first start does; the refusal is then a real ``xinserve serve`` process, and the record is
read back and the chain checked with the real ``xinserve audit export`` / ``verify``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.lifecycle.refused_start import audit_store_exists, record_refused_start
from service.lifecycle.server import open_audit
from service.lifecycle.startup_checks import ImageRefused, verify_running_image
from service.settings.config import Settings, load_settings
from tests.conftest import REPO
from trust.image_signing import sign_image
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore, add_trusted_key

SIGNED = "sha256:" + "ab" * 32
WRONG = "sha256:" + "00" * 32
_CLI = "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture(scope="module")
def image_signature(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(trust store dir, envelope file) for an image signed at ``SIGNED``."""
    root = tmp_path_factory.mktemp("image-sig")
    key = Sm2PrivateKey.generate()
    add_trusted_key(root / "ts", key.public_key(), "release")
    envelope = root / "image.sig.dsse.json"
    envelope.write_bytes(sign_image(SIGNED, "registry.example.cn/xinserve", key))
    return root / "ts", envelope


def _cli(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args],
        cwd=REPO,
        env={**os.environ, "XDG_DATA_HOME": str(data_dir.parent / "xdg"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _serve_refused(data_dir: Path, image_signature: tuple[Path, Path]) -> subprocess.CompletedProcess[str]:
    store, envelope = image_signature
    return _cli(
        "serve", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", "--no-metrics",
        "--trust-store", str(store), "--image-signature", str(envelope), "--image-digest", WRONG,
        data_dir=data_dir,
    )  # fmt: skip


def _settings(data_dir: Path, image_signature: tuple[Path, Path], digest: str = WRONG) -> Settings:
    store, envelope = image_signature
    return load_settings(
        overrides={
            "data_dir": str(data_dir),
            "trust": {"trust_store_dir": str(store), "image_signature_file": str(envelope), "image_digest": digest},
        }
    )


def _make_audit_store(settings: Settings) -> None:
    async def first_start() -> None:
        trail = await open_audit(settings)
        await trail.close()

    asyncio.run(first_start())


def test_refused_start_is_recorded_in_the_existing_audit_log(tmp_path: Path, image_signature) -> None:
    data_dir = tmp_path / "data"
    settings = _settings(data_dir, image_signature)
    _make_audit_store(settings)
    assert audit_store_exists(settings.audit)

    result = _serve_refused(data_dir, image_signature)
    assert result.returncode == 5, result.stderr[-3000:]
    assert "refusing to start" in result.stderr and WRONG in result.stderr
    assert "Traceback" not in result.stderr

    db = str(settings.audit.path)
    export = _cli("audit", "export", "--store", db, "--event", "start", data_dir=data_dir)
    assert export.returncode == 0, export.stderr
    records = [json.loads(line) for line in export.stdout.splitlines()]
    assert len(records) == 1, records
    rec = records[0]
    assert rec["outcome"] == "FAILED_PRECONDITION"
    detail = rec["detail"]
    assert detail["refused"] == "image_signature"
    assert detail["reason"] == "subject_mismatch"
    assert detail["image_digest"] == WRONG  # the digest given for the running image
    assert detail["signed_digest"] == SIGNED  # the digest the signature covers
    assert detail["pid"] != os.getpid()

    server_pub = tmp_path / "server.pub.pem"
    server_pub.write_bytes(
        Sm2PrivateKey.from_pem(settings.audit.signing_key_path.read_bytes()).public_key().to_pem()  # type: ignore[union-attr]
    )
    verify = _cli("audit", "verify", "--store", db, "--public-key", str(server_pub), "--offline", data_dir=data_dir)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_first_start_refused_creates_no_data_dir(tmp_path: Path, image_signature) -> None:
    data_dir = tmp_path / "fresh" / "data"
    result = _serve_refused(data_dir, image_signature)
    assert result.returncode == 5, result.stderr[-3000:]
    assert "refused_start_not_audited" in result.stderr
    assert not (tmp_path / "fresh").exists(), sorted(str(p) for p in (tmp_path / "fresh").rglob("*"))


def test_no_trust_store_and_unreadable_envelope_are_refusals_with_reasons(tmp_path: Path, image_signature) -> None:
    settings = _settings(tmp_path / "d", image_signature)
    with pytest.raises(ImageRefused) as ei:
        verify_running_image(settings, None)
    assert ei.value.exit_code == 5 and ei.value.audit_detail["reason"] == "no_trust_store"
    store = TrustStore.load(image_signature[0])
    good = _settings(tmp_path / "d", image_signature, digest=SIGNED)
    verify_running_image(good, store)  # the signed digest passes
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\xff not an envelope")
    bad = good.model_copy(update={"trust": good.trust.model_copy(update={"image_signature_file": garbage})})
    with pytest.raises(ImageRefused) as ei:
        verify_running_image(bad, store)
    assert ei.value.audit_detail == {
        "refused": "image_signature",
        "reason": "malformed_envelope",
        "image_digest": SIGNED,
        "signed_digest": None,
    }


def test_an_audit_log_that_cannot_be_opened_does_not_hide_the_refusal(tmp_path: Path, image_signature) -> None:
    data_dir = tmp_path / "data"
    settings = _settings(data_dir, image_signature)
    _make_audit_store(settings)
    settings.audit.path.write_bytes(b"not a database" * 100)
    detail = {"refused": "image_signature", "reason": "subject_mismatch", "image_digest": WRONG}
    assert asyncio.run(record_refused_start(settings, open_audit, detail)) is False
