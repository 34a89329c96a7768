"""Image signing by digest and from an OCI image layout, with referrer attachment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trust_testutil import make_layout

from trust.errors import Reason, VerificationError
from trust.image_signing import (
    OCI_INDEX,
    OCI_MANIFEST,
    find_attached_signatures,
    sign_image,
    sign_image_layout,
    verify_image,
    verify_image_layout,
)
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def store(key: Sm2PrivateKey) -> TrustStore:
    return TrustStore.from_keys([key.public_key()])


def test_sign_by_digest(key: Sm2PrivateKey, other_key: Sm2PrivateKey, store: TrustStore) -> None:
    env = sign_image(DIGEST, "registry.example.cn/xinserve:1.0", key)
    res = verify_image(env, store, DIGEST, reference="registry.example.cn/xinserve:1.0")
    assert res.digest == DIGEST and res.key_id == key.public_key().key_id
    for digest, ref, reason in [
        ("sha256:" + "cd" * 32, None, Reason.SUBJECT_MISMATCH),
        (DIGEST, "registry.example.cn/other:1.0", Reason.SUBJECT_MISMATCH),
        ("md5:abc", None, Reason.SUBJECT_MISMATCH),
    ]:
        with pytest.raises(VerificationError) as ei:
            verify_image(env, store, digest, reference=ref)
        assert ei.value.reason == reason
    with pytest.raises(VerificationError) as ei:
        verify_image(sign_image(DIGEST, "r:1", other_key), store, DIGEST)
    assert ei.value.reason == Reason.UNTRUSTED_KEY
    with pytest.raises(ValueError):
        sign_image("sha256:short", "r:1", key)
    with pytest.raises(ValueError):
        sign_image(DIGEST, "r@sha256:" + "ab" * 32, key)


@pytest.mark.parametrize("multi", [False, True], ids=["manifest", "index"])
def test_layout_sign_attach_verify(tmp_path: Path, key: Sm2PrivateKey, store: TrustStore, multi: bool) -> None:
    layout = tmp_path / "layout"
    top = make_layout(layout, multi)
    env, desc = sign_image_layout(layout, key, "registry.example.cn/xinserve:1.0", attach=True)
    assert desc.digest == top  # the descriptor index.json points to: the index for a multi-platform image
    assert desc.media_type == (OCI_INDEX if multi else OCI_MANIFEST)
    assert find_attached_signatures(layout, top) == [env]
    res = verify_image_layout(layout, store)  # found through the referrer, not a separate file
    assert res.digest == top
    assert verify_image_layout(layout, store, envelope=env, ref_name="1.0").digest == top
    payload = json.loads(__import__("base64").b64decode(json.loads(env)["payload"]))
    assert set(payload["subject"][0]["digest"]) == {"sha256", "sm3"}


def test_layout_tampering(tmp_path: Path, key: Sm2PrivateKey, store: TrustStore) -> None:
    layout = tmp_path / "layout"
    top = make_layout(layout)
    with pytest.raises(VerificationError) as ei:
        verify_image_layout(layout, store)
    assert ei.value.reason == Reason.UNSIGNED
    env, _ = sign_image_layout(layout, key, "r:1")
    blob_path = layout / "blobs" / "sha256" / top.split(":")[1]
    data = bytearray(blob_path.read_bytes())
    data[-1] ^= 0x01  # same size, one bit changed in the signed manifest
    blob_path.write_bytes(bytes(data))
    with pytest.raises(VerificationError) as ei:
        verify_image_layout(layout, store, envelope=env)
    assert ei.value.reason == Reason.FILE_MODIFIED
    blob_path.write_bytes(bytes(data) + b" ")  # grown: the descriptor's size is checked before any hashing
    with pytest.raises(VerificationError) as ei:
        verify_image_layout(layout, store, envelope=env)
    assert ei.value.reason == Reason.FILE_SIZE_CHANGED


def test_image_signature_is_not_a_model_signature(tmp_path: Path, key: Sm2PrivateKey, store: TrustStore) -> None:
    from trust.model_signing import SIGNATURE_FILENAME, verify_model

    d = tmp_path / "m"
    d.mkdir()
    (d / "f").write_text("x")
    (d / SIGNATURE_FILENAME).write_bytes(sign_image(DIGEST, "r:1", key))
    with pytest.raises(VerificationError) as ei:
        verify_model(d, store)
    assert ei.value.reason == Reason.WRONG_PREDICATE_TYPE
