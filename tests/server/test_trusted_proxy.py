"""The trusted-proxy identity path: ``x-forwarded-client-cert`` (XFCC) read strictly, accepted
only on a gateway's unix-socket listener (the forwarded subject becomes the principal, mapped
through ``auth.mtls_roles``; the gateway is recorded beside it) and refused, audited, on every
other listener. The header examples are Envoy's."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import grpc
import httpx
import pytest

from audit import QueryFilter, decode_record
from service.access.auth import Authenticator, ForwardedClient, hash_token, load_token_file
from service.access.xfcc import XfccError, nearest_client, parse_xfcc
from service.core.listen_probe import ListenError
from service.settings.config import ConfigError, load_settings
from tests.server.in_process import started_server
from xinserve.v1 import audit_pb2, audit_pb2_grpc, model_pb2, model_pb2_grpc

ASYNC = pytest.mark.asyncio(loop_scope="session")

# Envoy, docs/root/configuration/http/http_conn_man/headers.rst, examples 1-3.
ENVOY_ONE = (
    "By=http://frontend.lyft.com;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;"
    'Subject="/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client";URI=http://testclient.lyft.com'
)
ENVOY_TWO = (
    "By=http://frontend.lyft.com;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;"
    "URI=http://testclient.lyft.com,By=http://backend.lyft.com;"
    "Hash=9ba61d6425303443c0748a02dd8de688468ed33be74eee6556d90c0149c1309e;URI=http://frontend.lyft.com"
)
ENVOY_DNS = ENVOY_ONE + ";DNS=lyft.com;DNS=www.lyft.com"
# Envoy's current rendering (X509_NAME_print_ex with XN_FLAG_RFC2253): a quoted subject with commas.
ENVOY_RFC2253 = (
    "Hash=a2b1c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90;"
    'Subject="emailAddress=admin@demoexample.gluu.org,CN=admin,O=Gluu Federation,L=Austin,ST=TX,C=US";URI='
)

TELLER = "CN=teller-7,O=Bank,C=CN"
TELLER_HASH = hashlib.sha256(b"teller-7 certificate").hexdigest()


def test_envoy_examples_parse() -> None:
    (one,) = parse_xfcc(ENVOY_ONE)
    assert one.by == "http://frontend.lyft.com"
    assert one.hash == "468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688"
    assert one.subject == "/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client"
    assert one.uris == ("http://testclient.lyft.com",)
    first, second = parse_xfcc(ENVOY_TWO)
    assert (first.by, first.uris) == ("http://frontend.lyft.com", ("http://testclient.lyft.com",))
    assert (second.by, second.uris) == ("http://backend.lyft.com", ("http://frontend.lyft.com",))
    (dns,) = parse_xfcc(ENVOY_DNS)
    assert dns.dns == ("lyft.com", "www.lyft.com")
    (rfc,) = parse_xfcc(ENVOY_RFC2253)
    assert rfc.subject == "emailAddress=admin@demoexample.gluu.org,CN=admin,O=Gluu Federation,L=Austin,ST=TX,C=US"
    assert rfc.uris == ()


def test_the_nearest_proxys_client_is_the_last_element() -> None:
    client, element = nearest_client([ENVOY_TWO])
    assert client.fingerprint == "9ba61d6425303443c0748a02dd8de688468ed33be74eee6556d90c0149c1309e"
    assert element.by == "http://backend.lyft.com"
    assert client.subject == ""
    assert client.sans == ("http://frontend.lyft.com",)


def test_subjects_in_either_layout_read_to_one_canonical_name() -> None:
    slash, _ = nearest_client([ENVOY_ONE])
    rfc2253, _ = nearest_client(
        [
            ENVOY_ONE.replace(
                "/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client",
                "CN=Test Client,OU=Lyft,L=San Francisco,ST=CA,C=US",
            )
        ]
    )
    assert slash.subject == rfc2253.subject == "CN=Test Client,OU=Lyft,L=San Francisco,ST=CA,C=US"
    comma, _ = nearest_client([f'Hash={TELLER_HASH};Subject="CN=teller-7,O=Bank\\, Ltd,C=CN"'])
    assert comma.subject == "CN=teller-7,O=Bank\\, Ltd,C=CN"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (f"Hash={TELLER_HASH};Colour=blue", "unknown key"),
        (f"Hash={TELLER_HASH};hash={TELLER_HASH}", "given twice"),
        (f"Hash={TELLER_HASH};Subject=CN=a", "double-quoted"),
        (f'Hash={TELLER_HASH};Subject="CN=a', "not closed"),
        (f'Hash={TELLER_HASH};Subject="CN=a"x', "after the quoted value"),
        ("Hash=abc", "64 hex digits"),
        (f"Hash={TELLER_HASH};;URI=x", "Key=value"),
        (f"Hash={TELLER_HASH},", "Key=value"),
        (f"Hash={TELLER_HASH};URI=a\nb", "control character"),
    ],
)
def test_malformed_headers_are_refused_naming_the_key(value: str, says: str) -> None:
    with pytest.raises(XfccError, match=says):
        parse_xfcc(value)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ([], "required"),
        ([ENVOY_ONE, ENVOY_ONE], "once"),
        (['By=spiffe://gw;Subject="CN=a"'], "Hash is required"),
        ([f'Hash={TELLER_HASH};Subject="not a name"'], "not a distinguished name"),
    ],
)
def test_nearest_client_needs_one_header_with_a_hash(values: list[str], says: str) -> None:
    with pytest.raises(XfccError, match=says):
        nearest_client(values)


def test_trusted_proxy_settings_are_checked() -> None:
    for bad in ({"name": "gw", "listen": "127.0.0.1:5000"}, {"name": "", "listen": "unix:/run/x.sock"}):
        with pytest.raises(ConfigError, match=r"trusted_proxies\.0"):
            load_settings(overrides={"auth": {"trusted_proxies": [bad]}})


def _xfcc(subject: str, digest: str) -> str:
    return f'By=spiffe://bank.test/gateway/tlcp;Hash={digest};Subject="{subject}";URI=spiffe://bank.test/teller/7'


async def _records(server) -> dict:
    rows = [
        row
        for event in ("rpc", "auditor_query")
        for row in await server.runtime.audit.log.query(QueryFilter(event=event))
    ]
    return {r.request_id: r for r in (decode_record(row.body)[2] for row in rows)}


@ASYNC
async def test_forwarded_identity_on_the_gateway_socket_only(tmp_path: Path) -> None:
    sock = tmp_path / "gateway.sock"
    overrides = {
        "auth": {
            "trusted_proxies": [{"name": "tlcp-gateway-1", "listen": f"unix:{sock}"}],
            "mtls_roles": [{"subject": "CN=teller-7,O=Bank,C=CN", "roles": ["auditor"]}],
        }
    }
    async with started_server(tmp_path, **overrides) as server:
        assert sock.is_socket() and (sock.stat().st_mode & 0o777) == 0o660
        port = next(iter(server.frontend.ports.values()))
        async with (
            grpc.aio.insecure_channel(f"unix:{sock}") as gw,
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as tcp,
        ):
            models = model_pb2_grpc.ModelServiceStub(gw)
            audit = audit_pb2_grpc.AuditServiceStub(gw)
            header = ("x-forwarded-client-cert", _xfcc("/C=CN/O=Bank/CN=teller-7", TELLER_HASH))
            await models.ListModels(model_pb2.ListModelsRequest(), metadata=[header, ("x-request-id", "via-gateway")])
            # The forwarded subject maps through auth.mtls_roles: teller-7 is an auditor here...
            await audit.GetLatestCheckpoint(
                audit_pb2.GetLatestCheckpointRequest(), metadata=[header, ("x-request-id", "auditor-via-gateway")]
            )
            # ...and another forwarded subject gets the default roles, which grant no audit reads.
            other = ("x-forwarded-client-cert", _xfcc("CN=teller-8,O=Bank,C=CN", "ab" * 32))
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await audit.GetLatestCheckpoint(
                    audit_pb2.GetLatestCheckpointRequest(), metadata=[other, ("x-request-id", "user-via-gateway")]
                )
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await models.ListModels(model_pb2.ListModelsRequest(), metadata=[("x-request-id", "gateway-no-xfcc")])
            assert missing.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "x-forwarded-client-cert" in (missing.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as forged:
                await model_pb2_grpc.ModelServiceStub(tcp).ListModels(
                    model_pb2.ListModelsRequest(), metadata=[header, ("x-request-id", "forged-on-tcp")]
                )
            assert forged.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "trusted-proxy listener" in (forged.value.details() or "")
        records = await _records(server)
    via = records["via-gateway"]
    assert (via.principal, via.auth_method, via.outcome) == (TELLER, "forwarded", "OK")
    assert (via.cert_subject, via.cert_fingerprint) == (TELLER, TELLER_HASH)
    assert via.detail["proxy"] == "tlcp-gateway-1"
    assert via.detail["proxy_listener"] == f"unix:{sock}"
    assert via.detail["xfcc_by"] == "spiffe://bank.test/gateway/tlcp"
    assert records["auditor-via-gateway"].outcome == "OK"
    assert (records["user-via-gateway"].principal, records["user-via-gateway"].outcome) == (
        "CN=teller-8,O=Bank,C=CN",
        "PERMISSION_DENIED",
    )
    no_xfcc = records["gateway-no-xfcc"]
    assert (no_xfcc.outcome, no_xfcc.detail["proxy"], no_xfcc.detail["xfcc_refused"]) == (
        "UNAUTHENTICATED",
        "tlcp-gateway-1",
        True,
    )
    forged_record = records["forged-on-tcp"]
    assert (forged_record.outcome, forged_record.auth_method) == ("UNAUTHENTICATED", "anonymous")
    assert forged_record.detail["xfcc_refused"] is True and "proxy" not in forged_record.detail


@ASYNC
async def test_a_stale_socket_is_replaced_and_another_file_refused(tmp_path: Path) -> None:
    sock = tmp_path / "gw.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))
    stale.close()
    overrides = {"auth": {"trusted_proxies": [{"name": "gw", "listen": f"unix:{sock}"}]}}
    async with started_server(tmp_path, **overrides):
        assert sock.is_socket()
    plain = tmp_path / "plain"
    plain.write_text("not a socket")
    overrides = {"auth": {"trusted_proxies": [{"name": "gw", "listen": f"unix:{plain}"}]}}
    (tmp_path / "second").mkdir()
    with pytest.raises(ListenError, match="not a socket"):
        async with started_server(tmp_path / "second", **overrides):
            pass
    assert plain.read_text() == "not a socket"


@ASYNC
async def test_the_openai_front_end_refuses_the_header_with_401(tmp_path: Path) -> None:
    async with started_server(tmp_path, listen={"plaintext": ["127.0.0.1:0"], "http": ["127.0.0.1:0"]}) as server:
        assert server.http is not None
        port = next(iter(server.http.ports.values()))
        header = {"x-forwarded-client-cert": _xfcc(TELLER, TELLER_HASH), "x-request-id": "forged-on-http"}
        async with httpx.AsyncClient() as client:
            reply = await client.get(f"http://127.0.0.1:{port}/v1/models", headers=header)
            plain = await client.get(f"http://127.0.0.1:{port}/v1/models", headers={"x-request-id": "plain-http"})
        records = await _records(server)
    assert reply.status_code == 401
    assert "trusted-proxy listener" in reply.json()["error"]["message"]
    assert plain.status_code == 200
    forged = records["forged-on-http"]
    assert (forged.outcome, forged.detail["xfcc_refused"]) == ("UNAUTHENTICATED", True)
    assert records["plain-http"].outcome == "OK"


def test_a_token_through_the_gateway_keeps_the_forwarded_certificate(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"svc-teller {hash_token('gateway-token-0123456789')} user\n")
    auth = Authenticator(load_token_file(token_file), required=True)
    forwarded = ForwardedClient(TELLER_HASH, TELLER)
    principal = auth.authenticate("Bearer gateway-token-0123456789", {}, forwarded)
    assert (principal.name, principal.auth_method) == ("svc-teller", "token")
    assert (principal.cert_subject, principal.cert_fingerprint) == (TELLER, TELLER_HASH)
    alone = auth.authenticate(None, {}, forwarded)
    assert (alone.name, alone.auth_method, alone.roles) == (TELLER, "forwarded", frozenset({"user"}))
