"""HTTPS, mTLS and bearer tokens on the OpenAI front end: the same files and the same
principals as gRPC; refused credentials get 401/403 in OpenAI's error shape."""

from __future__ import annotations

import ssl

import httpx
import openai
import pytest

from service.access.auth import hash_token
from tests.conftest import TINY
from tests.openai.conftest import extra_http
from tests.support.pki import make_pki

pytestmark = pytest.mark.asyncio(loop_scope="session")

GOOD = "http-good-token-0123456789"
AUDITOR = "http-auditor-token-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokens") / "tokens.txt"
    path.write_text(f"svc-http {hash_token(GOOD)} user\nauditor-http {hash_token(AUDITOR)} auditor\n")
    path.chmod(0o600)
    return path


def _port(frontend) -> int:
    # Clients dial 127.0.0.1 (the listener's address, an IP SAN of the test certificate), never
    # "localhost": that may resolve to ::1 first, where another process can hold the same port.
    return next(iter(frontend.ports.values()))


async def test_https_with_tokens(live_server, pki, token_file):
    overrides = {
        "listen": {"https": ["127.0.0.1:0"]},
        "tls": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
        "auth": {"token_file": str(token_file), "required": True},
    }
    async with extra_http(live_server, overrides) as (frontend, _):
        base = f"https://127.0.0.1:{_port(frontend)}/v1"
        trust = ssl.create_default_context(cafile=str(pki.ca_cert))

        def sdk(key: str) -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(
                base_url=base, api_key=key, max_retries=0, http_client=httpx.AsyncClient(verify=trust, timeout=60)
            )

        reply = await sdk(GOOD).completions.create(model=TINY, prompt="tls", max_tokens=2, temperature=0)
        assert reply.usage.completion_tokens >= 1
        with pytest.raises(openai.AuthenticationError) as wrong:
            await sdk("wrong").completions.create(model=TINY, prompt="tls", max_tokens=2)
        assert wrong.value.status_code == 401 and wrong.value.body["type"] == "authentication_error"
        # The auditor role reads server state but may not run inference (default policy).
        with pytest.raises(openai.PermissionDeniedError) as denied:
            await sdk(AUDITOR).completions.create(model=TINY, prompt="tls", max_tokens=2)
        assert denied.value.status_code == 403
        async with httpx.AsyncClient(verify=trust, timeout=60) as http:
            anonymous = await http.get(f"{base}/models")
            assert anonymous.status_code == 401
            basic = await http.get(f"{base}/models", headers={"authorization": "Basic abc"})
            assert basic.status_code == 401
        # A client that does not trust the server's CA does not get through the handshake.
        with pytest.raises(openai.APIConnectionError):
            await openai.AsyncOpenAI(base_url=base, api_key=GOOD, max_retries=0).models.list()


async def test_mtls_principal_and_roles_from_the_certificate(live_server, pki):
    overrides = {
        "listen": {"https": ["127.0.0.1:0"]},
        "tls": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca_cert),
        },
        "auth": {"required": True, "mtls_roles": [{"subject": "(.+,)?CN=alice(,.+)?", "roles": ["auditor"]}]},
    }
    async with extra_http(live_server, overrides) as (frontend, runtime):
        base = f"https://127.0.0.1:{_port(frontend)}/v1"

        def context(cert=None, key=None) -> ssl.SSLContext:
            ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
            if cert is not None:
                ctx.load_cert_chain(str(cert), str(key))
            return ctx

        alice = context(pki.client_cert, pki.client_key)
        async with httpx.AsyncClient(verify=alice, timeout=60) as http:
            # The subject maps to the auditor role (the default would be user), which the default
            # policy does not grant the OpenAI API (inference).
            models = await http.get(f"{base}/models")
            assert models.status_code == 403
            refused = await http.post(f"{base}/completions", json={"model": TINY, "prompt": "x", "max_tokens": 1})
            assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
        for ctx in (context(), context(pki.stranger_cert, pki.stranger_key)):
            async with httpx.AsyncClient(verify=ctx, timeout=60) as http:
                with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                    await http.get(f"{base}/models")
        assert runtime.admission.in_flight == 0


async def test_mtls_user_runs_inference(live_server, pki):
    overrides = {
        "listen": {"https": ["127.0.0.1:0"]},
        "tls": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca_cert),
        },
        "auth": {"required": True},
    }
    async with extra_http(live_server, overrides) as (frontend, _):
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        sdk = openai.AsyncOpenAI(
            base_url=f"https://127.0.0.1:{_port(frontend)}/v1",
            api_key="not-a-token",
            max_retries=0,
            http_client=httpx.AsyncClient(verify=ctx, timeout=60),
        )
        # The SDK always sends "Authorization: Bearer <api_key>"; without a token file it is
        # ignored and the certificate's subject is the principal.
        reply = await sdk.completions.create(model=TINY, prompt="x", max_tokens=1)
        assert reply.usage.completion_tokens == 1
