"""``xinserve encrypt model``: a run that fails leaves no output directory and no new key file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trust.sm2 import Sm2PrivateKey


@pytest.fixture
def model(tmp_path: Path) -> Path:
    d = tmp_path / "plain"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"a": 1}')
    (d / "sub" / "weights.bin").write_bytes(os.urandom(5000))
    return d


def _encrypt(model: Path, key_file: Path, out: Path, sign_key: Path) -> int:
    from service.cli import main

    return main(
        [
            *("encrypt", "model", str(model), "--key-id", "a/b/c", "--key-file", str(key_file)),
            *("-o", str(out), "--sign-key", str(sign_key)),
        ]
    )


def test_a_public_sign_key_is_refused_before_anything_is_written(model: Path, tmp_path: Path, capsys) -> None:
    signer = Sm2PrivateKey.generate()
    public = tmp_path / "sign.pub.pem"
    public.write_bytes(signer.public_key().to_pem())
    key_file, out = tmp_path / "model.key", tmp_path / "enc"
    assert _encrypt(model, key_file, out, public) == 2
    assert "sign" in capsys.readouterr().err
    assert not out.exists() and not key_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "sign.pub.pem"]


def test_an_empty_output_directory_stays_empty_on_failure(model: Path, tmp_path: Path) -> None:
    signer = Sm2PrivateKey.generate()
    public = tmp_path / "sign.pub.pem"
    public.write_bytes(signer.public_key().to_pem())
    key_file, out = tmp_path / "model.key", tmp_path / "enc"
    out.mkdir()
    assert _encrypt(model, key_file, out, public) == 2
    assert list(out.iterdir()) == [] and not key_file.exists()


def test_success_renames_a_complete_signed_directory_into_place(model: Path, tmp_path: Path) -> None:
    from trust.model_signing import SIGNATURE_FILENAME

    signer = Sm2PrivateKey.generate()
    private = tmp_path / "sign.pem"
    private.write_bytes(signer.to_pem(None))
    key_file, out = tmp_path / "model.key", tmp_path / "enc"
    out.mkdir()
    assert _encrypt(model, key_file, out, private) == 0
    assert (out / SIGNATURE_FILENAME).is_file() and key_file.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc", "model.key", "plain", "sign.pem"]
