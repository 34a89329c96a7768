from xinserve.v1 import attestation_pb2 as _attestation_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StructuredOutputMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STRUCTURED_OUTPUT_MODE_UNSPECIFIED: _ClassVar[StructuredOutputMode]
    STRUCTURED_OUTPUT_MODE_JSON_SCHEMA: _ClassVar[StructuredOutputMode]
    STRUCTURED_OUTPUT_MODE_REGEX: _ClassVar[StructuredOutputMode]
    STRUCTURED_OUTPUT_MODE_CHOICE: _ClassVar[StructuredOutputMode]
    STRUCTURED_OUTPUT_MODE_GRAMMAR: _ClassVar[StructuredOutputMode]
    STRUCTURED_OUTPUT_MODE_JSON_OBJECT: _ClassVar[StructuredOutputMode]

class DeviceHealth(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_HEALTH_UNSPECIFIED: _ClassVar[DeviceHealth]
    DEVICE_HEALTH_OK: _ClassVar[DeviceHealth]
    DEVICE_HEALTH_WARNING: _ClassVar[DeviceHealth]
    DEVICE_HEALTH_CRITICAL: _ClassVar[DeviceHealth]
    DEVICE_HEALTH_DEGRADED: _ClassVar[DeviceHealth]
STRUCTURED_OUTPUT_MODE_UNSPECIFIED: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_JSON_SCHEMA: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_REGEX: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_CHOICE: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_GRAMMAR: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_JSON_OBJECT: StructuredOutputMode
DEVICE_HEALTH_UNSPECIFIED: DeviceHealth
DEVICE_HEALTH_OK: DeviceHealth
DEVICE_HEALTH_WARNING: DeviceHealth
DEVICE_HEALTH_CRITICAL: DeviceHealth
DEVICE_HEALTH_DEGRADED: DeviceHealth

class Device(_message.Message):
    __slots__ = ("kind", "index", "name", "memory_total_bytes", "memory_used_bytes", "utilization_ratio", "temperature_celsius", "power_watts", "health", "driver_version", "firmware_version", "error", "read_at_unix_seconds")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_CELSIUS_FIELD_NUMBER: _ClassVar[int]
    POWER_WATTS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    FIRMWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    READ_AT_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    index: int
    name: str
    memory_total_bytes: int
    memory_used_bytes: int
    utilization_ratio: float
    temperature_celsius: float
    power_watts: float
    health: DeviceHealth
    driver_version: str
    firmware_version: str
    error: str
    read_at_unix_seconds: float
    def __init__(self, kind: _Optional[str] = ..., index: _Optional[int] = ..., name: _Optional[str] = ..., memory_total_bytes: _Optional[int] = ..., memory_used_bytes: _Optional[int] = ..., utilization_ratio: _Optional[float] = ..., temperature_celsius: _Optional[float] = ..., power_watts: _Optional[float] = ..., health: _Optional[_Union[DeviceHealth, str]] = ..., driver_version: _Optional[str] = ..., firmware_version: _Optional[str] = ..., error: _Optional[str] = ..., read_at_unix_seconds: _Optional[float] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("structured_output_modes", "max_logprobs", "lora", "prefix_caching", "max_n", "max_stop_sequences", "max_embed_inputs")
    STRUCTURED_OUTPUT_MODES_FIELD_NUMBER: _ClassVar[int]
    MAX_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    LORA_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHING_FIELD_NUMBER: _ClassVar[int]
    MAX_N_FIELD_NUMBER: _ClassVar[int]
    MAX_STOP_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    MAX_EMBED_INPUTS_FIELD_NUMBER: _ClassVar[int]
    structured_output_modes: _containers.RepeatedScalarFieldContainer[StructuredOutputMode]
    max_logprobs: int
    lora: bool
    prefix_caching: bool
    max_n: int
    max_stop_sequences: int
    max_embed_inputs: int
    def __init__(self, structured_output_modes: _Optional[_Iterable[_Union[StructuredOutputMode, str]]] = ..., max_logprobs: _Optional[int] = ..., lora: _Optional[bool] = ..., prefix_caching: _Optional[bool] = ..., max_n: _Optional[int] = ..., max_stop_sequences: _Optional[int] = ..., max_embed_inputs: _Optional[int] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("server_version", "schema_revision", "min_client_revision", "backend", "backend_version", "devices", "capabilities", "tee", "audit")
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_REVISION_FIELD_NUMBER: _ClassVar[int]
    MIN_CLIENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    BACKEND_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    TEE_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    server_version: str
    schema_revision: int
    min_client_revision: int
    backend: str
    backend_version: str
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    capabilities: Capabilities
    tee: _attestation_pb2.TeeStatus
    audit: AuditStatus
    def __init__(self, server_version: _Optional[str] = ..., schema_revision: _Optional[int] = ..., min_client_revision: _Optional[int] = ..., backend: _Optional[str] = ..., backend_version: _Optional[str] = ..., devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., tee: _Optional[_Union[_attestation_pb2.TeeStatus, _Mapping]] = ..., audit: _Optional[_Union[AuditStatus, _Mapping]] = ...) -> None: ...

class AuditStatus(_message.Message):
    __slots__ = ("anchor", "anchor_waiver", "require_anchor")
    ANCHOR_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_WAIVER_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_ANCHOR_FIELD_NUMBER: _ClassVar[int]
    anchor: str
    anchor_waiver: str
    require_anchor: bool
    def __init__(self, anchor: _Optional[str] = ..., anchor_waiver: _Optional[str] = ..., require_anchor: _Optional[bool] = ...) -> None: ...

class GetLoadRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class GetLoadResponse(_message.Message):
    __slots__ = ("running", "waiting", "kv_cache_usage", "in_flight", "queued")
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    running: int
    waiting: int
    kv_cache_usage: float
    in_flight: int
    queued: int
    def __init__(self, running: _Optional[int] = ..., waiting: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., in_flight: _Optional[int] = ..., queued: _Optional[int] = ...) -> None: ...
