"""Every 401 of the OpenAI front end challenges with ``WWW-Authenticate: Bearer`` (RFC 9110
section 11.6.1), with ``error="invalid_token"`` only when a presented token was refused
(RFC 6750 section 3.1)."""

from __future__ import annotations

import httpx

from service.access.auth import hash_token
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines

GOOD = "sk-www-authenticate-good"


async def test_every_401_carries_a_bearer_challenge(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"svc {hash_token(GOOD)} user\n")
    tokens.chmod(0o600)
    overrides = {"auth": {"token_file": str(tokens), "required": True}}
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], overrides) as (port, _):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            anonymous = await http.get("/v1/models")
            wrong = await http.get("/v1/models", headers={"authorization": "Bearer sk-wrong"})
            completion = await http.post(
                "/v1/completions",
                json={"model": "m", "prompt": "x", "max_tokens": 1},
                headers={"authorization": "Bearer sk-wrong"},
            )
            good = await http.get("/v1/models", headers={"authorization": f"Bearer {GOOD}"})
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="xinserve"'
    for reply in (wrong, completion):
        assert reply.status_code == 401
        assert reply.headers["www-authenticate"] == 'Bearer realm="xinserve", error="invalid_token"'
        assert reply.json()["error"]["type"] == "authentication_error"
    assert good.status_code == 200
    assert "www-authenticate" not in good.headers
