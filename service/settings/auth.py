"""The ``auth`` section of the configuration: who may call (tokens, mTLS rules, anonymous
callers) and the authorization policy's roles. ``service.access.policy.AccessPolicy`` is built from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from service.settings.base import SettingsModel


class RoleSettings(SettingsModel):
    """One role of the authorization policy."""

    methods: list[str]
    """Method-name patterns (shell-style) the role may call: ``xinserve.v1.InferenceService/*``,
    ``xinserve.v1.AuditService/QueryRecords``, ``openai/*``."""
    models: list[str] = Field(default_factory=lambda: ["*"])
    """Model-name patterns the role may use in inference calls and see in ModelService and
    ``GET /v1/models`` (``service.operations.model_visibility``)."""
    duty: Literal["system", "security", "audit"] | None = None
    """Administrator duty (三员分立): one principal may not hold two different duties."""
    act_for_others: bool = False
    """May act on other principals' requests (``Abort`` of a request it did not start)."""


_SERVER_STATE = ["xinserve.v1.ModelService/*", "xinserve.v1.ServerService/*", "xinserve.v1.AttestationService/*"]


def default_roles() -> dict[str, RoleSettings]:
    """The default policy (README, Security): ``user`` runs inference; ``admin`` (system
    administrator) runs inference and may abort anyone's request; ``security_admin`` reads
    server state; ``auditor`` (audit administrator) reads the audit log and server state.
    Server state is ModelService, ServerService and AttestationService."""
    inference = ["xinserve.v1.InferenceService/*", "openai/*"]
    return {
        "user": RoleSettings(methods=[*inference, *_SERVER_STATE]),
        "admin": RoleSettings(methods=[*inference, *_SERVER_STATE], duty="system", act_for_others=True),
        "security_admin": RoleSettings(methods=list(_SERVER_STATE), duty="security"),
        "auditor": RoleSettings(methods=["xinserve.v1.AuditService/*", *_SERVER_STATE], duty="audit"),
    }


class MtlsRoleRule(SettingsModel):
    """Roles for mTLS principals whose certificate matches; the first matching rule applies."""

    subject: str | None = None
    """Regular expression that must match the whole subject (RFC 4514 string)."""
    san: str | None = None
    """Shell-style pattern that must match one subjectAltName (DNS name, URI or e-mail)."""
    roles: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_condition(self) -> MtlsRoleRule:
        if self.subject is None and self.san is None:
            raise ValueError("a rule needs subject or san")
        if self.subject is not None:
            try:
                re.compile(self.subject)
            except re.error as exc:
                raise ValueError(f"subject: not a regular expression ({exc.msg})") from None
        return self


class TrustedProxySettings(SettingsModel):
    """A gRPC listener for one TLS-terminating gateway (a TLCP gateway, GB/T 38636): on it the
    client identity the gateway forwards in ``x-forwarded-client-cert`` becomes the caller's
    principal. Anyone who can connect to it can claim any identity, so it is a unix socket,
    reachable only by the gateway's user through the file system's permissions."""

    name: str = Field(pattern=r"^[\x21-\x7e]{1,128}$")
    """The gateway's identity, recorded as ``proxy`` in every audit record of a call through it."""
    listen: str
    """``unix:/absolute/path`` of the socket (plaintext HTTP/2 gRPC, h2c). A stale socket file
    there is replaced; any other file is refused at start."""
    socket_mode: int = Field(default=0o660, ge=0, le=0o777)
    """Permission bits of the socket file (the directory's permissions guard it too)."""

    @field_validator("listen")
    @classmethod
    def _unix_socket(cls, value: str) -> str:
        if not value.startswith("unix:/") or "\x00" in value:
            raise ValueError("must be unix:/absolute/path (a unix socket; a TCP listener cannot prove who connects)")
        return value


class AuthSettings(SettingsModel):
    """Who may call. The principal is the mTLS certificate subject or the token's principal."""

    token_file: Path | None = None
    """Lines ``<principal> <sha256-hex of the token> [roles,comma,separated]``; '#' comments.
    Must not be accessible to its group or others (mode 0600); reloaded on SIGHUP."""
    required: bool = False
    """Refuse calls with neither a valid token nor a client certificate (UNAUTHENTICATED)."""
    roles: dict[str, RoleSettings] = Field(default_factory=default_roles)
    """The authorization policy: role name -> methods, models, duty (replaces the default)."""
    anonymous_roles: list[str] = Field(default_factory=lambda: ["user"])
    """Roles of callers without credentials (when ``required`` is false)."""
    mtls_roles: list[MtlsRoleRule] = Field(default_factory=list)
    """Roles of mTLS principals by certificate subject or subjectAltName."""
    mtls_default_roles: list[str] = Field(default_factory=lambda: ["user"])
    """Roles of an mTLS principal no rule matches."""
    trusted_proxies: list[TrustedProxySettings] = Field(default_factory=list)
    """Gateways whose forwarded client identity (``x-forwarded-client-cert``) is accepted on
    their own listener; on every other listener the header is refused (UNAUTHENTICATED)."""
    allow_conflicting_roles: bool = False
    """Allow a principal to hold roles of different duties (not for production)."""
    allow_insecure_token_file_permissions: bool = False
    """Warn instead of refusing to start (or reload) when ``token_file`` is accessible to its
    group or others (not for production)."""
    max_failed_logins: int = Field(default=10, ge=1)
    """Failed logins (refused or expired tokens) from one peer host within
    ``failed_login_window_s`` that lock it out for ``lockout_s``."""
    max_failed_logins_per_principal: int = Field(default=10, ge=1)
    """Failed logins within ``failed_login_window_s`` for one principal (named by an expired
    token), with one presented token (by its SHA-256), or with one client certificate beside
    a refused token (by its subject) that lock it out for ``lockout_s``, from any address."""
    max_failed_logins_global: int | None = Field(default=None, ge=1)
    """Failed logins from all sources together within ``failed_login_window_s`` that lock every
    call presenting a token out for ``global_lockout_s``; None (the default): no global budget.
    Setting it bounds guessing spread over many addresses, and lets anyone who can send that
    many wrong tokens refuse every token login for ``global_lockout_s``."""
    failed_login_window_s: float = Field(default=60.0, gt=0)
    lockout_s: float = Field(default=300.0, ge=0)
    """While locked out, every call is RESOURCE_EXHAUSTED (``LOGIN_THROTTLED``) with RetryInfo."""
    global_lockout_s: float = Field(default=60.0, ge=0)
    """How long the global lockout (``max_failed_logins_global``) lasts."""
