from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_KIND_UNSPECIFIED: _ClassVar[ModelKind]
    MODEL_KIND_GENERATE: _ClassVar[ModelKind]
    MODEL_KIND_EMBED: _ClassVar[ModelKind]

class ModelState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_STATE_UNSPECIFIED: _ClassVar[ModelState]
    MODEL_STATE_LOADING: _ClassVar[ModelState]
    MODEL_STATE_READY: _ClassVar[ModelState]
    MODEL_STATE_FAILED: _ClassVar[ModelState]

class VerificationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERIFICATION_STATUS_UNSPECIFIED: _ClassVar[VerificationStatus]
    VERIFICATION_STATUS_NOT_CHECKED: _ClassVar[VerificationStatus]
    VERIFICATION_STATUS_VERIFIED: _ClassVar[VerificationStatus]
    VERIFICATION_STATUS_UNSIGNED_ALLOWED: _ClassVar[VerificationStatus]
    VERIFICATION_STATUS_FAILED: _ClassVar[VerificationStatus]
MODEL_KIND_UNSPECIFIED: ModelKind
MODEL_KIND_GENERATE: ModelKind
MODEL_KIND_EMBED: ModelKind
MODEL_STATE_UNSPECIFIED: ModelState
MODEL_STATE_LOADING: ModelState
MODEL_STATE_READY: ModelState
MODEL_STATE_FAILED: ModelState
VERIFICATION_STATUS_UNSPECIFIED: VerificationStatus
VERIFICATION_STATUS_NOT_CHECKED: VerificationStatus
VERIFICATION_STATUS_VERIFIED: VerificationStatus
VERIFICATION_STATUS_UNSIGNED_ALLOWED: VerificationStatus
VERIFICATION_STATUS_FAILED: VerificationStatus

class Model(_message.Message):
    __slots__ = ("name", "kind", "max_context_length", "dtype", "backend", "device", "state", "state_reason", "verification_status", "manifest_digest", "verification_detail", "lora_adapters", "state_reason_code", "verification_reason_code", "lora_adapter_details")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_STATUS_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_DETAIL_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTER_DETAILS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: ModelKind
    max_context_length: int
    dtype: str
    backend: str
    device: str
    state: ModelState
    state_reason: str
    verification_status: VerificationStatus
    manifest_digest: str
    verification_detail: str
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    state_reason_code: str
    verification_reason_code: str
    lora_adapter_details: _containers.RepeatedCompositeFieldContainer[LoraAdapter]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[ModelKind, str]] = ..., max_context_length: _Optional[int] = ..., dtype: _Optional[str] = ..., backend: _Optional[str] = ..., device: _Optional[str] = ..., state: _Optional[_Union[ModelState, str]] = ..., state_reason: _Optional[str] = ..., verification_status: _Optional[_Union[VerificationStatus, str]] = ..., manifest_digest: _Optional[str] = ..., verification_detail: _Optional[str] = ..., lora_adapters: _Optional[_Iterable[str]] = ..., state_reason_code: _Optional[str] = ..., verification_reason_code: _Optional[str] = ..., lora_adapter_details: _Optional[_Iterable[_Union[LoraAdapter, _Mapping]]] = ...) -> None: ...

class LoraAdapter(_message.Message):
    __slots__ = ("name", "verification_status", "manifest_digest", "verification_reason_code", "verification_detail", "servable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_STATUS_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_DETAIL_FIELD_NUMBER: _ClassVar[int]
    SERVABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    verification_status: VerificationStatus
    manifest_digest: str
    verification_reason_code: str
    verification_detail: str
    servable: bool
    def __init__(self, name: _Optional[str] = ..., verification_status: _Optional[_Union[VerificationStatus, str]] = ..., manifest_digest: _Optional[str] = ..., verification_reason_code: _Optional[str] = ..., verification_detail: _Optional[str] = ..., servable: _Optional[bool] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...
