"""``xinserve.v1.ModelService``: the configured models and their state."""

from __future__ import annotations

from service.runtime import ModelEntry, ModelState, Runtime, Verification
from service.status import not_found
from service.validation import Violations, check_model_name
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


def model_message(entry: ModelEntry, device: str) -> model_pb2.Model:
    msg = model_pb2.Model(
        name=entry.name,
        kind=_KIND[entry.kind],
        state=_STATE[entry.state],
        state_reason=entry.state_reason,
        verification_status=_VERIFICATION[entry.verification],
        verification_detail=entry.verification_detail,
        manifest_digest=entry.manifest_digest,
        backend="vllm",
        device=device,
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
    def __init__(self, runtime: Runtime, device: str) -> None:
        self._rt = runtime
        self._device = device

    async def ListModels(self, request, context):
        return model_pb2.ListModelsResponse(models=[model_message(e, self._device) for e in self._rt.models.values()])

    async def GetModel(self, request, context):
        v = Violations()
        check_model_name(request.name, v, field="name")
        v.raise_if_any()
        entry = self._rt.models.get(request.name)
        if entry is None:
            raise not_found("model", request.name, "MODEL_NOT_FOUND")
        return model_pb2.GetModelResponse(model=model_message(entry, self._device))
