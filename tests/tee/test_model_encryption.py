"""SM4-GCM encrypted model directories, the ``xinserve encrypt model`` command, private tmpfs dirs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trust.sm2 import Sm2PrivateKey
from trust.tee.errors import TeeError, TeeReason
from trust.tee.model_encryption import (
    MANIFEST_FILENAME,
    decrypt_model,
    encrypt_model,
    is_encrypted,
    read_manifest,
)
from trust.tee.private_dir import PrivateDir, filesystem_type

KEY = bytes(range(16))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    d = tmp_path / "plain"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"a": 1}')
    (d / "sub" / "weights.bin").write_bytes(os.urandom(5000))
    (d / "empty.txt").write_bytes(b"")
    return d


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_round_trip(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "enc"
    enc = encrypt_model(model, out, KEY, "repo/model-key/tiny")
    assert is_encrypted(out) and not is_encrypted(model)
    assert sorted(_files(out)) == sorted([MANIFEST_FILENAME, "config.json.sm4", "sub/weights.bin.sm4", "empty.txt.sm4"])
    assert b'"a"' not in (out / "config.json.sm4").read_bytes()
    assert read_manifest(out) == enc
    target = tmp_path / "dec"
    target.mkdir()
    decrypt_model(out, KEY, target)
    assert _files(target) == _files(model)


def test_nonce_per_file(model: Path, tmp_path: Path) -> None:
    (model / "sub" / "copy.bin").write_bytes((model / "sub" / "weights.bin").read_bytes())
    out = tmp_path / "enc"
    encrypt_model(model, out, KEY, "repo/model-key/tiny")
    a, b = (out / "sub" / "weights.bin.sm4").read_bytes(), (out / "sub" / "copy.bin.sm4").read_bytes()
    assert a[1:13] != b[1:13] and a[13:] != b[13:]


def test_wrong_key_altered_blob_swapped_blobs(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "enc"
    encrypt_model(model, out, KEY, "repo/model-key/tiny")
    for i, damage in enumerate(["key", "flip", "swap"]):
        target = tmp_path / f"dec{i}"
        target.mkdir()
        key = KEY
        if damage == "key":
            key = bytes(16)
        elif damage == "flip":
            blob = bytearray((out / "config.json.sm4").read_bytes())
            blob[-20] ^= 1
            (out / "config.json.sm4").write_bytes(bytes(blob))
        else:  # a blob moved to another name does not open (the path is associated data)
            encrypt_model(model, tmp_path / "enc-fresh", KEY, "repo/model-key/tiny")
            (out / "config.json.sm4").write_bytes((tmp_path / "enc-fresh" / "empty.txt.sm4").read_bytes())
        with pytest.raises(TeeError) as err:
            decrypt_model(out, key, target)
        assert err.value.reason is TeeReason.ENCRYPTED_MODEL
        assert "config.json" in err.value.detail


def test_manifest_tampering_is_refused(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "enc"
    encrypt_model(model, out, KEY, "repo/model-key/tiny")
    doc = json.loads((out / MANIFEST_FILENAME).read_text())
    doc["files"][0]["size"] += 1
    (out / MANIFEST_FILENAME).write_text(json.dumps(doc))
    with pytest.raises(TeeError, match="plaintext_manifest_digest"):
        read_manifest(out)
    (out / MANIFEST_FILENAME).write_text("[]")
    with pytest.raises(TeeError, match="exactly"):
        read_manifest(out)


def test_bad_inputs(model: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        encrypt_model(model, tmp_path / "x", KEY, "../etc/passwd")
    with pytest.raises(ValueError):
        encrypt_model(model, tmp_path / "x", b"short", "a/b/c")
    with pytest.raises(ValueError, match="not an empty directory"):
        encrypt_model(model, model, KEY, "a/b/c")
    out = tmp_path / "enc"
    encrypt_model(model, out, KEY, "a/b/c")
    with pytest.raises(TeeError) as err:
        decrypt_model(out, b"\0" * 32, tmp_path)
    assert err.value.reason is TeeReason.BAD_KEY


def test_cli_encrypts_signs_and_the_signature_verifies_without_the_key(model: Path, tmp_path: Path, capsys) -> None:
    from service.cli import main
    from trust.model_signing import verify_model
    from trust.trust_store import TrustStore

    signer = Sm2PrivateKey.generate()
    key_pem = tmp_path / "sign.pem"
    key_pem.write_bytes(signer.to_pem(None))
    store = tmp_path / "store"
    pub = tmp_path / "sign.pub.pem"
    pub.write_bytes(signer.public_key().to_pem())
    assert main(["keys", "trust", str(pub), "--trust-store", str(store), "--name", "ops"]) == 0
    key_file = tmp_path / "model.key"
    out = tmp_path / "enc"
    rc = main(
        [
            *("encrypt", "model", str(model), "--key-id", "repo/model-key/tiny", "--key-file", str(key_file)),
            *("-o", str(out), "--sign-key", str(key_pem), "--name", "tiny"),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0
    key = bytes.fromhex(key_file.read_text().strip())
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert key.hex() not in printed
    result = verify_model(out, TrustStore.load(store), "tiny")
    assert result.files == 4  # three blobs and the manifest: the ciphertext is what is signed
    target = tmp_path / "dec"
    target.mkdir()
    decrypt_model(out, key, target)
    assert _files(target) == _files(model)
    # a second run reuses the key file; a malformed key file is a usage error
    key_file.write_text("zz")
    assert (
        main(
            [
                "encrypt",
                "model",
                str(model),
                "--key-id",
                "a/b/c",
                "--key-file",
                str(key_file),
                "-o",
                str(tmp_path / "o2"),
            ]
        )
        == 2
    )


def test_private_dir_is_tmpfs_and_zeroised() -> None:
    if filesystem_type(Path("/dev/shm")) not in ("tmpfs", "ramfs"):
        pytest.skip("/dev/shm is not tmpfs on this machine")
    d = PrivateDir(Path("/dev/shm"))
    assert oct(d.path.stat().st_mode & 0o777) == "0o700"
    (d.path / "w.bin").write_bytes(b"secret" * 100)
    d.remove()
    assert not d.path.exists()
    d.remove()  # idempotent


def test_private_dir_refuses_disk(tmp_path: Path) -> None:
    mountinfo = "22 1 8:1 / / rw - ext4 /dev/vda rw\n30 22 0:5 / /dev/shm rw - tmpfs tmpfs rw\n"
    assert filesystem_type(Path("/dev/shm/x"), mountinfo) == "tmpfs"
    assert filesystem_type(Path("/var/lib"), mountinfo) == "ext4"
    if filesystem_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is itself on tmpfs here")
    with pytest.raises(TeeError) as err:
        PrivateDir(tmp_path)
    assert err.value.reason is TeeReason.NOT_PRIVATE
