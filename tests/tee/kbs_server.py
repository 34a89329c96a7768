"""A loopback Key Broker Service that follows Trustee ``kbs/docs/kbs_attestation_protocol.md``.

Started by the tests (FastAPI app under uvicorn on 127.0.0.1, port 0). It keeps sessions by the
``kbs-session-id`` cookie, issues a fresh nonce per session, accepts one attestation per session
whose runtime-data nonce is the session's and whose evidence's report data is the SHA-384 of the
runtime data (parsed with ``trust.tee.parsers``), checks an attestation policy and a resource
policy, and answers resources as a flattened JWE (ECDH-ES+A256KW / A256GCM, joserfc) to the TEE
key. Errors are RFC 7807 problems with Trustee's type names (``AttestationError``, ``PolicyDeny``,
``TokenNotFound``...). It is the protocol's peer, not a verifier: it trusts the parsed report data
without checking hardware signatures (the ``sample`` TEE of Trustee does the same).
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from joserfc import jwe, jwt
from joserfc.jwk import ECKey, OctKey

from trust.tee.binding import kbs_report_data
from trust.tee.errors import EvidenceParseError
from trust.tee.parsers import ParsedEvidence, parse_evidence

COOKIE = "kbs-session-id"


def _problem(status: int, kind: str, detail: str) -> JSONResponse:
    return JSONResponse(
        {"type": f"https://github.com/confidential-containers/kbs/errors/{kind}", "detail": detail}, status_code=status
    )


@dataclass
class Session:
    nonce: str
    tee: str
    created: float
    attested: bool = False
    claims: ParsedEvidence | None = None
    tee_pubkey: dict[str, Any] | None = None


@dataclass
class KbsState:
    """What the test controls: resources, policies, faults; what it can inspect: sessions, log."""

    resources: dict[str, bytes] = field(default_factory=dict)
    attestation_policy: Callable[[ParsedEvidence], bool] = lambda claims: True
    resource_policy: Callable[[ParsedEvidence, str], bool] = lambda claims, resource: True
    session_ttl_s: float = 300.0
    malformed_jwe: bool = False
    sessions: dict[str, Session] = field(default_factory=dict)
    log: list[tuple[str, int, str]] = field(default_factory=list)
    token_key: OctKey = field(default_factory=lambda: OctKey.generate_key(256))


def _evidence_bytes(tee: str, primary: Any) -> bytes:
    if tee in ("sample", "csv"):
        return json.dumps(primary).encode()
    if tee == "tdx" and isinstance(primary, dict) and isinstance(primary.get("quote"), str):
        return base64.b64decode(primary["quote"])
    if tee == "snp" and isinstance(primary, dict) and isinstance(primary.get("report"), str):
        return base64.b64decode(primary["report"])
    raise EvidenceParseError(f"no evidence of TEE {tee!r} in the request")


def build_app(state: KbsState) -> FastAPI:
    app = FastAPI()

    def done(path: str, response: Response, why: str = "") -> Response:
        state.log.append((path, response.status_code, why))
        return response

    def session_of(request: Request) -> tuple[str, Session | None]:
        sid = request.cookies.get(COOKIE, "")
        s = state.sessions.get(sid)
        if s is not None and time.monotonic() - s.created > state.session_ttl_s:
            del state.sessions[sid]
            s = None
        return sid, s

    @app.post("/kbs/v0/auth")
    async def auth(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return done("auth", _problem(401, "SerdeError", "request is not JSON"))
        if not isinstance(body, dict) or body.get("version") != "0.4.0" or not isinstance(body.get("tee"), str):
            return done("auth", _problem(401, "AttestationError", "unsupported protocol version or tee"))
        sid = secrets.token_urlsafe(24)
        state.sessions[sid] = Session(secrets.token_urlsafe(32), body["tee"], time.monotonic())
        response = JSONResponse({"nonce": state.sessions[sid].nonce, "extra-params": ""})
        response.set_cookie(COOKIE, sid, httponly=True)
        return done("auth", response)

    @app.post("/kbs/v0/attest")
    async def attest(request: Request) -> Response:
        _sid, s = session_of(request)
        if s is None:
            return done("attest", _problem(401, "AttestationError", "no such session"), "unknown_session")
        if s.attested:
            return done("attest", _problem(401, "AttestationError", "session already attested"), "replayed_session")
        try:
            body = await request.json()
            rd = body["runtime-data"]
            nonce, pubkey = rd["nonce"], rd["tee-pubkey"]
            primary = body["tee-evidence"]["primary_evidence"]
        except (ValueError, KeyError, TypeError):
            return done("attest", _problem(401, "SerdeError", "malformed attestation"), "malformed")
        if nonce != s.nonce:
            s.attested = True  # a session's challenge is answered once, right or wrong
            return done("attest", _problem(401, "AttestationError", "nonce mismatch"), "wrong_nonce")
        try:
            claims = parse_evidence(s.tee, _evidence_bytes(s.tee, primary))
        except (EvidenceParseError, ValueError):
            return done("attest", _problem(401, "AttestationError", "evidence does not parse"), "bad_evidence")
        if claims.report_data != kbs_report_data(nonce, pubkey):
            s.attested = True
            return done("attest", _problem(401, "AttestationError", "report data does not bind"), "unbound_key")
        if not state.attestation_policy(claims):
            s.attested = True
            return done("attest", _problem(401, "PolicyDeny", "attestation policy denies"), "attestation_policy")
        s.attested, s.claims, s.tee_pubkey = True, claims, pubkey
        token = jwt.encode({"alg": "HS256"}, {"tee-pubkey": pubkey, "exp": int(time.time()) + 300}, state.token_key)
        return done("attest", JSONResponse({"token": token}))

    @app.get("/kbs/v0/resource/{repo}/{kind}/{tag}")
    async def resource(repo: str, kind: str, tag: str, request: Request) -> Response:
        path = f"{repo}/{kind}/{tag}"
        _sid, s = session_of(request)
        if s is None or s.claims is None or s.tee_pubkey is None:
            return done("resource", _problem(401, "TokenNotFound", "not attested"), "not_attested")
        if not state.resource_policy(s.claims, path):
            return done("resource", _problem(403, "PolicyDeny", "resource policy denies"), "resource_policy")
        if path not in state.resources:
            return done("resource", _problem(404, "InvalidRequestPath", "no such resource"), "not_found")
        if state.malformed_jwe:
            return done("resource", JSONResponse({"protected": "e30", "iv": "AA", "ciphertext": "!!", "tag": "x"}))
        key = ECKey.import_key(s.tee_pubkey)
        obj = jwe.FlattenedJSONEncryption({"alg": "ECDH-ES+A256KW", "enc": "A256GCM"}, state.resources[path])
        obj.add_recipient(None, key)
        body = jwe.encrypt_json(obj, None, algorithms=["ECDH-ES+A256KW", "A256GCM"])
        return done("resource", JSONResponse(body))

    return app


class KbsServer:
    """Runs :func:`build_app` on 127.0.0.1 in a daemon thread; ``url`` once started."""

    def __init__(self, state: KbsState | None = None) -> None:
        self.state = state or KbsState()
        config = uvicorn.Config(build_app(self.state), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="test-kbs")
        self.url = ""

    def start(self) -> KbsServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test KBS did not start")
            time.sleep(0.02)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
