"""Authorization: which roles may call which methods on which models (``auth.roles``).

A role grants method-name patterns and model-name patterns (shell-style, ``fnmatch``).
Method names are the call core's: ``xinserve.v1.InferenceService/Generate`` for gRPC,
``openai/chat.completions`` for the OpenAI-compatible front end. A call is allowed when one
of the principal's roles grants its method; a call on a model is allowed when one of those
roles also grants the model. The duties roles hold (separation of duties) are derived in
``service.settings.roles``.
"""

from __future__ import annotations

import grpc

from service.core.call_context import Principal
from service.core.reasons import Reason
from service.core.status import RpcError
from service.settings.roles import DUTY_METHODS, OPENAI_INFERENCE_METHODS, Duty, PolicyError, RoleGrants

__all__ = ["DUTY_METHODS", "OPENAI_INFERENCE_METHODS", "AccessPolicy", "Duty", "PolicyError"]


class AccessPolicy(RoleGrants):
    """The role → methods/models policy of ``auth.roles``: :class:`RoleGrants` plus the checks
    made on every call.

    Args:
        settings: the ``auth`` section.

    Raises:
        PolicyError: as :class:`RoleGrants`.
    """

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
                Reason.UNAUTHENTICATED,
            )
        raise RpcError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"principal lacks a role for {target}",
            Reason.PERMISSION_DENIED,
        )

    def grants_model(self, principal: Principal, method: str, model: str) -> bool:
        """Whether one of the principal's roles that grants ``method`` also grants ``model``
        (its ``models`` patterns)."""
        return any(self._models[role].match(model) for role in self._granting(principal, method))

    def authorize_model(self, principal: Principal, method: str, model: str) -> None:
        """Allow ``method`` on ``model`` (:meth:`grants_model`) or raise PERMISSION_DENIED
        (UNAUTHENTICATED if anonymous)."""
        if self.grants_model(principal, method, model):
            return
        anonymous = principal.auth_method == "anonymous"
        code = grpc.StatusCode.UNAUTHENTICATED if anonymous else grpc.StatusCode.PERMISSION_DENIED
        reason = Reason.UNAUTHENTICATED if anonymous else Reason.PERMISSION_DENIED
        raise RpcError(
            code, f"principal has no role that grants model {model[:128]!r}", reason, metadata={"model": model[:128]}
        )

    def may_act_for_others(self, principal: Principal) -> bool:
        """Whether the principal may abort other principals' requests (``act_for_others``)."""
        return any(self._roles[r].act_for_others for r in principal.roles if r in self._roles)
