"""Trust store directory format: loading, validity windows, revocation, refusal of malformed stores."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from trust.errors import Reason, TrustStoreError, VerificationError
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import INDEX_FILENAME, TrustStore, add_trusted_key, revoke_key


def test_plain_pem_directory(tmp_path: Path, key: Sm2PrivateKey, other_key: Sm2PrivateKey) -> None:
    (tmp_path / "release.pem").write_bytes(key.public_key().to_pem())
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "ci.pem").write_bytes(other_key.public_key().to_pem())
    store = TrustStore.load(tmp_path)
    assert {k.name for k in store.keys.values()} == {"release", "ci"}
    assert store.check(key.public_key().key_id).name == "release"


def test_index_with_windows_and_revocations(tmp_path: Path, key: Sm2PrivateKey, other_key: Sm2PrivateKey) -> None:
    now = datetime.now(timezone.utc)
    add_trusted_key(tmp_path, key.public_key(), "old", not_after=now + timedelta(days=30))
    add_trusted_key(tmp_path, other_key.public_key(), "new", not_before=now - timedelta(days=1))
    store = TrustStore.load(tmp_path)
    assert store.check(key.public_key().key_id).name == "old"
    with pytest.raises(VerificationError) as ei:
        store.check(key.public_key().key_id, now + timedelta(days=31))
    assert ei.value.reason == Reason.KEY_EXPIRED
    with pytest.raises(VerificationError) as ei:
        store.check(other_key.public_key().key_id, now - timedelta(days=2))
    assert ei.value.reason == Reason.KEY_NOT_YET_VALID
    revoke_key(tmp_path, key.public_key().key_id, "rotated out")
    store = TrustStore.load(tmp_path)
    with pytest.raises(VerificationError) as ei:
        store.check(key.public_key().key_id)
    assert ei.value.reason == Reason.REVOKED_KEY and "rotated out" in ei.value.detail
    assert store.check(other_key.public_key().key_id).name == "new"
    with pytest.raises(VerificationError) as ei:
        store.check("0" * 64)
    assert ei.value.reason == Reason.UNTRUSTED_KEY


def test_revoking_in_a_plain_directory_keeps_its_keys(
    tmp_path: Path, key: Sm2PrivateKey, other_key: Sm2PrivateKey
) -> None:
    (tmp_path / "a.pem").write_bytes(key.public_key().to_pem())
    (tmp_path / "b.pem").write_bytes(other_key.public_key().to_pem())
    revoke_key(tmp_path, key.public_key().key_id)
    store = TrustStore.load(tmp_path)
    assert set(store.keys) == {key.public_key().key_id, other_key.public_key().key_id}
    assert key.public_key().key_id in store.revoked


def _index(tmp_path: Path, doc: object) -> None:
    (tmp_path / INDEX_FILENAME).write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "doc",
    [
        {"version": 2, "keys": []},
        {"version": 1, "keys": [{"name": "x", "file": "keys/missing.pem"}]},
        {"version": 1, "keys": [{"name": "x", "file": "../outside.pem"}]},
        {"version": 1, "keys": [{"name": "x", "file": "keys/k.pem", "key_id": "0" * 64}]},
        {"version": 1, "keys": [{"name": "x", "file": "keys/k.pem", "not_after": "yesterday"}]},
        {"version": 1, "keys": [{"name": "x", "file": "keys/k.pem", "not_after": "2026-01-01T00:00:00"}]},
        {"version": 1, "keys": [{"name": "x", "file": "keys/k.pem", "colour": "blue"}]},
        {"version": 1, "keys": [{"name": "x", "file": "keys/k.pem"}, {"name": "x", "file": "keys/k.pem"}]},
        {"version": 1, "keys": [{"name": "x", "file": "keys/k.pem"}], "revoked": [{"key_id": "nothex"}]},
        {"version": 1, "keys": []},
        [],
    ],
)
def test_malformed_index_refuses_to_load(tmp_path: Path, key: Sm2PrivateKey, doc: object) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "k.pem").write_bytes(key.public_key().to_pem())
    (tmp_path.parent / "outside.pem").write_bytes(key.public_key().to_pem())
    _index(tmp_path, doc)
    with pytest.raises(TrustStoreError):
        TrustStore.load(tmp_path)


def test_bad_key_file_and_missing_store(tmp_path: Path) -> None:
    with pytest.raises(TrustStoreError):
        TrustStore.load(tmp_path / "nope")
    with pytest.raises(TrustStoreError, match="no trusted key"):
        TrustStore.load(tmp_path)
    (tmp_path / "bad.pem").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(TrustStoreError):
        TrustStore.load(tmp_path)


def test_naive_now_is_taken_as_utc(key: Sm2PrivateKey) -> None:
    from trust.trust_store import TrustedKey

    not_after = datetime(2030, 1, 1, tzinfo=timezone.utc)
    store = TrustStore.from_keys([TrustedKey("k", key.public_key(), not_after=not_after)])
    assert store.check(key.public_key().key_id, datetime(2029, 12, 31)).name == "k"
    with pytest.raises(VerificationError):
        store.check(key.public_key().key_id, datetime(2030, 1, 2))
