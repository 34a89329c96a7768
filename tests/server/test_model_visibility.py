"""Which models a caller sees, and who sees the verifier's detail, on both front ends over one
call core (fake engines): a role's ``models`` patterns limit gRPC ``ListModels``/``GetModel``
as they limit ``GET /v1/models``; the detail follows the roles' configured duties, not their
names."""

from __future__ import annotations

import grpc
import httpx
import pytest

from service.access.auth import hash_token
from service.runtime.state import ModelState, Verification
from service.settings.auth import AuthSettings
from service.settings.roles import RoleGrants
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import both_over_fake_engines
from tests.server.stubs import stubs
from xinserve.v1 import model_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")

_TOKEN = "teller-token-0123456789abcdef"
_MODEL_SERVICE = "xinserve.v1.ModelService/*"
_TELLER = {
    "methods": ["openai/*", "xinserve.v1.InferenceService/*", _MODEL_SERVICE],
    "models": ["qwen*"],
}


def _anonymous(role: str, roles: dict) -> dict:
    return {"auth": {"roles": roles, "anonymous_roles": [role], "mtls_default_roles": [role]}}


@ASYNC
async def test_a_role_with_model_patterns_sees_only_those_models_on_grpc_and_http(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"teller-1 {hash_token(_TOKEN)} teller\n")
    tokens.chmod(0o600)
    auth = {"roles": {"teller": _TELLER}, "token_file": str(tokens), "required": True}
    auth |= {"anonymous_roles": [], "mtls_default_roles": []}
    engines = [FakeEngine("qwen-7b"), FakeEngine("smol"), FakeEngine("qwen-1b")]
    async with both_over_fake_engines(tmp_path, engines, {"auth": auth}) as (port, grpc_port, runtime):
        await runtime.mark(runtime.models["qwen-1b"], ModelState.LOADING)
        bearer = (("authorization", f"Bearer {_TOKEN}"),)
        channel = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}"))
        try:
            listed = await channel.models.ListModels(model_pb2.ListModelsRequest(), metadata=bearer)
            assert [m.name for m in listed.models] == ["qwen-7b", "qwen-1b"]
            one = await channel.models.GetModel(model_pb2.GetModelRequest(name="qwen-1b"), metadata=bearer)
            assert one.model.state == model_pb2.MODEL_STATE_LOADING
            for name in ("smol", "no-such-model"):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await channel.models.GetModel(model_pb2.GetModelRequest(name=name), metadata=bearer)
                assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED, name
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await channel.models.GetModel(model_pb2.GetModelRequest(name="qwen-72b"), metadata=bearer)
            assert missing.value.code() is grpc.StatusCode.NOT_FOUND
        finally:
            await channel.close()
        headers = {"authorization": f"Bearer {_TOKEN}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
            reply = await http.get("/v1/models")
            assert reply.status_code == 200
            assert [m["id"] for m in reply.json()["data"]] == ["qwen-7b"]
            assert [(await http.get(f"/v1/models/{n}")).status_code for n in ("qwen-7b", "smol", "qwen-1b")] == [
                200,
                403,
                404,
            ]


def _unsigned(runtime, name: str) -> None:
    entry = runtime.models[name]
    entry.verification = Verification.UNSIGNED_ALLOWED
    entry.verification_reason = "unsigned"
    entry.verification_detail = "unsigned: no model.sig"


async def _detail(grpc_port: int) -> tuple[str, str]:
    """The verification detail of model ``m`` from GetModel and from ListModels."""
    channel = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}"))
    try:
        one = await channel.models.GetModel(model_pb2.GetModelRequest(name="m"))
        listed = await channel.models.ListModels(model_pb2.ListModelsRequest())
    finally:
        await channel.close()
    return one.model.verification_detail, listed.models[0].verification_detail


@ASYNC
@pytest.mark.parametrize(
    "role",
    [
        {"methods": [_MODEL_SERVICE], "duty": "security"},
        {"methods": [_MODEL_SERVICE, "xinserve.v1.AuditService/*"]},
        {"methods": [_MODEL_SERVICE, "xinserve.v1.InferenceService/*"], "act_for_others": True},
    ],
    ids=["names-a-duty", "audit-duty-by-grant", "acts-for-others"],
)
async def test_a_custom_named_administrator_role_sees_the_verifier_detail(tmp_path, role):
    async with both_over_fake_engines(tmp_path, [FakeEngine("m")], _anonymous("custodian", {"custodian": role})) as (
        _,
        grpc_port,
        runtime,
    ):
        _unsigned(runtime, "m")
        assert await _detail(grpc_port) == ("unsigned: no model.sig", "unsigned: no model.sig")


@ASYNC
@pytest.mark.parametrize(
    "role",
    [
        {"methods": [_MODEL_SERVICE]},
        {"methods": [_MODEL_SERVICE, "xinserve.v1.InferenceService/*", "openai/*"]},
    ],
    ids=["server-state-only", "inference"],
)
async def test_a_role_without_a_duty_gets_only_the_safe_sentence_whatever_its_name(tmp_path, role):
    async with both_over_fake_engines(tmp_path, [FakeEngine("m")], _anonymous("admin", {"admin": role})) as (
        _,
        grpc_port,
        runtime,
    ):
        _unsigned(runtime, "m")
        one, listed = await _detail(grpc_port)
    assert one == listed
    assert one.startswith("unsigned: ") and "model.sig" not in one


def test_the_default_administrators_are_the_roles_with_a_duty_label_not_user():
    grants = RoleGrants(AuthSettings())
    assert grants.administrator_roles == {"admin", "security_admin", "auditor"}
    assert not grants.is_administrator(["user", "no-such-role"])
