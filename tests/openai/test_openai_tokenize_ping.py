"""vLLM's /tokenize, /detokenize and /ping beside the OpenAI API, and the model object's
created and max_model_len, through the call core (policy, admission, audit). Fake engines."""

from __future__ import annotations

import httpx
import pytest

from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_tokenize_detokenize_and_ping(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, runtime):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            reply = await http.post("/tokenize", json={"model": "m", "prompt": "abc"}, headers={"x-request-id": "tk-1"})
            assert reply.status_code == 200
            assert reply.json() == {"count": 3, "max_model_len": 256, "tokens": [1, 1, 1], "token_strs": None}
            [record] = await rpc_records(runtime, "tk-1")
            assert (record.method, record.outcome, record.model) == ("openai/tokenize", "OK", "m")

            reply = await http.post("/detokenize", json={"model": "m", "tokens": [5, 6]})
            assert (reply.status_code, reply.json()) == (200, {"prompt": "xx"})

            refused = await http.post("/tokenize", json={"model": "m", "prompt": "a", "return_token_strs": True})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "return_token_strs"
            wrong = await http.post("/detokenize", json={"model": "m", "tokens": ["a"]})
            assert wrong.status_code == 400 and "tokens[0]" in wrong.json()["error"]["param"]
            for huge in (10**12, 2**70, -(2**31) - 1):
                outside = await http.post("/detokenize", json={"model": "m", "tokens": [1, huge]})
                assert outside.status_code == 400 and outside.json()["error"]["param"] == "tokens[1]"
            unknown = await http.post("/tokenize", json={"model": "nope", "prompt": "a"})
            assert unknown.status_code == 404

            for method in ("GET", "POST"):
                assert (await http.request(method, "/ping")).status_code == 200


async def test_model_objects_carry_created_and_max_model_len(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, runtime):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            [listed] = (await http.get("/v1/models")).json()["data"]
            single = (await http.get("/v1/models/m")).json()
        assert listed == single
        assert listed["max_model_len"] == 256
        assert listed["created"] == runtime.models["m"].ready_since > 1_700_000_000
