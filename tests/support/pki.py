"""A throwaway PKI for TLS/mTLS tests: a CA, a server certificate for 127.0.0.1/localhost,
and client certificates, written as PEM files (made with pyca/cryptography)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca_cert: Path
    stranger_cert: Path
    stranger_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "xinserve tests"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(ca: x509.Certificate, ca_key, cn: str, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path) -> Pki:
    """Write a CA, a server cert, a client cert (CN alice), and a stranger cert from another CA."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("xinserve test CA")
    other, other_key = _ca("some other CA")
    server, server_key = _leaf(ca, ca_key, "localhost", server=True)
    client, client_key = _leaf(ca, ca_key, "alice", server=False)
    stranger, stranger_key = _leaf(other, other_key, "mallory", server=False)
    paths = Pki(
        ca_cert=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca_cert=directory / "other-ca.pem",
        stranger_cert=directory / "stranger.pem",
        stranger_key=directory / "stranger.key",
    )
    for path, cert in (
        (paths.ca_cert, ca),
        (paths.server_cert, server),
        (paths.client_cert, client),
        (paths.other_ca_cert, other),
        (paths.stranger_cert, stranger),
    ):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(paths.server_key, server_key)
    _write_key(paths.client_key, client_key)
    _write_key(paths.stranger_key, stranger_key)
    return paths
