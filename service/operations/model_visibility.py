"""Which models a caller sees: the one rule of gRPC ``ModelService`` (``ListModels``,
``GetModel``) and the OpenAI routes ``GET /v1/models`` and ``GET /v1/models/{model}``.

Through a method, a principal sees the models whose names are granted (``auth.roles.<role>.models``,
shell-style patterns) by one of its roles that grants that method: the check
``AccessPolicy.authorize_model`` makes for inference calls. With ``ready_only`` (the OpenAI
front end: OpenAI's model list is the models that can serve) only READY models are seen;
ModelService shows every state (LOADING, READY, FAILED) with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.access.policy import AccessPolicy
from service.core.call_context import Principal
from service.core.reasons import Reason
from service.core.status import not_found
from service.runtime.model_entry import ModelEntry, ModelState


def _shown(entry: ModelEntry, ready_only: bool) -> bool:
    return not ready_only or entry.state is ModelState.READY


def visible_models(
    policy: AccessPolicy,
    principal: Principal,
    method: str,
    models: Mapping[str, ModelEntry],
    *,
    ready_only: bool = False,
) -> list[ModelEntry]:
    """The entries of ``models`` (name → entry, in its order) that ``principal`` sees through
    ``method`` (``xinserve.v1.ModelService/ListModels``, ``openai/models``)."""
    return [
        entry
        for name, entry in models.items()
        if _shown(entry, ready_only) and policy.grants_model(principal, method, name)
    ]


def visible_model(
    policy: AccessPolicy,
    principal: Principal,
    method: str,
    models: Mapping[str, ModelEntry],
    name: str,
    *,
    ready_only: bool = False,
) -> ModelEntry:
    """The entry of model ``name``, if ``principal`` sees it through ``method``.

    Raises:
        RpcError: PERMISSION_DENIED (UNAUTHENTICATED for an anonymous caller) when no role
            grants ``name``, checked before whether it exists, so the answer tells a caller
            nothing of the models it may not see; then NOT_FOUND (``MODEL_NOT_FOUND``,
            ``ErrorInfo.metadata["model"]``: the name, at most 128 characters) when no such
            model is configured, or with ``ready_only`` it is not READY.
    """
    policy.authorize_model(principal, method, name)
    entry = models.get(name)
    if entry is None or not _shown(entry, ready_only):
        raise not_found("model", name[:128], Reason.MODEL_NOT_FOUND)
    return entry
