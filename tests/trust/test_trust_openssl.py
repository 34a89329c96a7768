"""Cross-verification with the OpenSSL 3 CLI, both ways, and its empty-ID default as a trap."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trust.errors import InvalidSignature
from trust.sm2 import DEFAULT_ID, Sm2PrivateKey, Sm2PublicKey


def _openssl_sm2_reason() -> str | None:
    exe = shutil.which("openssl")
    if exe is None:
        return "the openssl CLI is not installed"
    out = subprocess.run([exe, "genpkey", "-algorithm", "SM2"], capture_output=True, check=False)
    if out.returncode != 0 or b"PRIVATE KEY" not in out.stdout:
        return "this openssl CLI cannot generate SM2 keys"
    return None


_REASON = _openssl_sm2_reason()
if _REASON:
    print(f"SKIP openssl cross-verification: {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

DISTID = f"distid:{DEFAULT_ID.decode()}"


def openssl(*args: str | Path, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["openssl", *map(str, args)], capture_output=True, input=input, check=False, timeout=60)


@pytest.fixture
def msg(tmp_path: Path) -> Path:
    p = tmp_path / "msg.bin"
    p.write_bytes(b"xinserve cross-verification message\n" * 100)
    return p


def test_openssl_signature_verifies_here(tmp_path: Path, msg: Path) -> None:
    key = tmp_path / "k.pem"
    assert openssl("genpkey", "-algorithm", "SM2", "-out", key).returncode == 0
    assert openssl("pkey", "-in", key, "-pubout", "-out", tmp_path / "k.pub").returncode == 0
    sig = tmp_path / "sig"
    r = openssl("dgst", "-sm3", "-sign", key, "-sigopt", DISTID, "-out", sig, msg)
    assert r.returncode == 0, r.stderr
    pub = Sm2PublicKey.from_pem((tmp_path / "k.pub").read_bytes())
    pub.verify(sig.read_bytes(), msg.read_bytes())
    # The same OpenSSL private key loads here and yields the same public key.
    assert Sm2PrivateKey.from_pem(key.read_bytes()).public_key() == pub


def test_our_signature_verifies_in_openssl(tmp_path: Path, msg: Path, key: Sm2PrivateKey) -> None:
    (tmp_path / "k.pub").write_bytes(key.public_key().to_pem())
    (tmp_path / "sig").write_bytes(key.sign(msg.read_bytes()))
    r = openssl("dgst", "-sm3", "-verify", tmp_path / "k.pub", "-sigopt", DISTID, "-signature", tmp_path / "sig", msg)
    assert r.returncode == 0 and b"Verified OK" in r.stdout, r.stdout + r.stderr


def test_openssl_default_empty_id_is_a_trap(tmp_path: Path, msg: Path, key: Sm2PrivateKey) -> None:
    """OpenSSL 3.0 without distid uses an EMPTY ID: neither side may accept the other's signature."""
    (tmp_path / "k.pem").write_bytes(key.to_pem())
    (tmp_path / "k.pub").write_bytes(key.public_key().to_pem())
    sig = tmp_path / "sig"
    assert openssl("dgst", "-sm3", "-sign", tmp_path / "k.pem", "-out", sig, msg).returncode == 0
    with pytest.raises(InvalidSignature):
        key.public_key().verify(sig.read_bytes(), msg.read_bytes())
    # ... while OpenSSL itself accepts it with its empty default, proving the signature is otherwise fine.
    ok = openssl("dgst", "-sm3", "-verify", tmp_path / "k.pub", "-signature", sig, msg)
    assert b"Verified OK" in ok.stdout
    (tmp_path / "ours").write_bytes(key.sign(msg.read_bytes()))
    bad = openssl("dgst", "-sm3", "-verify", tmp_path / "k.pub", "-signature", tmp_path / "ours", msg)
    assert bad.returncode != 0 and b"Verified OK" not in bad.stdout


def test_keys_interoperate_with_openssl(tmp_path: Path, key: Sm2PrivateKey) -> None:
    (tmp_path / "k.pem").write_bytes(key.to_pem(b"pw", iterations=2048))
    r = openssl("pkey", "-in", tmp_path / "k.pem", "-passin", "pass:pw", "-pubout")
    assert r.returncode == 0, r.stderr
    assert Sm2PublicKey.from_pem(r.stdout) == key.public_key()
    # An OpenSSL-encrypted PKCS#8 (PBKDF2-HMAC-SHA256, SM4-CBC) loads here.
    enc = openssl(
        "pkcs8",
        "-topk8",
        "-in",
        tmp_path / "k.pem",
        "-passin",
        "pass:pw",
        "-v2",
        "sm4-cbc",
        "-passout",
        "pass:other",
    )
    assert enc.returncode == 0, enc.stderr
    assert Sm2PrivateKey.from_pem(enc.stdout, b"other").public_key() == key.public_key()
    # DER public key from OpenSSL is byte-identical to ours (same key id on both sides).
    (tmp_path / "k.pub").write_bytes(key.public_key().to_pem())
    der = openssl("pkey", "-pubin", "-in", tmp_path / "k.pub", "-outform", "DER")
    assert der.returncode == 0, der.stderr
    assert der.stdout == key.public_key().der


def test_pkeyutl_rawin_with_distid_interoperates(tmp_path: Path, msg: Path, key: Sm2PrivateKey) -> None:
    (tmp_path / "k.pem").write_bytes(key.to_pem())
    (tmp_path / "k.pub").write_bytes(key.public_key().to_pem())
    sig = tmp_path / "sig"
    r = openssl(
        "pkeyutl",
        "-sign",
        "-rawin",
        "-digest",
        "sm3",
        "-inkey",
        tmp_path / "k.pem",
        "-in",
        msg,
        "-pkeyopt",
        DISTID,
        "-out",
        sig,
    )
    if r.returncode != 0:
        pytest.skip(f"this openssl pkeyutl cannot sign SM2 with -rawin: {r.stderr.decode()[:200]}")
    key.public_key().verify(sig.read_bytes(), msg.read_bytes())
    sig.write_bytes(key.sign(msg.read_bytes()))
    v = openssl(
        "pkeyutl",
        "-verify",
        "-rawin",
        "-digest",
        "sm3",
        "-pubin",
        "-inkey",
        tmp_path / "k.pub",
        "-in",
        msg,
        "-sigfile",
        sig,
        "-pkeyopt",
        DISTID,
    )
    assert v.returncode == 0 and b"Verified Successfully" in v.stdout, v.stdout + v.stderr
