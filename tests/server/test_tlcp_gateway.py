"""End to end through a real TLCP (GB/T 38636) terminator: ``tests/support/tlcp_gateway`` (Go,
``github.com/tjfoc/gmsm/gmtls``, built here) listens with SM2 sign and enc certificates,
requires the client's SM2 certificate and forwards gRPC to the server's trusted-proxy socket
with ``x-forwarded-client-cert``; a TLCP client (the same program) calls through it. The audit
record names the client's SM2 certificate subject and hash, and the gateway beside them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from audit import QueryFilter, decode_record
from tests.server.in_process import started_server

ASYNC = pytest.mark.asyncio(loop_scope="session")
SOURCE = Path(__file__).resolve().parents[1] / "support" / "tlcp_gateway"
GATEWAY_ID = "spiffe://bank.test/gateway/tlcp-1"


@pytest.fixture(scope="session")
def tlcp_tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gateway/client binary, built from its go.mod and go.sum (modules from the Go proxy,
    cached in the Go module cache)."""
    go = shutil.which("go")
    if go is None:
        reason = "go is not installed: this test builds the TLCP gateway from tests/support/tlcp_gateway"
        if os.geteuid() == 0:
            pytest.fail(reason)
        print(reason)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("tlcp") / "tlcp_gateway"
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    built = subprocess.run(
        [go, "build", "-o", str(out), "."], cwd=SOURCE, env=env, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


async def _run(*args: str, timeout: float = 30.0) -> str:
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


@ASYNC
async def test_tlcp_client_through_the_gateway_is_the_audited_principal(tmp_path: Path, tlcp_tool: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    client = json.loads(await _run(str(tlcp_tool), "certs", str(certs)))
    sock = tmp_path / "gateway.sock"
    overrides = {"auth": {"trusted_proxies": [{"name": "tlcp-gateway-1", "listen": f"unix:{sock}"}]}}
    async with started_server(tmp_path, **overrides) as server:
        gateway = await asyncio.create_subprocess_exec(
            str(tlcp_tool),
            "gateway",
            "-certs",
            str(certs),
            "-listen",
            "127.0.0.1:0",
            "-upstream",
            str(sock),
            "-by",
            GATEWAY_ID,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert gateway.stdout is not None
            line = (await asyncio.wait_for(gateway.stdout.readline(), 30)).decode()
            assert line.startswith("LISTENING "), line
            address = line.split()[1]
            call = [str(tlcp_tool), "client", "-certs", str(certs), "-addr", address]
            reply = json.loads(
                await _run(*call, "-method", "/xinserve.v1.ModelService/ListModels", "-request-id", "tlcp-call")
            )
            # A client that forges its own forwarded identity is still itself: the gateway replaces it.
            forged = json.loads(
                await _run(
                    *call,
                    "-method",
                    "/xinserve.v1.ServerService/GetServerInfo",
                    "-request-id",
                    "tlcp-forged",
                    "-forge",
                    "Hash=" + "0" * 64 + ';Subject="CN=admin,O=Bank,C=CN"',
                )
            )
        finally:
            gateway.terminate()
            await gateway.wait()
        rows = await server.runtime.audit.log.query(QueryFilter(event="rpc"))
    records = {r.request_id: r for r in (decode_record(row.body)[2] for row in rows)}
    assert (reply["grpc_status"], reply["http_status"]) == ("0", 200), reply
    assert reply["version"] == "0x0101", reply  # TLCP, GM/T 0024 / GB/T 38636
    assert reply["cipher_suite"] in ("0xe013", "0xe011"), reply  # ECC_SM4_CBC_SM3 / ECDHE_SM4_CBC_SM3
    assert forged["grpc_status"] == "0", forged
    assert client["client_subject"] == "CN=teller-7,O=Bank,C=CN"
    for rid in ("tlcp-call", "tlcp-forged"):
        record = records[rid]
        assert (record.principal, record.auth_method, record.outcome) == (client["client_subject"], "forwarded", "OK")
        assert (record.cert_subject, record.cert_fingerprint) == (client["client_subject"], client["client_sha256"])
        assert record.detail["proxy"] == "tlcp-gateway-1"
        assert record.detail["xfcc_by"] == GATEWAY_ID
        assert record.detail["proxy_listener"] == f"unix:{sock}"
