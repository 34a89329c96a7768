"""The typed record of one call, passed explicitly from the front end through the call core to
the operation and the audit trail.

A front end (gRPC or OpenAI-compatible HTTP) creates it with ``CallCore.begin``; the
operation fills in what it learns (model, token counts, the prompt and output for the audit
digest); the call core turns it into one audit record, one metrics update and one log line.
There is no ambient "current call": code that needs the record receives it as an argument.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    """Who is calling.

    Attributes:
        name: the token's principal for ``token``; for ``mtls`` the client certificate's
            subject in canonical form (``audit.principals.render_name``: RFC 4514, e.g.
            ``CN=teller-7,O=Bank``, characters that hide or reorder text hex-escaped);
            "anonymous" without credentials.
        auth_method: "mtls", "token" or "anonymous": the credential ``name`` comes from.
        roles: role names of the authorization policy (``auth.roles``), e.g. {"user"}.
        cert_fingerprint: SHA-256 hex of the client certificate's DER, whenever the call
            presented one (also with a token).
        cert_subject: the client certificate's canonical subject, whenever the call presented
            one (with a token too, so both identities reach the audit record).
    """

    name: str
    auth_method: str
    roles: frozenset[str] = frozenset({"user"})
    cert_fingerprint: str | None = None
    cert_subject: str | None = None


ANONYMOUS = Principal("anonymous", "anonymous")


@dataclass
class CallRecord:
    """One call as the call core sees it.

    Attributes:
        method: the operation's name: ``/xinserve.v1.<Service>/<Method>`` for gRPC,
            ``openai/<endpoint>`` (e.g. ``openai/chat.completions``) for the HTTP front end.
        peer: the transport's peer address (``ipv4:127.0.0.1:5000``).
        request_id: the call's id (``x-request-id`` or generated); an operation replaces it
            with the request's own ``request_id`` when one is given.
        trace_id: W3C trace id (32 hex digits) of a valid ``traceparent``, else None.
        front_end: ``grpc`` or ``openai``: the metrics label of the transport.
        trace_headers: the W3C trace headers to pass on to the engine (``traceparent``,
            ``tracestate``), re-rendered canonically; empty without a valid context.
    """

    method: str
    peer: str
    request_id: str | None
    trace_id: str | None
    principal: Principal = ANONYMOUS
    started: float = field(default_factory=time.monotonic)
    front_end: str = "grpc"
    trace_headers: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    manifest_digest: str | None = None
    prompt: str | bytes | None = None
    """What was asked, for the audit digest (SM3; never logged)."""
    output_parts: dict[int, list[str]] = field(default_factory=dict)
    """Generated text per completion index, for the audit digest."""
    audit_detail: dict[str, str | int | bool] = field(default_factory=dict)
    audited: bool = True
    """False for a refusal counted in an aggregate instead of its own audit record
    (``service.core.body_reception``): metrics and log line as always, no audit record."""
    completed: bool = False
    """Set once the call's outcome is recorded: a cancellation arriving later adds no second record."""

    def output_text(self) -> str | None:
        """All completions' text, in index order, separated by U+001E (record separator)."""
        if not self.output_parts:
            return None
        return "\x1e".join("".join(self.output_parts[i]) for i in sorted(self.output_parts))


CallInfo = CallRecord
"""Former name of ``CallRecord``, kept for callers that construct one directly."""
