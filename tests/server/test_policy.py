"""The role policy (auth.roles): methods and models per role, separated administrator
duties refused at start, mTLS roles from certificate rules; and the W3C trace context that
reaches the engine. No engine needed."""

from __future__ import annotations

import datetime
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine_backends.protocol import ModelInfo
from service.access.auth import TokenFileError, hash_token
from service.access.policy import AccessPolicy
from service.core.call_context import CallRecord, Principal
from service.core.status import RpcError
from service.core.tracing import trace_context
from service.lifecycle.reload import authenticator_for
from service.operations.inference import Inference
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import ConfigError, load_settings
from xinserve.v1 import inference_pb2

INFER = "/xinserve.v1.InferenceService/Generate"


def settings(tmp_path: Path, auth: dict | None = None):
    return load_settings(overrides={"data_dir": str(tmp_path), "metrics_listen": None, "auth": auth or {}})


def code(fn, *args) -> grpc.StatusCode | None:
    try:
        fn(*args)
    except RpcError as err:
        return err.code
    return None


def test_default_policy(tmp_path):
    policy = AccessPolicy(settings(tmp_path).auth)
    user = Principal("u", "token", frozenset({"user"}))
    auditor = Principal("a", "token", frozenset({"auditor"}))
    anonymous = Principal("anonymous", "anonymous", frozenset({"user"}))
    assert code(policy.authorize, user, INFER) is None
    assert code(policy.authorize, user, "openai/chat.completions") is None
    assert code(policy.authorize, auditor, INFER) == grpc.StatusCode.PERMISSION_DENIED
    assert code(policy.authorize, auditor, "openai/completions") == grpc.StatusCode.PERMISSION_DENIED
    assert code(policy.authorize, auditor, "/xinserve.v1.AuditService/QueryRecords") is None
    assert code(policy.authorize, user, "/xinserve.v1.AuditService/QueryRecords") == grpc.StatusCode.PERMISSION_DENIED
    assert (
        code(policy.authorize, anonymous, "/xinserve.v1.AuditService/ExportRecords") == grpc.StatusCode.UNAUTHENTICATED
    )
    assert code(policy.authorize, anonymous, "/xinserve.v1.ModelService/ListModels") is None
    assert policy.may_act_for_others(Principal("root", "token", frozenset({"admin"})))
    assert not policy.may_act_for_others(user)


def test_models_per_role(tmp_path):
    auth = {
        "roles": {
            "teller": {"methods": ["xinserve.v1.InferenceService/*", "openai/*"], "models": ["tiny-*"]},
            "auditor": {"methods": ["xinserve.v1.AuditService/*"], "duty": "audit"},
        },
        "anonymous_roles": [],
        "mtls_default_roles": ["teller"],
    }
    policy = AccessPolicy(settings(tmp_path, auth).auth)
    teller = Principal("t", "token", frozenset({"teller"}))
    assert code(policy.authorize_model, teller, INFER, "tiny-llama") is None
    assert code(policy.authorize_model, teller, INFER, "qwen-7b") == grpc.StatusCode.PERMISSION_DENIED
    nobody = Principal("anonymous", "anonymous", frozenset())
    assert code(policy.authorize, nobody, INFER) == grpc.StatusCode.UNAUTHENTICATED


def test_conflicting_duties_are_refused_at_start_unless_allowed(tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"root {hash_token('t-0123456789abcdef')} admin,auditor\n")
    tokens.chmod(0o600)
    with pytest.raises(TokenFileError, match=r"root.*(audit.*system|system.*audit)"):
        authenticator_for(settings(tmp_path, {"token_file": str(tokens)}))
    allowed = settings(tmp_path, {"token_file": str(tokens), "allow_conflicting_roles": True})
    principal = authenticator_for(allowed).authenticate("Bearer t-0123456789abcdef", {})
    assert principal.roles == {"admin", "auditor"}
    # user + one administrator duty is not a conflict.
    tokens.write_text(f"ops {hash_token('t-0123456789abcdef')} user,admin\n")
    authenticator_for(settings(tmp_path, {"token_file": str(tokens)}))
    with pytest.raises(ConfigError, match=r"auth\.mtls_roles\[0\]"):
        settings(tmp_path, {"mtls_roles": [{"subject": ".*", "roles": ["security_admin", "auditor"]}]})
    with pytest.raises(ConfigError, match="unknown role"):
        settings(tmp_path, {"anonymous_roles": ["superuser"]})
    with pytest.raises(ConfigError, match="subject or san"):
        settings(tmp_path, {"mtls_roles": [{"roles": ["user"]}]})


def _cert(cn: str, uri: str | None) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Bank"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if uri:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]), False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def test_mtls_roles_from_subject_and_san_rules(tmp_path):
    auth = {
        "mtls_roles": [
            {"san": "spiffe://bank/audit/*", "roles": ["auditor"]},
            {"subject": "CN=ops-.*,O=Bank", "roles": ["admin"]},
        ],
        "mtls_default_roles": ["user"],
    }
    authn = authenticator_for(settings(tmp_path, auth))

    def roles(cn: str, uri: str | None = None) -> frozenset[str]:
        principal = authn.authenticate(None, {"x509_pem_cert": [_cert(cn, uri)]})
        assert principal.auth_method == "mtls"
        return principal.roles

    assert roles("teller-7") == {"user"}
    assert roles("ops-1") == {"admin"}
    assert roles("teller-7", "spiffe://bank/audit/ann") == {"auditor"}
    assert roles("x-ops-1") == {"user"}  # the subject rule must match the whole subject


def test_trace_context_is_validated_and_passed_to_the_engine(tmp_path):
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = f"00-{tid}-00f067aa0ba902b7-01"
    assert trace_context({"traceparent": parent, "tracestate": "vendor=1"}) == (
        tid,
        {"traceparent": parent, "tracestate": "vendor=1"},
    )
    assert trace_context({"traceparent": f"ff-{tid}-00f067aa0ba902b7-01"}) == (None, {})
    assert trace_context({"traceparent": "junk"}) == (None, {})

    class FakeEngine:
        info = ModelInfo("m", "generate", 64, 100, "float32", "fake", "0", "cpu", 5)

    s = settings(tmp_path)
    runtime = Runtime(s)
    runtime.add_model(ModelEntry("m", "generate", tmp_path, FakeEngine(), state=ModelState.READY))  # type: ignore[arg-type]
    user = Principal("u", "token", frozenset({"user"}))
    record = CallRecord(INFER, "", "rid-1", tid, user, trace_headers={"traceparent": parent})
    _, gen = Inference(runtime, AccessPolicy(s.auth)).prepare(
        inference_pb2.GenerateRequest(model="m", prompt="hi"), record, chat=False, stream=False
    )
    assert gen.trace_headers == {"traceparent": parent}
    assert gen.request_id == "rid-1"


ASSESSOR = {"methods": ["*"]}


def test_duties_are_derived_from_grants_not_labels(tmp_path):
    """A role with no duty label that grants ``*`` holds the system and audit duties: a
    principal with it is refused at start (token file, mTLS rule, mTLS default, anonymous)."""
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"eve {hash_token('t-0123456789abcdef')} everything\n")
    tokens.chmod(0o600)
    roles = {**{k: v.model_dump() for k, v in settings(tmp_path).auth.roles.items()}, "everything": ASSESSOR}
    with pytest.raises(TokenFileError, match=r"eve.*audit, system"):
        authenticator_for(settings(tmp_path, {"token_file": str(tokens), "roles": roles}))
    with pytest.raises(ConfigError, match=r"auth\.anonymous_roles.*audit, system"):
        settings(tmp_path, {"roles": roles, "anonymous_roles": ["everything"]})
    with pytest.raises(ConfigError, match=r"auth\.mtls_default_roles.*audit, system"):
        settings(tmp_path, {"roles": roles, "mtls_default_roles": ["everything"]})
    with pytest.raises(ConfigError, match=r"auth\.mtls_roles\[0\].*audit, system"):
        settings(tmp_path, {"roles": roles, "mtls_roles": [{"san": "spiffe://x/*", "roles": ["everything"]}]})
    allowed = {"token_file": str(tokens), "roles": roles, "allow_conflicting_roles": True}
    assert authenticator_for(settings(tmp_path, allowed)).authenticate("Bearer t-0123456789abcdef", {}).roles == {
        "everything"
    }


@pytest.mark.parametrize(
    ("methods", "duties"),
    [
        (["*"], {"system", "audit"}),
        (["xinserve.v1.*"], {"system", "audit"}),
        (["*/QueryRecords"], {"audit"}),
        (["xinserve.v1.Audit*/*"], {"audit"}),
        (["openai/*"], {"system"}),
        (["openai/chat.*"], {"system"}),
        (["xinserve.v1.InferenceService/Abort"], {"system"}),
        (["openai/models*", "xinserve.v1.ModelService/*", "xinserve.v1.ServerService/*"], set()),
    ],
)
def test_wildcard_grants_hold_the_duties_they_match(tmp_path, methods, duties):
    s = settings(tmp_path, {"roles": {"r": {"methods": methods}}, "anonymous_roles": [], "mtls_default_roles": []})
    assert AccessPolicy(s.auth).duties({"r"}) == duties


def test_user_plus_auditor_is_a_conflict(tmp_path):
    """``user`` runs inference (system duty by grant) and ``auditor`` reads the log."""
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"ann {hash_token('t-0123456789abcdef')} user,auditor\n")
    tokens.chmod(0o600)
    with pytest.raises(TokenFileError, match=r"ann.*audit, system"):
        authenticator_for(settings(tmp_path, {"token_file": str(tokens)}))


def test_a_role_naming_one_duty_may_not_grant_another(tmp_path):
    for duty, methods in [
        ("audit", ["xinserve.v1.AuditService/*", "openai/*"]),
        ("security", ["*"]),
        ("system", ["xinserve.v1.AuditService/GetLatestCheckpoint"]),
    ]:
        auth = {"roles": {"r": {"methods": methods, "duty": duty}}, "anonymous_roles": [], "mtls_default_roles": []}
        with pytest.raises(ConfigError, match=rf"auth\.roles\.r: names duty {duty} but grants"):
            settings(tmp_path, auth)
    auth = {"roles": {"r": {"methods": ["xinserve.v1.ModelService/*"], "duty": "audit", "act_for_others": True}}}
    with pytest.raises(ConfigError, match=r"names duty audit but grants the methods of system"):
        settings(tmp_path, {**auth, "anonymous_roles": [], "mtls_default_roles": []})


def test_default_roles_hold_one_duty_each(tmp_path):
    policy = AccessPolicy(settings(tmp_path).auth)
    assert {r: policy.duties({r}) for r in policy.role_names} == {
        "user": {"system"},
        "admin": {"system"},
        "security_admin": {"security"},
        "auditor": {"audit"},
    }


def test_sighup_reload_refuses_a_token_file_with_conflicting_grants(tmp_path):
    import asyncio

    from service.lifecycle.reload import Reloader

    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"ann {hash_token('t-0123456789abcdef')} user\n")
    tokens.chmod(0o600)
    roles = {**{k: v.model_dump() for k, v in settings(tmp_path).auth.roles.items()}, "everything": ASSESSOR}
    s = settings(tmp_path, {"token_file": str(tokens), "roles": roles})

    class Core:
        authenticator = authenticator_for(s)

    core = Core()
    reloader = Reloader(s, core, None, None, lambda _store: None)  # type: ignore[arg-type]
    tokens.write_text(f"ann {hash_token('t-0123456789abcdef')} everything\n")
    assert asyncio.run(reloader.reload()) is False
    assert core.authenticator.authenticate("Bearer t-0123456789abcdef", {}).roles == {"user"}
