"""Password-protected PKCS#8 private keys: ``EncryptedPrivateKeyInfo`` (RFC 5958) with PBES2 (RFC 8018).

Written: PBKDF2-HMAC-SHA256 and SM4-CBC, as ``openssl pkcs8 -topk8 -v2 sm4-cbc`` writes them.
Read: PBKDF2 with HMAC-SM3, HMAC-SHA-256 or HMAC-SHA-512, and SM4-CBC, AES-128-CBC or AES-256-CBC.
The key inside is the caller's (``trust.sm2.Sm2PrivateKey`` parses and writes it).
"""

from __future__ import annotations

import os

from asn1crypto import algos, core, keys
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from trust.errors import KeyFormatError

OID_SM4_CBC = "1.2.156.10197.1.104.2"
OID_HMAC_SM3 = "1.2.156.10197.1.401.2"

#: PBKDF2 iterations for password-protected private keys written by ``Sm2PrivateKey.to_pem``.
DEFAULT_KDF_ITERATIONS = 200_000
_MAX_KDF_ITERATIONS = 10_000_000

# asn1crypto knows PBES2 and PBKDF2; teach it the SM4-CBC cipher and the HMAC-SM3 PRF OIDs.
if OID_SM4_CBC not in algos.EncryptionAlgorithmId._map:
    algos.EncryptionAlgorithmId._map[OID_SM4_CBC] = "sm4_cbc"
    algos.EncryptionAlgorithmId._reverse_map = None
    algos.EncryptionAlgorithm._oid_specs["sm4_cbc"] = core.OctetString
if OID_HMAC_SM3 not in algos.HmacAlgorithmId._map:
    algos.HmacAlgorithmId._map[OID_HMAC_SM3] = "sm3"
    algos.HmacAlgorithmId._reverse_map = None

_PRFS: dict[str, hashes.HashAlgorithm] = {
    "sm3": hashes.SM3(),
    "sha256": hashes.SHA256(),
    "sha512": hashes.SHA512(),
}
_CIPHERS: dict[str, tuple[type, int]] = {
    "sm4_cbc": (algorithms.SM4, 16),
    "aes256_cbc": (algorithms.AES, 32),
    "aes128_cbc": (algorithms.AES, 16),
}


def encrypt(der: bytes, password: bytes, iterations: int = DEFAULT_KDF_ITERATIONS) -> bytes:
    """Wrap the DER ``PrivateKeyInfo`` ``der`` in a DER ``EncryptedPrivateKeyInfo``: PBES2 with
    PBKDF2-HMAC-SHA256 (``iterations`` rounds, 16-byte random salt) and SM4-CBC (16-byte random IV)."""
    salt, iv = os.urandom(16), os.urandom(16)
    key = PBKDF2HMAC(hashes.SHA256(), 16, salt, iterations).derive(password)
    padder = padding.PKCS7(128).padder()
    enc = Cipher(algorithms.SM4(key), modes.CBC(iv)).encryptor()
    ct = enc.update(padder.update(der) + padder.finalize()) + enc.finalize()
    kdf = algos.KdfAlgorithm(
        {
            "algorithm": "pbkdf2",
            "parameters": algos.Pbkdf2Params(
                {
                    "salt": algos.Pbkdf2Salt(name="specified", value=core.OctetString(salt)),
                    "iteration_count": iterations,
                    "prf": algos.HmacAlgorithm({"algorithm": "sha256", "parameters": core.Null()}),
                }
            ),
        }
    )
    scheme = algos.EncryptionAlgorithm({"algorithm": "sm4_cbc", "parameters": core.OctetString(iv)})
    info = keys.EncryptedPrivateKeyInfo(
        {
            "encryption_algorithm": algos.EncryptionAlgorithm(
                {
                    "algorithm": "pbes2",
                    "parameters": algos.Pbes2Params({"key_derivation_func": kdf, "encryption_scheme": scheme}),
                }
            ),
            "encrypted_data": ct,
        }
    )
    return bytes(info.dump())


def decrypt(der: bytes, password: bytes) -> bytes:
    """The DER ``PrivateKeyInfo`` inside the DER ``EncryptedPrivateKeyInfo`` ``der``.

    Raises:
        KeyFormatError: not PBES2/PBKDF2 with a PRF and cipher listed above, iterations outside
            1..10,000,000, a malformed structure, or a wrong password.
    """
    try:
        info = keys.EncryptedPrivateKeyInfo.load(bytes(der), strict=True)
        alg = info["encryption_algorithm"]
        if alg["algorithm"].native != "pbes2":
            raise KeyFormatError("only PBES2-encrypted private keys are supported")
        pbes2 = alg["parameters"]
        kdf_alg = pbes2["key_derivation_func"]
        if kdf_alg["algorithm"].native != "pbkdf2":
            raise KeyFormatError("only PBKDF2 key derivation is supported")
        kdf = kdf_alg["parameters"]
        if kdf["salt"].name != "specified":
            raise KeyFormatError("only a specified PBKDF2 salt is supported")
        prf = kdf["prf"]["algorithm"].native
        if prf not in _PRFS:
            raise KeyFormatError(f"unsupported PBKDF2 PRF {kdf['prf']['algorithm'].dotted}")
        scheme = pbes2["encryption_scheme"]
        cipher_name = scheme["algorithm"].native
        if cipher_name not in _CIPHERS:
            raise KeyFormatError(f"unsupported PKCS#8 cipher {scheme['algorithm'].dotted}")
        cipher_cls, key_len = _CIPHERS[cipher_name]
        iv = scheme["parameters"].native
        iterations = kdf["iteration_count"].native
        salt = kdf["salt"].chosen.native
        ct = info["encrypted_data"].native
    except KeyFormatError:
        raise
    except Exception:
        raise KeyFormatError("malformed encrypted PKCS#8 private key") from None
    if not isinstance(iv, bytes) or not 1 <= iterations <= _MAX_KDF_ITERATIONS or len(iv) != 16:
        raise KeyFormatError("encrypted PKCS#8 parameters out of range")
    if not ct or len(ct) % 16:
        raise KeyFormatError("encrypted PKCS#8 parameters out of range")
    key = PBKDF2HMAC(_PRFS[prf], key_len, salt, iterations).derive(password)
    dec = Cipher(cipher_cls(key), modes.CBC(iv)).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(dec.update(ct) + dec.finalize()) + unpadder.finalize()
    except ValueError:
        raise KeyFormatError("wrong password for the private key (or the key file is corrupt)") from None
