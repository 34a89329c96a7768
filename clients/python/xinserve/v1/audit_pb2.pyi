from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AuditFilter(_message.Message):
    __slots__ = ("since_ms", "until_ms", "principal", "method", "outcome", "event", "limit")
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    since_ms: int
    until_ms: int
    principal: str
    method: str
    outcome: str
    event: str
    limit: int
    def __init__(self, since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ..., principal: _Optional[str] = ..., method: _Optional[str] = ..., outcome: _Optional[str] = ..., event: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class QueryRecordsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AuditFilter
    def __init__(self, filter: _Optional[_Union[AuditFilter, _Mapping]] = ...) -> None: ...

class QueryRecordsResponse(_message.Message):
    __slots__ = ("chain", "seq", "time_ms", "event", "principal", "method", "outcome", "canonical", "chain_hash")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CANONICAL_FIELD_NUMBER: _ClassVar[int]
    CHAIN_HASH_FIELD_NUMBER: _ClassVar[int]
    chain: str
    seq: int
    time_ms: int
    event: str
    principal: str
    method: str
    outcome: str
    canonical: bytes
    chain_hash: str
    def __init__(self, chain: _Optional[str] = ..., seq: _Optional[int] = ..., time_ms: _Optional[int] = ..., event: _Optional[str] = ..., principal: _Optional[str] = ..., method: _Optional[str] = ..., outcome: _Optional[str] = ..., canonical: _Optional[bytes] = ..., chain_hash: _Optional[str] = ...) -> None: ...

class ExportRecordsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AuditFilter
    def __init__(self, filter: _Optional[_Union[AuditFilter, _Mapping]] = ...) -> None: ...

class ExportRecordsResponse(_message.Message):
    __slots__ = ("jsonl",)
    JSONL_FIELD_NUMBER: _ClassVar[int]
    jsonl: bytes
    def __init__(self, jsonl: _Optional[bytes] = ...) -> None: ...

class GetLatestCheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLatestCheckpointResponse(_message.Message):
    __slots__ = ("payload", "signature", "key_id", "public_key_pem")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    signature: bytes
    key_id: str
    public_key_pem: str
    def __init__(self, payload: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., key_id: _Optional[str] = ..., public_key_pem: _Optional[str] = ...) -> None: ...

class VerifyLogRequest(_message.Message):
    __slots__ = ("chain", "from_seq", "to_seq")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    chain: str
    from_seq: int
    to_seq: int
    def __init__(self, chain: _Optional[str] = ..., from_seq: _Optional[int] = ..., to_seq: _Optional[int] = ...) -> None: ...

class VerifyLogResponse(_message.Message):
    __slots__ = ("ok", "records_checked", "chains")
    OK_FIELD_NUMBER: _ClassVar[int]
    RECORDS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    CHAINS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    records_checked: int
    chains: _containers.RepeatedCompositeFieldContainer[ChainVerification]
    def __init__(self, ok: _Optional[bool] = ..., records_checked: _Optional[int] = ..., chains: _Optional[_Iterable[_Union[ChainVerification, _Mapping]]] = ...) -> None: ...

class ChainVerification(_message.Message):
    __slots__ = ("chain", "ok", "first_broken_seq", "records_checked", "last_checkpoint", "unsigned_tail", "recoveries", "purges", "problems", "last_checkpoint_time_ms")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    FIRST_BROKEN_SEQ_FIELD_NUMBER: _ClassVar[int]
    RECORDS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    UNSIGNED_TAIL_FIELD_NUMBER: _ClassVar[int]
    RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    PURGES_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    chain: str
    ok: bool
    first_broken_seq: int
    records_checked: int
    last_checkpoint: int
    unsigned_tail: int
    recoveries: _containers.RepeatedScalarFieldContainer[str]
    purges: _containers.RepeatedScalarFieldContainer[str]
    problems: _containers.RepeatedCompositeFieldContainer[VerificationProblem]
    last_checkpoint_time_ms: int
    def __init__(self, chain: _Optional[str] = ..., ok: _Optional[bool] = ..., first_broken_seq: _Optional[int] = ..., records_checked: _Optional[int] = ..., last_checkpoint: _Optional[int] = ..., unsigned_tail: _Optional[int] = ..., recoveries: _Optional[_Iterable[str]] = ..., purges: _Optional[_Iterable[str]] = ..., problems: _Optional[_Iterable[_Union[VerificationProblem, _Mapping]]] = ..., last_checkpoint_time_ms: _Optional[int] = ...) -> None: ...

class VerificationProblem(_message.Message):
    __slots__ = ("kind", "message", "seq", "checkpoint")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    message: str
    seq: int
    checkpoint: int
    def __init__(self, kind: _Optional[str] = ..., message: _Optional[str] = ..., seq: _Optional[int] = ..., checkpoint: _Optional[int] = ...) -> None: ...
