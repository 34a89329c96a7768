"""Fixtures for the client unit tests: a stand-in gRPC server run in this process.

The stand-in implements the generated xinserve.v1 servicer base classes with scripted
behaviour (it is NOT the engine-backed server): it records what it received (requests,
metadata, peer identity) and whether a streaming call was cancelled, and fails on demand
with rich google.rpc status details. It runs on its own event loop in a background thread,
so the blocking client, the asyncio client (on the test loop) and the CLI can all call it.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from xinserve.v1 import (
    common_pb2,
    inference_pb2,
    inference_pb2_grpc,
    model_pb2,
    model_pb2_grpc,
    server_pb2,
    server_pb2_grpc,
)

TINY = "xinserve-tiny-llama"
MINILM = "all-MiniLM-L6-v2"


@dataclass
class Call:
    method: str
    request: Any
    metadata: dict[str, str]
    peer_cn: str | None = None


@dataclass
class State:
    """What the stand-in server saw; reset before every test."""

    calls: list[Call] = field(default_factory=list)
    stream_started: threading.Event = field(default_factory=threading.Event)
    stream_cancelled: threading.Event = field(default_factory=threading.Event)
    unary_cancelled: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)
    running: int = 0
    cancelled_ids: set[str] = field(default_factory=set)

    def mark_cancelled(self, request_id: str) -> None:
        self.cancelled_ids.add(request_id)
        self.stream_cancelled.set()

    def cancelled(self, request_id: str, within: float = 5.0) -> bool:
        """Whether the server saw the call with this request id cancelled (waits up to ``within`` s)."""
        deadline = time.monotonic() + within
        while request_id not in self.cancelled_ids and time.monotonic() < deadline:
            time.sleep(0.005)
        return request_id in self.cancelled_ids

    def last(self, method: str | None = None) -> Call:
        calls = [c for c in self.calls if method is None or c.method == method]
        assert calls, f"the server saw no {method or ''} call"
        return calls[-1]

    def reset(self) -> None:
        self.calls.clear()
        self.cancelled_ids.clear()
        for event in (self.stream_started, self.stream_cancelled, self.unary_cancelled, self.gate):
            event.clear()


def _rich_abort_status(code: int, message: str, *details: Any) -> grpc.Status:
    status = status_pb2.Status(code=code, message=message)
    for detail in details:
        status.details.add().Pack(detail)
    return rpc_status.to_status(status)


async def _fail_on_demand(model: str, context: grpc.aio.ServicerContext, request_id: str) -> None:
    """Models named ``status:<CODE>`` fail with that code; a few carry rich details."""
    if model == "missing":
        await context.abort_with_status(
            _rich_abort_status(
                code_pb2.NOT_FOUND,
                "model 'missing' is not served",
                error_details_pb2.ErrorInfo(
                    reason="MODEL_NOT_FOUND", domain="xinserve.io", metadata={"model": "missing"}
                ),
                error_details_pb2.RequestInfo(request_id=request_id),
            )
        )
    if model == "busy":
        await context.abort_with_status(
            _rich_abort_status(
                code_pb2.RESOURCE_EXHAUSTED,
                "admission queue is full",
                error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2, nanos=500_000_000)),
            )
        )
    if model == "loading":
        await context.abort_with_status(
            _rich_abort_status(
                code_pb2.UNAVAILABLE,
                "model 'loading' is loading",
                error_details_pb2.ErrorInfo(reason="MODEL_LOADING", domain="xinserve.io", metadata={"model": model}),
                error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=5)),
            )
        )
    if model.startswith("status:"):
        code = grpc.StatusCode[model.split(":", 1)[1]]
        await context.abort(code, f"scripted {code.name}")


def _sampling_violations(request: Any) -> list[tuple[str, str]]:
    violations: list[tuple[str, str]] = []
    if not request.model:
        violations.append(("model", "must not be empty"))
    params = request.sampling_params
    if params.HasField("temperature") and not (params.temperature >= 0 and math.isfinite(params.temperature)):
        violations.append(("sampling_params.temperature", "must be a finite number >= 0"))
    if params.HasField("top_p") and not (0 < params.top_p <= 1):
        violations.append(("sampling_params.top_p", "must be in (0, 1]"))
    return violations


async def _validate(request: Any, context: grpc.aio.ServicerContext) -> None:
    violations = _sampling_violations(request)
    if violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in violations
            ]
        )
        await context.abort_with_status(
            _rich_abort_status(code_pb2.INVALID_ARGUMENT, f"{len(violations)} invalid field(s)", bad)
        )


def _peer_cn(context: grpc.aio.ServicerContext) -> str | None:
    names = context.auth_context().get("x509_common_name")
    return names[0].decode() if names else None


class FakeInference(inference_pb2_grpc.InferenceServiceServicer):
    def __init__(self, state: State) -> None:
        self.state = state

    def _record(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> str:
        metadata = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        self.state.calls.append(Call(method, request, metadata, _peer_cn(context)))
        return getattr(request, "request_id", "") or metadata.get("x-request-id", "") or "srv-generated"

    async def Generate(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rid = self._record("Generate", request, context)
        await _fail_on_demand(request.model, context, rid)
        await _validate(request, context)
        if request.prompt == "slow":
            context.add_done_callback(lambda ctx: ctx.cancelled() and self.state.unary_cancelled.set())
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                self.state.unary_cancelled.set()
                raise
        text = request.prompt[::-1] if request.prompt else " ".join(map(str, request.prompt_token_ids))
        n = request.sampling_params.n if request.sampling_params.HasField("n") else 1
        return inference_pb2.GenerateResponse(
            request_id=rid,
            outputs=[
                inference_pb2.CompletionOutput(
                    index=i, text=text, token_ids=[1, 2, 3], finish_reason=common_pb2.FINISH_REASON_LENGTH
                )
                for i in range(n)
            ],
            usage=common_pb2.Usage(prompt_tokens=len(request.prompt), completion_tokens=3 * n),
        )

    async def _stream(self, request: Any, context: grpc.aio.ServicerContext, method: str, prompt: str) -> Any:
        rid = self._record(method, request, context)
        await _fail_on_demand(request.model, context, rid)
        await _validate(request, context)
        # The RPC's own view of cancellation: a cancel can land while the server is writing a
        # message rather than inside this generator, so don't rely on CancelledError alone.
        context.add_done_callback(lambda ctx: ctx.cancelled() and self.state.mark_cancelled(rid))
        self.state.stream_started.set()
        self.state.running += 1
        completed = False
        try:
            if prompt == "forever":
                i = 0
                while True:
                    yield dict(request_id=rid, index=0, text=f"t{i} ", token_ids=[i])
                    i += 1
                    await asyncio.sleep(0.02)
            if prompt == "gated":
                yield dict(request_id=rid, index=0, text="first ", token_ids=[1])
                opened = await asyncio.to_thread(self.state.gate.wait, 5)
                text = "second" if opened else "GATE-TIMEOUT"
                yield dict(
                    request_id=rid, index=0, text=text, token_ids=[2],
                    finish_reason=common_pb2.FINISH_REASON_STOP, usage=common_pb2.Usage(completion_tokens=2),
                )  # fmt: skip
                completed = True
                return
            words = prompt.split() or ["empty"]
            for i, word in enumerate(words):
                last = i == len(words) - 1
                end = {}
                if last:
                    end = dict(
                        finish_reason=common_pb2.FINISH_REASON_LENGTH,
                        usage=common_pb2.Usage(prompt_tokens=len(words), completion_tokens=len(words)),
                    )
                yield dict(request_id=rid, index=0, text=word + ("" if last else " "), token_ids=[i], **end)
            completed = True
        except asyncio.CancelledError:
            self.state.mark_cancelled(rid)
            raise
        finally:
            self.state.running -= 1
            if not completed:  # closed early (GeneratorExit) or cancelled
                self.state.mark_cancelled(rid)

    async def GenerateStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async for fields in self._stream(request, context, "GenerateStream", request.prompt):
            yield inference_pb2.GenerateStreamResponse(**fields)

    async def Chat(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rid = self._record("Chat", request, context)
        await _fail_on_demand(request.model, context, rid)
        await _validate(request, context)
        reply = "you said: " + request.messages[-1].content
        return inference_pb2.ChatResponse(
            request_id=rid,
            outputs=[inference_pb2.CompletionOutput(index=0, text=reply, finish_reason=common_pb2.FINISH_REASON_STOP)],
            usage=common_pb2.Usage(prompt_tokens=len(request.messages), completion_tokens=1),
        )

    async def ChatStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        prompt = request.messages[-1].content if request.messages else ""
        async for fields in self._stream(request, context, "ChatStream", prompt):
            yield inference_pb2.ChatStreamResponse(**fields)

    async def Embed(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rid = self._record("Embed", request, context)
        await _fail_on_demand(request.model, context, rid)
        embeddings = []
        for i, text in enumerate(request.inputs):
            # A letter histogram, L2-normalised: similar texts get similar vectors.
            counts = [float(text.lower().count(chr(ord("a") + k))) for k in range(26)]
            norm = math.sqrt(sum(c * c for c in counts)) or 1.0
            embeddings.append(inference_pb2.Embedding(index=i, values=[c / norm for c in counts]))
        return inference_pb2.EmbedResponse(
            request_id=rid, embeddings=embeddings, usage=common_pb2.Usage(prompt_tokens=len(request.inputs))
        )

    async def Tokenize(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._record("Tokenize", request, context)
        await _fail_on_demand(request.model, context, "")
        return inference_pb2.TokenizeResponse(token_ids=[ord(c) for c in request.text], max_model_len=2048)

    async def Detokenize(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._record("Detokenize", request, context)
        await _fail_on_demand(request.model, context, "")
        return inference_pb2.DetokenizeResponse(text="".join(chr(t) for t in request.token_ids))

    async def Abort(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._record("Abort", request, context)
        return inference_pb2.AbortResponse(aborted=request.request_id == "running-1")


MODELS = [
    model_pb2.Model(
        name=TINY, kind=model_pb2.MODEL_KIND_GENERATE, max_context_length=2048, dtype="float32",
        backend="vllm", device="cpu", state=model_pb2.MODEL_STATE_READY,
        verification_status=model_pb2.VERIFICATION_STATUS_NOT_CHECKED,
    ),
    model_pb2.Model(
        name=MINILM, kind=model_pb2.MODEL_KIND_EMBED, max_context_length=512, dtype="float32",
        backend="vllm", device="cpu", state=model_pb2.MODEL_STATE_READY,
        verification_status=model_pb2.VERIFICATION_STATUS_VERIFIED, manifest_digest="sm3:00ff",
    ),
    model_pb2.Model(
        name="tampered", kind=model_pb2.MODEL_KIND_GENERATE, state=model_pb2.MODEL_STATE_FAILED,
        state_reason="signature does not verify", verification_status=model_pb2.VERIFICATION_STATUS_FAILED,
    ),
]  # fmt: skip


class FakeModels(model_pb2_grpc.ModelServiceServicer):
    def __init__(self, state: State) -> None:
        self.state = state

    async def ListModels(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        md = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        self.state.calls.append(Call("ListModels", request, md, _peer_cn(context)))
        return model_pb2.ListModelsResponse(models=MODELS)

    async def GetModel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        for model in MODELS:
            if model.name == request.name:
                return model_pb2.GetModelResponse(model=model)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.name!r} is not served")


class FakeServer(server_pb2_grpc.ServerServiceServicer):
    def __init__(self, state: State) -> None:
        self.state = state

    async def GetServerInfo(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return server_pb2.GetServerInfoResponse(
            server_version="0.1.0", schema_revision=1, min_client_revision=1, backend="fake"
        )

    async def GetLoad(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return server_pb2.GetLoadResponse(running=self.state.running)


class StandIn:
    """A grpc.aio stand-in server on 127.0.0.1, on its own loop in a daemon thread."""

    def __init__(self, credentials: grpc.ServerCredentials | None = None) -> None:
        self.state = State()
        self._credentials = credentials
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._run, name="stand-in-grpc", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("stand-in server did not start")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        server = grpc.aio.server()
        inference_pb2_grpc.add_InferenceServiceServicer_to_server(FakeInference(self.state), server)
        model_pb2_grpc.add_ModelServiceServicer_to_server(FakeModels(self.state), server)
        server_pb2_grpc.add_ServerServiceServicer_to_server(FakeServer(self.state), server)
        health_servicer = health.aio.HealthServicer()
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set("xinserve.v1.InferenceService", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        if self._credentials is None:
            self.port = server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = server.add_secure_port("127.0.0.1:0", self._credentials)
        await server.start()
        self._server = server

    def stop(self) -> None:
        async def _stop() -> None:
            assert self._server is not None
            await self._server.stop(0)

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="session")
def _plain_server() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.stop()


@pytest.fixture
def stand_in(_plain_server: StandIn) -> StandIn:
    """The plaintext stand-in server, its recorded state reset for this test."""
    _plain_server.state.reset()
    return _plain_server


# -- certificates -------------------------------------------------------------------------


@dataclass
class Pki:
    ca_pem: bytes
    server_cert_pem: bytes
    server_key_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    other_ca_pem: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject_cn: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    san_ip: bool = False,
    client: bool = False,
) -> x509.Certificate:
    import ipaddress

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    issuer_name, issuer_key = issuer if issuer is not None else (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
    if san_ip:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
    if client or san_ip:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="session")
def pki() -> Pki:
    """A throwaway CA, a server certificate for 127.0.0.1, a client certificate, and a
    second unrelated CA."""
    ca_key = _key()
    ca = _cert("xinserve test CA", ca_key, None, ca=True)
    server_key = _key()
    server = _cert("xinserve test server", server_key, (ca.subject, ca_key), san_ip=True)
    client_key = _key()
    client = _cert("svc-payments", client_key, (ca.subject, ca_key), client=True)
    other_key = _key()
    other = _cert("some other CA", other_key, None, ca=True)
    pem = serialization.Encoding.PEM
    return Pki(
        ca_pem=ca.public_bytes(pem),
        server_cert_pem=server.public_bytes(pem),
        server_key_pem=_pem_key(server_key),
        client_cert_pem=client.public_bytes(pem),
        client_key_pem=_pem_key(client_key),
        other_ca_pem=other.public_bytes(pem),
    )


@pytest.fixture(scope="session")
def _tls_server(pki: Pki) -> Iterator[StandIn]:
    server = StandIn(grpc.ssl_server_credentials([(pki.server_key_pem, pki.server_cert_pem)]))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _mtls_server(pki: Pki) -> Iterator[StandIn]:
    server = StandIn(
        grpc.ssl_server_credentials(
            [(pki.server_key_pem, pki.server_cert_pem)],
            root_certificates=pki.ca_pem,
            require_client_auth=True,
        )
    )
    yield server
    server.stop()


@pytest.fixture
def tls_server(_tls_server: StandIn) -> StandIn:
    _tls_server.state.reset()
    return _tls_server


@pytest.fixture
def mtls_server(_mtls_server: StandIn) -> StandIn:
    _mtls_server.state.reset()
    return _mtls_server


@pytest.fixture(scope="session")
def closed_port_target() -> str:
    """A loopback address nothing listens on."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"
