"""Per-call information shared by the interceptor, the servicers and (later) the audit log."""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    """Who is calling.

    Attributes:
        name: mTLS certificate subject (RFC 4514) or the token's principal, or "anonymous".
        auth_method: "mtls", "token" or "anonymous".
        roles: e.g. {"user"}, {"admin"}, {"auditor"}.
        cert_fingerprint: SHA-256 hex of the client certificate's DER, for mTLS.
    """

    name: str
    auth_method: str
    roles: frozenset[str] = frozenset({"user"})
    cert_fingerprint: str | None = None


ANONYMOUS = Principal("anonymous", "anonymous")


@dataclass
class CallInfo:
    """One RPC as the pipeline sees it. ``request_id`` is replaced by the servicer's resolved id."""

    method: str
    peer: str
    request_id: str | None
    trace_id: str | None
    principal: Principal = ANONYMOUS
    started: float = field(default_factory=time.monotonic)
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    manifest_digest: str | None = None
    prompt: str | bytes | None = None
    """What was asked, for the audit digest (SM3; never logged)."""
    output_parts: dict[int, list[str]] = field(default_factory=dict)
    """Generated text per completion index, for the audit digest."""
    audit_detail: dict[str, str | int | bool] = field(default_factory=dict)
    completed: bool = False
    """Set once the call's outcome is recorded: a cancellation arriving later adds no second record."""

    def output_text(self) -> str | None:
        """All completions' text, in index order, separated by U+001E (record separator)."""
        if not self.output_parts:
            return None
        return "\x1e".join("".join(self.output_parts[i]) for i in sorted(self.output_parts))


current_call: contextvars.ContextVar[CallInfo | None] = contextvars.ContextVar("xinserve_call", default=None)


def call() -> CallInfo:
    """The current call's info (a blank one outside the pipeline, e.g. in unit tests)."""
    info = current_call.get()
    if info is None:
        info = CallInfo(method="", peer="", request_id=None, trace_id=None)
        current_call.set(info)
    return info
