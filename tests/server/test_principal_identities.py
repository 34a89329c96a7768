"""Principals over real mTLS: a call with a bearer token and a client certificate records both
identities; a certificate subject with a bidi override is stored escaped; an auditor's
``AuditService`` filter finds an mTLS principal however the DN is typed."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from audit import QueryFilter, decode_record
from service.access.auth import AuthenticationFailed, Authenticator, hash_token, load_token_file
from service.frontends.grpc.server import Frontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.fake_engine import FakeEngine
from xinserve.v1 import audit_pb2, audit_pb2_grpc, model_pb2, model_pb2_grpc

ASYNC = pytest.mark.asyncio(loop_scope="session")
USER_TOKEN = "principal-user-token-0123456789"
AUDITOR_TOKEN = "principal-auditor-token-0123456789"


class _Pki:
    """A CA, a server certificate for 127.0.0.1, and client certificates with any subject."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "principal test CA")])
        self.ca = self._sign(ca_name, ca_name, self.ca_key.public_key(), ca=True)
        self.ca_file = self._write("ca.pem", self.ca.public_bytes(serialization.Encoding.PEM))
        self.server_cert, self.server_key = self.leaf(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), server=True
        )

    def _sign(self, subject, issuer, public_key, *, ca=False, server=False, sans=()) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
        else:
            usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
        elif sans:
            # RFC 5280 section 4.2.1.6: critical when the subject is empty.
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in sans]),
                critical=not list(subject),
            )
        return builder.sign(self.ca_key, hashes.SHA256())

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        return path

    def leaf(
        self, subject: x509.Name, *, server: bool = False, sans: tuple[str, ...] = ()
    ) -> tuple[x509.Certificate, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._sign(subject, self.ca.subject, key.public_key(), server=server, sans=sans)
        pem_key = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cert, pem_key

    def credentials(self, cert: x509.Certificate, key: bytes) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            self.ca_file.read_bytes(), key, cert.public_bytes(serialization.Encoding.PEM)
        )


def _name(*pairs: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in pairs])


@pytest.fixture
async def mtls_server(tmp_path):
    pki = _Pki(tmp_path)
    server_cert = pki._write("server.pem", pki.server_cert.public_bytes(serialization.Encoding.PEM))
    server_key = pki._write("server.key", pki.server_key)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"svc-a {hash_token(USER_TOKEN)} user\nann {hash_token(AUDITOR_TOKEN)} auditor\n")
    tokens.chmod(0o600)
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": [], "tls": ["127.0.0.1:0"]},
            "tls": {"cert_file": str(server_cert), "key_file": str(server_key), "client_ca_file": str(pki.ca_file)},
            "auth": {
                "token_file": str(tokens),
                "required": True,
                "mtls_roles": [{"san": "spiffe://bank.example/audit/*", "roles": ["auditor"]}],
            },
            "metrics_listen": None,
        }
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    engine = FakeEngine("m")
    try:
        await frontend.start()
        await engine.start()
        runtime.add_model(ModelEntry("m", "generate", tmp_path, engine, manifest_digest="sm3:" + "ab" * 32))
        await runtime.mark(runtime.models["m"], ModelState.READY)
        await runtime.set_serving(True)
        yield pki, runtime, f"127.0.0.1:{next(iter(frontend.ports.values()))}"
    finally:
        await frontend.stop(0)
        await runtime.audit.close()


async def _list_models(target: str, creds: grpc.ChannelCredentials, metadata) -> None:
    async with grpc.aio.secure_channel(target, creds) as channel:
        await model_pb2_grpc.ModelServiceStub(channel).ListModels(model_pb2.ListModelsRequest(), metadata=metadata)


async def _records(runtime: Runtime) -> tuple[dict, list[bytes]]:
    rows = await runtime.audit.log.query(QueryFilter(event="rpc"))
    return {r.request_id: r for r in (decode_record(row.body)[2] for row in rows)}, [row.body for row in rows]


@ASYNC
async def test_token_and_certificate_are_both_recorded_and_subjects_are_escaped(mtls_server):
    pki, runtime, target = mtls_server
    # `openssl req -subj /CN=teller-7/O=Bank` order: RFC 4514 renders it O=Bank,CN=teller-7
    teller, teller_key = pki.leaf(_name((NameOID.COMMON_NAME, "teller-7"), (NameOID.ORGANIZATION_NAME, "Bank")))
    bidi, bidi_key = pki.leaf(_name((NameOID.ORGANIZATION_NAME, "Bank\u202eknaB"), (NameOID.COMMON_NAME, "teller-9")))
    teller_creds = pki.credentials(teller, teller_key)

    await _list_models(
        target, teller_creds, (("authorization", f"Bearer {USER_TOKEN}"), ("x-request-id", "token-and-cert"))
    )
    await _list_models(target, teller_creds, (("x-request-id", "cert-only"),))
    await _list_models(target, pki.credentials(bidi, bidi_key), (("x-request-id", "bidi-cert"),))

    records, bodies = await _records(runtime)
    fingerprint = teller.fingerprint(hashes.SHA256()).hex()
    both = records["token-and-cert"]
    assert (both.principal, both.auth_method) == ("svc-a", "token")
    assert (both.cert_subject, both.cert_fingerprint) == ("O=Bank,CN=teller-7", fingerprint)
    cert_only = records["cert-only"]
    assert (cert_only.principal, cert_only.auth_method, cert_only.cert_subject) == (
        "O=Bank,CN=teller-7",
        "mtls",
        "O=Bank,CN=teller-7",
    )
    assert records["bidi-cert"].principal == "CN=teller-9,O=Bank\\E2\\80\\AEknaB"
    assert not any("\u202e".encode() in body for body in bodies)


@ASYNC
async def test_auditor_filter_finds_an_mtls_principal_however_the_dn_is_typed(mtls_server):
    pki, runtime, target = mtls_server
    teller, teller_key = pki.leaf(_name((NameOID.COMMON_NAME, "teller-7"), (NameOID.ORGANIZATION_NAME, "Bank")))
    auditor, auditor_key = pki.leaf(_name((NameOID.COMMON_NAME, "ann")))
    await _list_models(target, pki.credentials(teller, teller_key), (("x-request-id", "teller-call"),))
    auditor_md = (("authorization", f"Bearer {AUDITOR_TOKEN}"),)
    async with grpc.aio.secure_channel(target, pki.credentials(auditor, auditor_key)) as channel:
        api = audit_pb2_grpc.AuditServiceStub(channel)
        for typed in ("CN=teller-7,O=Bank", "cn=teller-7, o=Bank", "O=Bank,CN=teller-7"):
            reply = api.QueryRecords(
                audit_pb2.QueryRecordsRequest(filter=audit_pb2.AuditFilter(principal=typed, event="rpc")),
                metadata=auditor_md,
            )
            rows = [row async for row in reply]
            assert [decode_record(r.canonical)[2].request_id for r in rows] == ["teller-call"], typed
            assert {r.principal for r in rows} == {"O=Bank,CN=teller-7"}
    queries = await runtime.audit.log.query(QueryFilter(event="auditor_query"))
    typed_filters = [decode_record(q.body)[2].detail.get("filter_principal") for q in queries]
    assert typed_filters == ["CN=teller-7,O=Bank", "cn=teller-7, o=Bank", "O=Bank,CN=teller-7"]


def test_a_subject_that_does_not_decode_is_refused_not_a_crash(tmp_path):
    pki = _Pki(tmp_path)
    cert, _ = pki.leaf(_name((NameOID.COMMON_NAME, "QQQQ"), (NameOID.ORGANIZATION_NAME, "Bank")))
    # The CA signed a UTF8String that is not UTF-8 (the TLS layer checks signatures, not text).
    der = cert.public_bytes(serialization.Encoding.DER).replace(b"QQQQ", b"\xff\xfe\xff\xfe")
    pem = x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"svc-a {hash_token(USER_TOKEN)} user\n")
    authn = Authenticator(load_token_file(tokens), required=True)
    for authorization in (None, f"Bearer {USER_TOKEN}"):
        with pytest.raises(AuthenticationFailed, match="subject cannot be decoded"):
            authn.authenticate(authorization, {"x509_pem_cert": [pem]})


async def _audit_query(target: str, creds: grpc.ChannelCredentials) -> grpc.StatusCode:
    async with grpc.aio.secure_channel(target, creds) as channel:
        try:
            reply = audit_pb2_grpc.AuditServiceStub(channel).QueryRecords(
                audit_pb2.QueryRecordsRequest(filter=audit_pb2.AuditFilter(event="start"))
            )
            _ = [row async for row in reply]
        except grpc.aio.AioRpcError as err:
            return err.code()
    return grpc.StatusCode.OK


@ASYNC
async def test_a_certificate_with_an_empty_subject_is_named_by_its_fingerprint(mtls_server):
    pki, runtime, target = mtls_server
    svid, svid_key = pki.leaf(x509.Name([]), sans=("spiffe://bank.example/audit/ann",))
    creds = pki.credentials(svid, svid_key)
    await _list_models(target, creds, (("x-request-id", "empty-subject"),))
    assert await _audit_query(target, creds) == grpc.StatusCode.OK  # roles from the SAN rule
    records, _ = await _records(runtime)
    rec = records["empty-subject"]
    fingerprint = svid.fingerprint(hashes.SHA256()).hex()
    assert (rec.principal, rec.auth_method, rec.cert_fingerprint) == (f"sha256:{fingerprint}", "mtls", fingerprint)
    # Two such certificates are two principals, never one empty name.
    other, other_key = pki.leaf(x509.Name([]), sans=("spiffe://bank.example/web/a",))
    await _list_models(target, pki.credentials(other, other_key), (("x-request-id", "other-empty"),))
    records, _ = await _records(runtime)
    assert records["other-empty"].principal == "sha256:" + other.fingerprint(hashes.SHA256()).hex()
    assert records["other-empty"].principal != rec.principal


@pytest.mark.parametrize(
    "uri",
    [
        "spiffe://bank.example/audit/../web/a",
        "spiffe://bank.example/audit/./x",
        "spiffe://bank.example/audit/%2e%2e/web",
        "spiffe://bank.example/audit/..%2Fweb",
        "spiffe://bank.example/audit/..",
    ],
)
@ASYNC
async def test_a_san_glob_does_not_match_dot_segments(mtls_server, uri):
    pki, _, target = mtls_server
    cert, key = pki.leaf(_name((NameOID.COMMON_NAME, "svc")), sans=(uri,))
    assert await _audit_query(target, pki.credentials(cert, key)) == grpc.StatusCode.PERMISSION_DENIED
    good, good_key = pki.leaf(_name((NameOID.COMMON_NAME, "svc")), sans=("spiffe://bank.example/audit/ann",))
    assert await _audit_query(target, pki.credentials(good, good_key)) == grpc.StatusCode.OK


@ASYNC
async def test_a_bad_token_beside_a_valid_certificate_records_the_certificate(mtls_server):
    pki, runtime, target = mtls_server
    teller, teller_key = pki.leaf(_name((NameOID.COMMON_NAME, "teller-7"), (NameOID.ORGANIZATION_NAME, "Bank")))
    metadata = (("authorization", "Bearer not-a-token"), ("x-request-id", "bad-token-cert"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _list_models(target, pki.credentials(teller, teller_key), metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    records, _ = await _records(runtime)
    rec = records["bad-token-cert"]
    assert (rec.principal, rec.auth_method, rec.outcome) == (None, "token", "UNAUTHENTICATED")
    assert (rec.cert_subject, rec.cert_fingerprint) == ("O=Bank,CN=teller-7", teller.fingerprint(hashes.SHA256()).hex())
