"""``xinserve.v1.ModelService``: the configured models a caller sees and their state.

A caller sees the models its roles grant (``service.operations.model_visibility``, the rule of
``GET /v1/models`` too), in every state (LOADING, READY, FAILED), where the OpenAI front end
lists only READY ones. Administrators (``AccessPolicy.is_administrator``: a role naming a
``duty``, acting for others or holding the audit or security duty) also get the verifier's and
loader's detail."""

from __future__ import annotations

from pathlib import Path

from service.access.policy import AccessPolicy
from service.operations.model_visibility import visible_model, visible_models
from service.operations.validation import Violations, check_model_name
from service.runtime.state import AdapterEntry, ModelEntry, ModelState, Runtime, Verification
from service.runtime.verification import safe_verification_message
from xinserve.v1 import model_pb2, model_pb2_grpc

_KIND = {"generate": model_pb2.MODEL_KIND_GENERATE, "embed": model_pb2.MODEL_KIND_EMBED}
_STATE = {
    ModelState.LOADING: model_pb2.MODEL_STATE_LOADING,
    ModelState.READY: model_pb2.MODEL_STATE_READY,
    ModelState.FAILED: model_pb2.MODEL_STATE_FAILED,
}
_VERIFICATION = {
    Verification.NOT_CHECKED: model_pb2.VERIFICATION_STATUS_NOT_CHECKED,
    Verification.VERIFIED: model_pb2.VERIFICATION_STATUS_VERIFIED,
    Verification.UNSIGNED_ALLOWED: model_pb2.VERIFICATION_STATUS_UNSIGNED_ALLOWED,
    Verification.FAILED: model_pb2.VERIFICATION_STATUS_FAILED,
}


def _without_paths(text: str, *paths: Path | None) -> str:
    """``text`` with each server directory in ``paths`` written ``<model directory>``: privileged
    callers learn which file, never where the server keeps it."""
    for path in paths:
        if path is not None and str(path) not in ("", "."):
            text = text.replace(str(path), "<model directory>")
    return text


def _adapter_message(adapter: AdapterEntry, privileged: bool) -> model_pb2.LoraAdapter:
    detail = _without_paths(adapter.verification_detail, adapter.path, adapter.load_path)
    if adapter.verification_reason and not privileged:
        code = adapter.verification_reason
        detail = f"{code}: {safe_verification_message(code)}"
    return model_pb2.LoraAdapter(
        name=adapter.name,
        verification_status=_VERIFICATION[adapter.verification],
        manifest_digest=adapter.manifest_digest,
        verification_reason_code=adapter.verification_reason,
        verification_detail=detail,
        servable=adapter.servable,
    )


def model_message(entry: ModelEntry, device: str, privileged: bool = False) -> model_pb2.Model:
    """The contract's view of a model. ``privileged`` (an administrator) adds the verifier's
    and loader's detail, which may name files; every caller gets reason codes and safe sentences."""
    reason = entry.state_reason
    verification_detail = entry.verification_detail
    if entry.verification_reason and not privileged:
        code = entry.verification_reason
        verification_detail = f"{code}: {safe_verification_message(code)}"
    if privileged and entry.state_detail and entry.state_detail not in reason:
        reason = f"{reason} [{entry.state_detail}]" if reason else entry.state_detail
    reason = _without_paths(reason, entry.path, entry.load_path)
    verification_detail = _without_paths(verification_detail, entry.path, entry.load_path)
    msg = model_pb2.Model(
        name=entry.name,
        kind=_KIND[entry.kind],
        state=_STATE[entry.state],
        state_reason=reason,
        state_reason_code=entry.reason_code,
        verification_status=_VERIFICATION[entry.verification],
        verification_reason_code=entry.verification_reason,
        verification_detail=verification_detail,
        manifest_digest=entry.manifest_digest,
        backend="vllm",
        device=device,
        lora_adapter_details=[_adapter_message(a, privileged) for a in entry.adapters.values()],
    )
    if entry.state is ModelState.READY and entry.engine is not None:
        info = entry.engine.info
        msg.max_context_length = info.max_model_len
        msg.dtype = info.dtype
        msg.backend = info.backend
        msg.device = info.device
        msg.lora_adapters.extend(info.lora_adapters)
    return msg


class ModelServicer(model_pb2_grpc.ModelServiceServicer):
    """ModelService over ``runtime``'s models, for the callers ``policy`` grants them to.

    Args:
        runtime: the models.
        device: device kind reported for a model without a running engine.
        policy: the call core's role policy.
    """

    def __init__(self, runtime: Runtime, device: str, policy: AccessPolicy) -> None:
        self._rt = runtime
        self._device = device
        self._policy = policy

    async def ListModels(self, request, context):
        """Every model the caller sees, in any state (RPC errors: none beyond the call core's)."""
        record = context.call
        privileged = self._policy.is_administrator(record.principal.roles)
        entries = visible_models(self._policy, record.principal, record.method, self._rt.models)
        return model_pb2.ListModelsResponse(models=[model_message(e, self._device, privileged) for e in entries])

    async def GetModel(self, request, context):
        """One model. Errors: INVALID_ARGUMENT (``name`` empty or over 128 characters),
        PERMISSION_DENIED (no role grants it, whether or not it exists), NOT_FOUND."""
        v = Violations()
        check_model_name(request.name, v, field="name")
        v.raise_if_any()
        record = context.call
        entry = visible_model(self._policy, record.principal, record.method, self._rt.models, request.name)
        privileged = self._policy.is_administrator(record.principal.roles)
        return model_pb2.GetModelResponse(model=model_message(entry, self._device, privileged))
