"""Authorization: which roles may call which methods on which models (``auth.roles``).

A role grants method-name patterns and model-name patterns (shell-style, ``fnmatch``).
Method names are the call core's: ``xinserve.v1.InferenceService/Generate`` for gRPC,
``openai/chat.completions`` for the OpenAI-compatible front end. A call is allowed when one
of the principal's roles grants its method; a call on a model is allowed when one of those
roles also grants the model.

Separation of duties (GB/T 22239-2019 §8.1.4.3, 三员分立): each role's duties are derived from
what it grants, whatever its label: a method of ``DUTY_METHODS["audit"]`` (AuditService) is the
audit administrator's, one of ``DUTY_METHODS["system"]`` (InferenceService, the OpenAI inference
routes) or ``act_for_others`` the system administrator's, one of ``DUTY_METHODS["security"]``
the security administrator's; server state (ModelService, ServerService, AttestationService,
``openai/models``) belongs to no duty. A role's ``duty`` label counts as a duty too. A role that
grants another duty's methods than the one it names is refused; so is a principal (token file
entry, mTLS rule, the mTLS default or the anonymous roles) whose roles together hold two duties,
unless ``auth.allow_conflicting_roles`` is set. Both are checked when the server starts and when
the token file is reloaded (SIGHUP).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

import grpc

from service.auth_settings import AuthSettings, RoleSettings
from service.call_context import Principal
from service.status import RpcError
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


class AccessPolicy:
    """The role → methods/models policy of ``auth.roles``.

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
        self.check_principal("auth.anonymous_roles", settings.anonymous_roles)
        self.check_principal("auth.mtls_default_roles", settings.mtls_default_roles)
        for i, rule in enumerate(settings.mtls_roles):
            self.check_principal(f"auth.mtls_roles[{i}]", rule.roles)

    @property
    def role_names(self) -> frozenset[str]:
        return frozenset(self._roles)

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

    def _granting(self, principal: Principal, method: str) -> list[str]:
        name = method.lstrip("/")
        return [r for r in sorted(principal.roles) if r in self._methods and self._methods[r].match(name)]

    def authorize(self, principal: Principal, method: str) -> None:
        """Allow the call or raise.

        Raises:
            RpcError: UNAUTHENTICATED for an anonymous caller the policy does not admit,
                PERMISSION_DENIED for an authenticated one.
        """
        if self._granting(principal, method):
            return
        target = method.lstrip("/").split("/", 1)[0] if not method.startswith("openai/") else method
        if principal.auth_method == "anonymous":
            raise RpcError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{target} needs an authenticated caller with a role that grants it",
                "UNAUTHENTICATED",
            )
        raise RpcError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"principal lacks a role for {target}",
            "PERMISSION_DENIED",
        )

    def authorize_model(self, principal: Principal, method: str, model: str) -> None:
        """Allow ``method`` on ``model`` or raise PERMISSION_DENIED (UNAUTHENTICATED if anonymous)."""
        for role in self._granting(principal, method):
            if self._models[role].match(model):
                return
        anonymous = principal.auth_method == "anonymous"
        code = grpc.StatusCode.UNAUTHENTICATED if anonymous else grpc.StatusCode.PERMISSION_DENIED
        raise RpcError(code, f"principal has no role that grants model {model[:128]!r}", code.name)

    def may_act_for_others(self, principal: Principal) -> bool:
        """Whether the principal may abort other principals' requests (``act_for_others``)."""
        return any(self._roles[r].act_for_others for r in principal.roles if r in self._roles)
