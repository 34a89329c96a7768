"""A model whose verification fails leaves nothing under ``<data_dir>/verified-models``: no
copy, and no empty ``<name>`` directory that would look like a verified model's place."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from trust_testutil import make_model

from service.runtime.state import ModelEntry, ModelState, Verification
from service.runtime.verification import copies_root, verify_entry
from trust.errors import Reason, VerificationError
from trust.model_signing import sign_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore
from trust.verified_copy import copy_verified_model


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def _signed_model(tmp_path: Path, key: Sm2PrivateKey, name: str) -> Path:
    model = make_model(tmp_path / "src")
    sign_model(model, key, name)
    return model


def test_failed_copy_leaves_no_directory(tmp_path: Path, key: Sm2PrivateKey, store: TrustStore) -> None:
    model = _signed_model(tmp_path, key, "m")
    _flip_last_byte(model / "model-00002-of-00002.safetensors")  # same size: found while copying
    copies = tmp_path / "data" / "verified-models"
    copies.mkdir(parents=True)
    dest = copies / "m" / "model"
    with pytest.raises(VerificationError) as ei:
        copy_verified_model(model, store, "m", dest)
    assert ei.value.reason == Reason.FILE_MODIFIED
    assert sorted(p.name for p in copies.iterdir()) == []


def test_failed_reverification_removes_the_earlier_copy_and_its_directory(
    tmp_path: Path, key: Sm2PrivateKey, store: TrustStore
) -> None:
    model = _signed_model(tmp_path, key, "m")
    copies = tmp_path / "verified-models"
    dest = copies / "m" / "model"
    assert copy_verified_model(model, store, "m", dest).path == dest
    assert (dest / "config.json").is_file()
    _flip_last_byte(model / "model-00001-of-00002.safetensors")
    with pytest.raises(VerificationError):
        copy_verified_model(model, store, "m", dest)
    assert not (copies / "m").exists()
    assert copies.is_dir()  # the root itself is kept: it was there before


def test_verify_entry_failure_leaves_no_model_directory(tmp_path: Path, key: Sm2PrivateKey, store: TrustStore) -> None:
    model = _signed_model(tmp_path, key, "teller model")
    _flip_last_byte(model / "tokenizer.json")
    copies = copies_root(tmp_path / "data")
    copies.mkdir(parents=True)
    entry = ModelEntry("teller model", "generate", model)
    assert asyncio.run(verify_entry(entry, store, False, copies)) is False
    assert entry.verification == Verification.FAILED and entry.state == ModelState.FAILED
    assert list(copies.iterdir()) == []


def test_a_manifest_or_listing_refusal_also_removes_the_earlier_copy(
    tmp_path: Path, key: Sm2PrivateKey, store: TrustStore
) -> None:
    model = _signed_model(tmp_path, key, "m")
    copies = tmp_path / "verified-models"
    dest = copies / "m" / "model"
    assert copy_verified_model(model, store, "m", dest).path == dest
    (model / "added.bin").write_bytes(b"not signed")  # refused by the listing check, before any copy
    with pytest.raises(VerificationError) as ei:
        copy_verified_model(model, store, "m", dest)
    assert ei.value.reason == Reason.FILE_ADDED
    assert not (copies / "m").exists()
    (model / "added.bin").unlink()
    assert copy_verified_model(model, store, "m", dest).path == dest
    with pytest.raises(VerificationError) as ei:
        copy_verified_model(model, store, "another name", dest)  # refused reading the manifest
    assert ei.value.reason == Reason.SUBJECT_MISMATCH
    assert not (copies / "m").exists()
