"""The checkpoint key: encrypted with a password from the environment or a file, refused when
its group or others can read it (or warned about, by a switch); the SQLite store's file modes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from audit_helpers import Backend, rpc_record_factory

from audit.errors import AuditConfigError
from audit.log import AuditLog, load_signer
from trust.sm2 import Sm2PrivateKey


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_key(path: Path, key: Sm2PrivateKey, password: bytes | None = None, file_mode: int = 0o600) -> Path:
    path.write_bytes(key.to_pem(password=password, iterations=1000) if password else key.to_pem())
    path.chmod(file_mode)
    return path


async def test_encrypted_key_with_password_from_env_signs_checkpoints(
    sqlite_backend: Backend, key: Sm2PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = write_key(tmp_path / "server.pem", key, b"s3cret pass")
    monkeypatch.setenv("XINSERVE_TEST_KEY_PASSWORD", "s3cret pass")
    settings = sqlite_backend.settings(signing_key_path=pem, signing_key_password_env="XINSERVE_TEST_KEY_PASSWORD")
    log = await AuditLog.open(settings, start_ticker=False)  # the key comes from the settings
    await log.append(rpc_record_factory()(0))
    cp = await log.checkpoint()
    await log.close()
    key.public_key().verify(cp.signature, cp.payload)
    monkeypatch.setenv("XINSERVE_TEST_KEY_PASSWORD", "wrong")
    with pytest.raises(AuditConfigError, match="unusable"):
        load_signer(settings)
    monkeypatch.delenv("XINSERVE_TEST_KEY_PASSWORD")
    with pytest.raises(AuditConfigError, match="XINSERVE_TEST_KEY_PASSWORD is not set"):
        load_signer(settings)


def test_encrypted_key_with_password_file(sqlite_backend: Backend, key: Sm2PrivateKey, tmp_path: Path) -> None:
    pem = write_key(tmp_path / "server.pem", key, b"from a file")
    pw = tmp_path / "password"
    pw.write_bytes(b"from a file\n")
    pw.chmod(0o600)
    settings = sqlite_backend.settings(signing_key_path=pem, signing_key_password_file=pw)
    assert load_signer(settings).public_key().key_id == key.public_key().key_id
    pw.chmod(0o640)
    with pytest.raises(AuditConfigError, match="chmod 600"):
        load_signer(settings)
    no_password = sqlite_backend.settings(signing_key_path=pem)
    with pytest.raises(AuditConfigError, match="password"):
        load_signer(no_password)


@pytest.mark.parametrize("file_mode", [0o644, 0o640, 0o604, 0o660])
def test_a_key_others_can_read_is_refused_unless_allowed(
    sqlite_backend: Backend, key: Sm2PrivateKey, tmp_path: Path, file_mode: int, capsys
) -> None:
    pem = write_key(tmp_path / "server.pem", key, file_mode=file_mode)
    with pytest.raises(AuditConfigError, match=f"mode {file_mode:04o}"):
        load_signer(sqlite_backend.settings(signing_key_path=pem))
    allowed = sqlite_backend.settings(signing_key_path=pem, allow_insecure_key_permissions=True)
    assert load_signer(allowed).public_key().key_id == key.public_key().key_id
    assert "insecure_secret_file" in capsys.readouterr().out


def test_first_start_creates_an_encrypted_0600_key(
    sqlite_backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XINSERVE_TEST_KEY_PASSWORD", "new key password")
    pem = tmp_path / "keys" / "server-sm2.pem"
    settings = sqlite_backend.settings(signing_key_path=pem, signing_key_password_env="XINSERVE_TEST_KEY_PASSWORD")
    created = load_signer(settings, create=True)
    assert mode(pem) == 0o600 and mode(pem.parent) == 0o700
    assert b"ENCRYPTED PRIVATE KEY" in pem.read_bytes()
    assert load_signer(settings).public_key().key_id == created.public_key().key_id


def test_a_new_key_needs_a_password_of_at_least_8_characters(
    sqlite_backend: Backend, key: Sm2PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = tmp_path / "keys" / "server-sm2.pem"
    pw = tmp_path / "password"
    pw.write_bytes("kurz\u00e9x\n".encode())  # 6 characters, 7 bytes
    pw.chmod(0o600)
    settings = sqlite_backend.settings(signing_key_path=pem, signing_key_password_file=pw)
    with pytest.raises(AuditConfigError, match=r"too short \(6 characters; at least 8\)"):
        load_signer(settings, create=True)
    assert not pem.exists()
    pw.write_bytes(b"\nsecond line\n")  # the first line is the password: empty
    with pytest.raises(AuditConfigError, match="empty"):
        load_signer(settings, create=True)
    # An existing key keeps opening with its (short) password: the rule is for new keys.
    write_key(tmp_path / "old.pem", key, b"kurz")
    pw.write_bytes(b"kurz\n")
    old = sqlite_backend.settings(signing_key_path=tmp_path / "old.pem", signing_key_password_file=pw)
    assert load_signer(old, create=True).public_key().key_id == key.public_key().key_id


async def test_the_sqlite_store_is_private(tmp_path: Path, key: Sm2PrivateKey) -> None:
    backend = Backend("sqlite", tmp_path, None)
    backend.path = tmp_path / "data" / "audit" / "audit.db"
    log = await AuditLog.open(backend.settings(path=backend.path), key, start_ticker=False)
    await log.append(rpc_record_factory()(0))
    wal = backend.path.with_name("audit.db-wal")
    assert wal.exists()
    assert mode(backend.path.parent) == 0o700
    assert mode(backend.path) == 0o600 and mode(wal) == 0o600
    await log.close()
    backend.path.chmod(0o644)  # loosened by hand: tightened again at the next open
    log = await AuditLog.open(backend.settings(path=backend.path), key, start_ticker=False)
    assert mode(backend.path) == 0o600
    await log.close()
