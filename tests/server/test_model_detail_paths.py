"""``GetModel`` never shows a server path, not even to an auditor: an ``unsigned`` model's
verifier detail names the missing file, not the directory it was looked for in."""

from __future__ import annotations

import grpc
import pytest
from cryptography.x509.oid import NameOID

from service.runtime.state import Verification
from tests.server.test_principal_identities import AUDITOR_TOKEN, _name, mtls_server  # noqa: F401
from xinserve.v1 import model_pb2, model_pb2_grpc

ASYNC = pytest.mark.asyncio(loop_scope="session")


@ASYNC
async def test_an_auditor_sees_no_server_path_for_an_unsigned_model(mtls_server):  # noqa: F811
    pki, runtime, target = mtls_server
    entry = runtime.models["m"]
    entry.verification = Verification.UNSIGNED_ALLOWED
    entry.verification_reason = "unsigned"
    entry.verification_detail = f"unsigned: no model.sig in {entry.path}"
    entry.load_path = entry.path
    cert, key = pki.leaf(_name((NameOID.COMMON_NAME, "ann")))
    async with grpc.aio.secure_channel(target, pki.credentials(cert, key)) as channel:
        reply = await model_pb2_grpc.ModelServiceStub(channel).GetModel(
            model_pb2.GetModelRequest(name="m"), metadata=(("authorization", f"Bearer {AUDITOR_TOKEN}"),)
        )
    assert reply.model.verification_detail == "unsigned: no model.sig in <model directory>"
    assert str(entry.path) not in str(reply)
