from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class TeeStatus(_message.Message):
    __slots__ = ("tee", "recorded", "keys_from_kbs")
    TEE_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    KEYS_FROM_KBS_FIELD_NUMBER: _ClassVar[int]
    tee: str
    recorded: bool
    keys_from_kbs: bool
    def __init__(self, tee: _Optional[str] = ..., recorded: _Optional[bool] = ..., keys_from_kbs: _Optional[bool] = ...) -> None: ...

class GetAttestationRequest(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: bytes
    def __init__(self, nonce: _Optional[bytes] = ...) -> None: ...

class GetAttestationResponse(_message.Message):
    __slots__ = ("tee", "evidence", "aux_evidence", "report_data", "spki_sha256", "manifest_digests", "recorded")
    TEE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    AUX_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    REPORT_DATA_FIELD_NUMBER: _ClassVar[int]
    SPKI_SHA256_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    tee: str
    evidence: bytes
    aux_evidence: bytes
    report_data: bytes
    spki_sha256: bytes
    manifest_digests: _containers.RepeatedScalarFieldContainer[str]
    recorded: bool
    def __init__(self, tee: _Optional[str] = ..., evidence: _Optional[bytes] = ..., aux_evidence: _Optional[bytes] = ..., report_data: _Optional[bytes] = ..., spki_sha256: _Optional[bytes] = ..., manifest_digests: _Optional[_Iterable[str]] = ..., recorded: _Optional[bool] = ...) -> None: ...
