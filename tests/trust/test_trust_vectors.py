"""Standard test vectors: SM3 (GB/T 32905), SM4 (GB/T 32907), SM4-GCM (RFC 8998), SM2 (GB/T 32918.2)."""

from __future__ import annotations

import pytest
import trust_sm2_reference as ref
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from trust import sm4
from trust._curve import SM2P256V1, Curve
from trust.errors import DecryptionError, InvalidSignature
from trust.sm2 import DEFAULT_ID, Sm2PrivateKey, Sm2PublicKey, encode_der_signature, parse_der_signature
from trust.sm3 import Sm3Hasher, sm3, sm3_file, sm3_hex


def h(s: str) -> int:
    return int(s.replace(" ", ""), 16)


# --- SM3: GB/T 32905-2016 Appendix A ---------------------------------------------------------


def test_sm3_example_1_abc() -> None:
    assert sm3_hex(b"abc") == "66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0"


def test_sm3_example_2_512_bits() -> None:
    assert sm3_hex(b"abcd" * 16) == "debe9ff92275b8a138604889c18e5a4d6fdb70e5387e5765293dcba39c0c5732"


def test_sm3_incremental_and_file_agree(tmp_path) -> None:
    data = bytes(range(256)) * 10_000
    hs = Sm3Hasher()
    for i in range(0, len(data), 999):
        hs.update(data[i : i + 999])
    p = tmp_path / "f"
    p.write_bytes(data)
    seen = []
    digest, size = sm3_file(p, seen.append, chunk_size=65536)
    assert hs.digest() == sm3(data) == digest
    assert size == len(data) == sum(seen)


# --- SM4: GB/T 32907-2016 Appendix A; SM4-GCM: RFC 8998 Appendix A.1 --------------------------


def test_sm4_block_example_1() -> None:
    key = bytes.fromhex("0123456789abcdeffedcba9876543210")
    enc = Cipher(algorithms.SM4(key), modes.ECB()).encryptor()
    assert (enc.update(key) + enc.finalize()).hex() == "681edf34d206965e86b3e94f536e4246"


def test_sm4_gcm_rfc8998_vector() -> None:
    key = bytes.fromhex("0123456789ABCDEFFEDCBA9876543210")
    iv = bytes.fromhex("00001234567800000000ABCD")
    aad = bytes.fromhex("FEEDFACEDEADBEEFFEEDFACEDEADBEEFABADDAD2")
    pt = bytes.fromhex(
        "AAAAAAAAAAAAAAAABBBBBBBBBBBBBBBBCCCCCCCCCCCCCCCCDDDDDDDDDDDDDDDD"
        "EEEEEEEEEEEEEEEEFFFFFFFFFFFFFFFFEEEEEEEEEEEEEEEEAAAAAAAAAAAAAAAA"
    )
    enc = Cipher(algorithms.SM4(key), modes.GCM(iv)).encryptor()
    enc.authenticate_additional_data(aad)
    ct = enc.update(pt) + enc.finalize()
    assert ct.hex().upper() == (
        "17F399F08C67D5EE19D0DC9969C4BB7D5FD46FD3756489069157B282BB200735"
        "D82710CA5C22F0CCFA7CBF93D496AC15A56834CBCF98C397B4024A2691233B8D"
    )
    assert enc.tag.hex().upper() == "83DE3541E4C2B58177E065A9BF7B62EC"


def test_sm4_seal_open_roundtrip_and_failures() -> None:
    key = sm4.generate_key()
    sealed = sm4.seal(key, b"captured prompt", b"record-42")
    assert len(sealed) == len(b"captured prompt") + sm4.OVERHEAD
    assert sm4.open_(key, sealed, b"record-42") == b"captured prompt"
    assert sm4.seal(key, b"x") != sm4.seal(key, b"x")  # fresh nonce each time
    with pytest.raises(DecryptionError):
        sm4.open_(key, sealed, b"record-43")
    with pytest.raises(DecryptionError):
        sm4.open_(sm4.generate_key(), sealed, b"record-42")
    flipped = bytearray(sealed)
    flipped[20] ^= 1
    with pytest.raises(DecryptionError):
        sm4.open_(key, bytes(flipped), b"record-42")
    with pytest.raises(DecryptionError):
        sm4.open_(key, sealed[:10])
    with pytest.raises(ValueError):
        sm4.seal(b"short", b"x")


# --- SM2: GB/T 32918.2-2016 Appendix A (Fp-256 test curve) -----------------------------------

TEST_CURVE = Curve(
    p=h("8542D69E 4C044F18 E8B92435 BF6FF7DE 45728391 5C45517D 722EDB8B 08F1DFC3"),
    a=h("787968B4 FA32C3FD 2417842E 73BBFEFF 2F3C848B 6831D7E0 EC65228B 3937E498"),
    b=h("63E4C6D3 B23B0C84 9CF84241 484BFE48 F61D59A5 B16BA06E 6E12D1DA 27C5249A"),
    gx=h("421DEBD6 1B62EAB6 746434EB C3CC315E 32220B3B ADD50BDC 4C4E6C14 7FEDD43D"),
    gy=h("0680512B CBB42C07 D47349D2 153B70C4 E5D7FDFC BFA36EA1 A85841B9 E46E09A2"),
    n=h("8542D69E 4C044F18 E8B92435 BF6FF7DD 29772063 0485628D 5AE74EE7 C32E79B7"),
)
EX_ID = b"ALICE123@YAHOO.COM"
EX_MSG = b"message digest"
EX_D = h("128B2FA8 BD433C6C 068C8D80 3DFF7979 2A519A55 171B1B65 0C23661D 15897263")
EX_K = h("6CB28D99 385C175C 94F94E93 4817663F C176D925 DD72B727 260DBAAE 1FB2F96F")
EX_PUB = (
    h("0AE4C779 8AA0F119 471BEE11 825BE462 02BB79E2 A5844495 E97C04FF 4DF2548A"),
    h("7C0240F8 8F1CD4E1 6352A73C 17B7F16F 07353E53 A176D684 A9FE0C6B B798E857"),
)
EX_Z = "F4A38489E32B45B6F876E3AC2168CA392362DC8F23459C1D1146FC3DBFB7BC9A"
EX_R = h("40F1EC59 F793D9F4 9E09DCEF 49130D41 94F79FB1 EED2CAA5 5BACDB49 C4E755D1")
EX_S = h("6FC6DAC3 2C5D5CF1 0C77DFB2 0F7C2EB6 67A45787 2FB09EC5 6327A67E C7DEEBE7")


def test_gbt32918_example_public_key_and_z() -> None:
    assert TEST_CURVE.mul(EX_D) == EX_PUB
    assert ref.z_value(TEST_CURVE, EX_ID, *EX_PUB).hex().upper() == EX_Z


def test_gbt32918_example_fixed_k_reproduces_published_signature() -> None:
    assert ref.sign(TEST_CURVE, EX_D, EX_ID, EX_MSG, EX_K) == (EX_R, EX_S)


def test_gbt32918_example_published_signature_verifies_and_wrong_id_fails() -> None:
    assert ref.verify(TEST_CURVE, EX_PUB, EX_ID, EX_MSG, EX_R, EX_S)
    assert not ref.verify(TEST_CURVE, EX_PUB, b"BOB123@YAHOO.COM", EX_MSG, EX_R, EX_S)
    assert not ref.verify(TEST_CURVE, EX_PUB, b"", EX_MSG, EX_R, EX_S)
    assert not ref.verify(TEST_CURVE, EX_PUB, EX_ID, b"message digesT", EX_R, EX_S)


# --- the library against the reference on the recommended curve sm2p256v1 ---------------------


def test_library_verifies_reference_fixed_k_signature_with_default_id() -> None:
    d = EX_D  # any scalar in range will do; reuse the published one
    pub_pt = SM2P256V1.mul(d)
    assert pub_pt is not None
    pub = Sm2PublicKey(pub_pt[0].to_bytes(32, "big") + pub_pt[1].to_bytes(32, "big"))
    r, s = ref.sign(SM2P256V1, d, DEFAULT_ID, EX_MSG, EX_K)
    sig = encode_der_signature(r, s)
    assert parse_der_signature(sig) == (r, s)
    pub.verify(sig, EX_MSG)
    # The same equation with another ID (the empty one OpenSSL 3 uses by default) must not verify.
    r2, s2 = ref.sign(SM2P256V1, d, b"", EX_MSG, EX_K)
    with pytest.raises(InvalidSignature):
        pub.verify(encode_der_signature(r2, s2), EX_MSG)
    # Deterministic: the library's private key from the same scalar yields the same public key.
    assert Sm2PrivateKey(d.to_bytes(32, "big")).public_key() == pub


def test_reference_verifies_library_signatures(key: Sm2PrivateKey) -> None:
    raw = key.public_key().raw
    pub = (int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    for msg in (b"", b"abc", bytes(1000)):
        r, s = parse_der_signature(key.sign(msg))
        assert ref.verify(SM2P256V1, pub, DEFAULT_ID, msg, r, s)
        assert not ref.verify(SM2P256V1, pub, b"", msg, r, s)
