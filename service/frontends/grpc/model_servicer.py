"""``xinserve.v1.ModelService``: the configured models and their state."""

from __future__ import annotations

from pathlib import Path

from service.core.reasons import Reason
from service.core.status import not_found
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
# Roles that see the verifier's and loader's detail (file names); others get codes and safe text.
_PRIVILEGED = frozenset({"admin", "security_admin", "auditor"})
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
    """The contract's view of a model. ``privileged`` (admin, auditor) adds the verifier's and
    loader's detail, which may name files; every caller gets reason codes and safe sentences."""
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


def _privileged(context) -> bool:
    """Whether the caller (``context.call``, set by the call pipeline) is admin or auditor."""
    record = getattr(context, "call", None)
    return record is not None and bool(record.principal.roles & _PRIVILEGED)


class ModelServicer(model_pb2_grpc.ModelServiceServicer):
    def __init__(self, runtime: Runtime, device: str) -> None:
        self._rt = runtime
        self._device = device

    async def ListModels(self, request, context):
        privileged = _privileged(context)
        return model_pb2.ListModelsResponse(
            models=[model_message(e, self._device, privileged) for e in self._rt.models.values()]
        )

    async def GetModel(self, request, context):
        v = Violations()
        check_model_name(request.name, v, field="name")
        v.raise_if_any()
        entry = self._rt.models.get(request.name)
        if entry is None:
            raise not_found("model", request.name, Reason.MODEL_NOT_FOUND)
        return model_pb2.GetModelResponse(model=model_message(entry, self._device, _privileged(context)))
