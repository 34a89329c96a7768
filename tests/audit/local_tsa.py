"""A local RFC 3161 time-stamping authority for the tests: ``openssl ts -reply`` behind a
small HTTP endpoint (RFC 3161 section 3.4: POST ``application/timestamp-query``).

The TSA's certificate is issued by its own test CA, with the critical ``timeStamping``
extended key usage RFC 3161 section 2.3 requires. By default replies carry the signer's
certificate only; ``LocalTsa(chain=True)`` issues it from an intermediate under the root and
configures ``certs = chain.pem`` and ``ess_cert_id_chain = yes``, as an operator's TSA would.
"""

from __future__ import annotations

import datetime
import http.server
import subprocess
import tempfile
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def make_tsa_pki(directory: Path, cn: str = "xinserve test TSA", chain: bool = False) -> tuple[Path, Path, Path]:
    """Write ``ca.pem``, ``tsa.pem`` and ``tsa.key``; return their paths.

    With ``chain``, ``tsa.pem`` is issued by an intermediate CA under ``ca.pem`` and
    ``chain.pem`` holds that intermediate then the root.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(cn + " root"))
        .issuer_name(_name(cn + " root"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=1 if chain else 0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    issuer, issuer_key = ca, ca_key
    if chain:
        issuer_key = ec.generate_private_key(ec.SECP256R1())
        issuer = (
            x509.CertificateBuilder()
            .subject_name(_name(cn + " intermediate"))
            .issuer_name(ca.subject)
            .public_key(issuer_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        (directory / "chain.pem").write_bytes(
            issuer.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
        )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "tsa.pem", directory / "tsa.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    _write_key(paths[2], key)
    return paths


class LocalTsa:
    """``openssl ts -reply`` served over HTTP on 127.0.0.1; ``url`` is its endpoint."""

    def __init__(self, directory: Path, chain: bool = False) -> None:
        self.dir = directory
        self.ca, self.cert, self.key = make_tsa_pki(directory, chain=chain)
        self.chain = directory / "chain.pem" if chain else None
        (directory / "serial").write_text("01\n")
        self.config = directory / "tsa.cnf"
        self.config.write_text(
            f"""[ tsa ]
default_tsa = tsa_config1

[ tsa_config1 ]
serial = {directory / "serial"}
crypto_device = builtin
signer_cert = {self.cert}
signer_key = {self.key}
signer_digest = sha256
default_policy = 1.3.6.1.4.1.32473.1
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = yes
tsa_name = no
ess_cert_id_alg = sha256
"""
            + (f"certs = {self.chain}\ness_cert_id_chain = yes\n" if self.chain else "ess_cert_id_chain = no\n")
        )
        self.requests = 0
        tsa = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                tsa.requests += 1
                with tempfile.TemporaryDirectory(dir=tsa.dir) as tmp:
                    query, reply = Path(tmp) / "q.tsq", Path(tmp) / "r.tsr"
                    query.write_bytes(body)
                    done = subprocess.run(
                        [
                            "openssl",
                            "ts",
                            "-reply",
                            "-config",
                            str(tsa.config),
                            "-queryfile",
                            str(query),
                            "-out",
                            str(reply),
                        ],
                        capture_output=True,
                        check=False,
                    )
                    data = reply.read_bytes() if done.returncode == 0 else b""
                if not data:
                    self.send_response(500)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/timestamp-reply")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/tsa"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
