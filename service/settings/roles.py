"""The duties that ``auth.roles`` grant, derived from the grants themselves.

Separation of duties (GB/T 22239-2019 §8.1.4.3, 三员分立): each role's duties are derived from
what it grants, whatever its label: a method of ``DUTY_METHODS["audit"]`` (AuditService) is the
audit administrator's, one of ``DUTY_METHODS["system"]`` (InferenceService, the OpenAI inference
routes) or ``act_for_others`` the system administrator's, one of ``DUTY_METHODS["security"]``
the security administrator's; server state (ModelService, ServerService, AttestationService,
``openai/models``) belongs to no duty. A role's ``duty`` label counts as a duty too. A role that
grants another duty's methods than the one it names is refused; so is a principal (token file
entry, mTLS rule, the mTLS default or the anonymous roles) whose roles together hold two duties,
unless ``auth.allow_conflicting_roles`` is set. Both are checked when the settings are loaded,
when the server starts and when the token file is reloaded (SIGHUP).

This module only reads the ``auth`` section; ``service.access.policy`` authorizes calls with it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from service.settings.auth import AuthSettings, RoleSettings
from xinserve.v1 import audit_pb2, inference_pb2

Duty = str
"""``system``, ``security`` or ``audit``."""


def _service_methods(descriptor: object, service: str) -> tuple[str, ...]:
    svc = descriptor.services_by_name[service]  # type: ignore[attr-defined]
    return tuple(f"{svc.full_name}/{m.name}" for m in svc.methods)


OPENAI_INFERENCE_METHODS = (
    "openai/chat.completions",
    "openai/completions",
    "openai/embeddings",
    "openai/score",
    "openai/rerank",
    "openai/responses",
    "openai/tokenize",
    "openai/detokenize",
)
"""The OpenAI-compatible routes that run the engine (``openai/models*`` only read state)."""

DUTY_METHODS: dict[Duty, tuple[str, ...]] = {
    "system": (*_service_methods(inference_pb2.DESCRIPTOR, "InferenceService"), *OPENAI_INFERENCE_METHODS),
    "audit": _service_methods(audit_pb2.DESCRIPTOR, "AuditService"),
    "security": (),
}
"""Method names whose grant makes a role hold a duty. The security administrator's work
(token file, trust store, keys) is done on the host, not by RPC, so it has no methods yet."""


class PolicyError(Exception):
    """The configured policy or a principal's roles are inconsistent. Safe to print."""


def _compile(patterns: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)")


class RoleGrants:
    """The methods, models and duties each role of ``auth.roles`` grants.

    Args:
        settings: the ``auth`` section.

    Raises:
        PolicyError: a role grants the methods of another duty than the one it names; a role
            named in ``anonymous_roles``, ``mtls_default_roles`` or ``mtls_roles`` is not
            defined, or those roles together hold two duties without ``allow_conflicting_roles``.
    """

    def __init__(self, settings: AuthSettings) -> None:
        self.settings = settings
        self._roles: dict[str, RoleSettings] = dict(settings.roles)
        self._methods = {name: _compile(r.methods) for name, r in self._roles.items()}
        self._models = {name: _compile(r.models) for name, r in self._roles.items()}
        self._duties = {name: self._derive_duties(name) for name in self._roles}
        self._administrators = frozenset(
            name
            for name, role in self._roles.items()
            if role.duty is not None or role.act_for_others or self._duties[name] & {"audit", "security"}
        )
        self.check_principal("auth.anonymous_roles", settings.anonymous_roles)
        self.check_principal("auth.mtls_default_roles", settings.mtls_default_roles)
        for i, rule in enumerate(settings.mtls_roles):
            self.check_principal(f"auth.mtls_roles[{i}]", rule.roles)

    @property
    def role_names(self) -> frozenset[str]:
        return frozenset(self._roles)

    @property
    def administrator_roles(self) -> frozenset[str]:
        """The roles of an administrator (system, security or audit): those that name a
        ``duty``, set ``act_for_others`` or grant a method of the audit or security duty.
        Inference alone, though it holds the system duty for separation of duties, makes no
        administrator (the default ``user`` is none; ``admin``, ``security_admin`` and
        ``auditor`` are)."""
        return self._administrators

    def is_administrator(self, roles: Iterable[str]) -> bool:
        """Whether one of ``roles`` (unknown names ignored) is in :attr:`administrator_roles`."""
        return not self._administrators.isdisjoint(roles)

    def _derive_duties(self, name: str) -> frozenset[Duty]:
        role, grants = self._roles[name], self._methods[name]
        derived = {duty for duty, methods in DUTY_METHODS.items() if any(grants.match(m) for m in methods)}
        if role.act_for_others:
            derived.add("system")
        if role.duty is not None and derived - {role.duty}:
            raise PolicyError(
                f"auth.roles.{name}: names duty {role.duty} but grants the methods of "
                f"{', '.join(sorted(derived - {role.duty}))} (a role holds one administrator duty)"
            )
        return frozenset(derived | ({role.duty} if role.duty else set()))

    def duties(self, roles: Iterable[str]) -> frozenset[Duty]:
        """The administrator duties the given (known) roles hold, derived from their grants
        and labels (see the module docstring)."""
        return frozenset().union(*(self._duties[r] for r in roles if r in self._duties))

    def check_principal(self, who: str, roles: Iterable[str]) -> None:
        """Refuse unknown roles and, unless allowed, roles that together hold more than one
        duty (derived from their grants, not only their ``duty`` labels).

        Raises:
            PolicyError: names ``who`` and the offending roles.
        """
        roles = set(roles)
        unknown = roles - self._roles.keys()
        if unknown:
            raise PolicyError(f"{who}: unknown role(s) {', '.join(sorted(unknown))} (define them in auth.roles)")
        duties = self.duties(roles)
        if len(duties) > 1 and not self.settings.allow_conflicting_roles:
            raise PolicyError(
                f"{who}: roles {', '.join(sorted(roles))} combine the duties {', '.join(sorted(duties))} "
                "(system, security and audit administrators must be separate principals; "
                "auth.allow_conflicting_roles overrides)"
            )
