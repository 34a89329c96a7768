"""The server's TLS files, read and checked before any listener binds.

``tls.cert_file`` is a PEM certificate chain (leaf first, as OpenSSL's
``SSL_CTX_use_certificate_chain_file`` and grpc expect), ``tls.key_file`` the leaf's
unencrypted PEM private key (PKCS#8, or the traditional PKCS#1/SEC1 forms), and
``tls.client_ca_file`` (optional) a PEM bundle of the CAs that sign client certificates.
Parsed with pyca/cryptography; the key must belong to the leaf certificate (their
SubjectPublicKeyInfo DER encodings are equal).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from service.settings.config import TlsSettings


class TlsMaterialError(Exception):
    """A TLS file cannot be used. The message is one line naming the setting (``tls.cert_file``,
    ``tls.key_file`` or ``tls.client_ca_file``) and what is wrong; it holds no file content,
    key material or path."""


@dataclass(frozen=True)
class TlsMaterial:
    """The checked PEM bytes, as grpc's ``ssl_server_credentials`` takes them.

    Attributes:
        cert_chain_pem: ``tls.cert_file`` as read.
        key_pem: ``tls.key_file`` as read.
        client_ca_pem: ``tls.client_ca_file`` as read, or None when not configured.
        leaf_spki_sha256: SHA-256 (32 bytes) of the leaf certificate's SubjectPublicKeyInfo DER.
    """

    cert_chain_pem: bytes
    key_pem: bytes
    client_ca_pem: bytes | None
    leaf_spki_sha256: bytes


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise TlsMaterialError(f"{setting}: is a directory, not a PEM file") from None
    except OSError as exc:
        raise TlsMaterialError(f"{setting}: cannot be read ({exc.strerror or type(exc).__name__})") from None


def _certificates(data: bytes, setting: str, what: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsMaterialError(
            f"{setting}: not a PEM {what} (no readable '-----BEGIN CERTIFICATE-----' block)"
        ) from None


def _spki(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_tls_material(tls: TlsSettings) -> TlsMaterial:
    """Read and check ``tls.cert_file``, ``tls.key_file`` and ``tls.client_ca_file``.

    Returns:
        the checked files' bytes and the leaf's SPKI hash.

    Raises:
        TlsMaterialError: a file is not set, cannot be read, is not PEM of its kind, the key is
            encrypted (no passphrase setting exists) or of an unsupported algorithm, or the key
            does not match the leaf certificate's public key.
    """
    if tls.cert_file is None or tls.key_file is None:
        raise TlsMaterialError("tls.cert_file and tls.key_file are required for a TLS listener")
    chain_pem = _read(tls.cert_file, "tls.cert_file")
    key_pem = _read(tls.key_file, "tls.key_file")
    client_ca_pem = _read(tls.client_ca_file, "tls.client_ca_file") if tls.client_ca_file is not None else None

    leaf = _certificates(chain_pem, "tls.cert_file", "certificate chain")[0]
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise TlsMaterialError(
            "tls.key_file: the private key is encrypted; give the server an unencrypted key (readable only by its user)"
        ) from None
    except UnsupportedAlgorithm:
        raise TlsMaterialError("tls.key_file: the private key's algorithm is not supported") from None
    except ValueError:
        raise TlsMaterialError("tls.key_file: not a PEM private key") from None
    leaf_spki = _spki(leaf.public_key())
    if _spki(key.public_key()) != leaf_spki:
        raise TlsMaterialError(
            "tls.key_file does not match tls.cert_file: the private key does not belong to the first (leaf) certificate"
        )
    if client_ca_pem is not None:
        _certificates(client_ca_pem, "tls.client_ca_file", "CA certificate bundle")
    return TlsMaterial(chain_pem, key_pem, client_ca_pem, hashlib.sha256(leaf_spki).digest())
