"""``AuditSettings``: the audit part of the server configuration (embedded by ``service``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from audit.errors import AuditConfigError
from trust.compat import StrEnum

MIN_RETENTION_DAYS = 180
"""PRC Cybersecurity Law art. 21: network logs are kept at least six months."""


class FailurePolicy(StrEnum):
    """What happens when a record cannot be written (auditd's ``disk_full_action``)."""

    FAIL_CLOSED = "fail_closed"
    """Default. ``append`` raises ``AuditUnavailable``; the server refuses calls with UNAVAILABLE."""
    LOG_AND_CONTINUE = "log_and_continue"
    """``append`` logs a warning, keeps the record in a bounded memory backlog and returns ``None``;
    the backlog is written when the store recovers, overflow is counted and recorded as
    ``audit_records_lost``."""


class SyslogSettings(BaseModel):
    """Where signed checkpoints (and optionally every record) are shipped as RFC 5424 syslog.

    Transport: TCP with octet-counting framing (RFC 6587 section 3.4.1), TLS per RFC 5425 when
    ``tls`` is on. A collector that is down fills a bounded buffer; what happens when it is full
    follows the audit ``failure_policy`` (docs/audit.md, *Anchors off the host*).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(min_length=1, max_length=253)
    port: int = Field(default=6514, ge=1, le=65535)
    """6514 is the IANA port of syslog over TLS (RFC 5425); plain TCP collectors usually use 514."""
    tls: bool = True
    ca_file: Path | None = None
    """PEM CA bundle that verifies the collector's certificate (default: the system store)."""
    server_name: str | None = None
    """Name checked against the collector's certificate (default: ``host``)."""
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    """Client certificate and key when the collector requires mutual TLS."""
    ship_records: bool = False
    """Also ship every record (its chain hash and canonical body), not only checkpoints."""
    buffer_limit: int = Field(default=10_000, ge=1)
    """Messages kept in memory while the collector is unreachable. At the limit ``fail_closed``
    refuses new records (``log_and_continue`` goes on); 64 more are kept for checkpoints and
    shipping events, then the oldest records (then checkpoints) are dropped, counted and recorded."""
    retry_interval_s: float = Field(default=2.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    flush_timeout_s: float = Field(default=10.0, ge=0)
    """At close, how long to wait for buffered messages (the closing checkpoint) to be sent."""
    app_name: str = Field(default="xinserve", min_length=1, max_length=48, pattern=r"^[!-~]+$")
    facility: int = Field(default=13, ge=0, le=23)
    """RFC 5424 facility; 13 is *log audit*."""

    @model_validator(mode="after")
    def _client_pair(self) -> SyslogSettings:
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("syslog client_cert_file and client_key_file go together")
        if not self.tls and (self.ca_file or self.client_cert_file):
            raise ValueError("syslog ca_file/client_cert_file need tls = true")
        return self


class TsaSettings(BaseModel):
    """An RFC 3161 time-stamping authority that timestamps every signed checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://")
    """The TSA's HTTP(S) endpoint (``application/timestamp-query``, RFC 3161 section 3.4)."""
    ca_file: Path | None = None
    """PEM CA bundle for an ``https`` TSA (default: the system store)."""
    trust_file: Path | None = None
    """PEM trust anchors of the TSA's signing certificate. When set, every reply is verified
    as ``audit verify --tsa-cert`` does (path through the intermediates the reply carries,
    ``timeStamping`` EKU, ESSCertIDv2) before its token is shipped; one that fails is a
    timestamp failure."""
    timeout_s: float = Field(default=10.0, gt=0)


class StoreKind(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


class AuditSettings(BaseModel):
    """Audit log settings. Environment: ``XINSERVE_AUDIT__<FIELD>`` through the server's config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    store: StoreKind = StoreKind.SQLITE
    path: Path = Path("/var/lib/xinserve/audit/audit.db")
    """SQLite database file (``store = sqlite``)."""
    previous_log_retired: bool = False
    """Start a new SQLite log although an earlier one's traces (its writer lock file, ``-wal`` or
    ``-shm`` file) are present and the database is not: the operator retired the old log on
    purpose. Recorded (``audit_store_replaced``, ``retired``) as the new log's first event."""
    dsn: SecretStr | None = None
    """PostgreSQL DSN (``store = postgresql``), e.g. ``postgresql://xinserve@db/audit``. Never logged."""
    node_id: str = Field(default="local", min_length=1, max_length=128)
    """This writer's chain id. Default: ``local`` for SQLite (one writer per file, so a changing
    container host name does not start a new chain), the host name for PostgreSQL. Must be
    stable across restarts (StatefulSet pod name) and unique among replicas sharing a database."""
    writer_lock_wait_s: float = Field(default=30.0, ge=0)
    """PostgreSQL: how long to wait at start for the chain lock a previous (dead) writer may
    still hold; after that the start fails with ``WriterConflict``."""
    retention_days: int = 180
    """Records are kept at least this long (>= 180, enforced), then archived and purged."""
    retention_enabled: bool = True
    """Run retention (archive, then purge what is older than ``retention_days``) automatically."""
    retention_interval_s: int = Field(default=86_400, ge=60)
    """How often automatic retention runs (first run one checkpoint interval after start)."""
    checkpoint_interval_s: int = Field(default=60, ge=1, le=3600)
    """A signed checkpoint is written this often, also when idle."""
    failure_policy: FailurePolicy = FailurePolicy.FAIL_CLOSED
    backlog_limit: int = Field(default=100_000, ge=0)
    """``log_and_continue`` only: records kept in memory while the store is down."""
    retry_interval_s: float = Field(default=2.0, gt=0)
    """While unhealthy, how often the log probes the store to recover."""
    max_batch: int = Field(default=4096, ge=1)
    """Group commit: at most this many records per transaction."""
    signing_key_path: Path | None = None
    """SM2 private key (PEM) that signs checkpoints; usually the server's key (set by ``service``)."""
    signing_key_password_env: str | None = None
    """Name of the environment variable that holds the key's password, if encrypted."""
    signing_key_password_file: Path | None = None
    """Or: a file holding the password (first line; 0600 like the key)."""
    allow_insecure_key_permissions: bool = False
    """Warn instead of refusing a key or password file that its group or others can read."""
    syslog: SyslogSettings | None = None
    """Ship checkpoints (and optionally records) to a syslog collector off the host."""
    require_anchor: bool = False
    """Production posture: refuse to start unless an off-host anchor is configured (``syslog``).
    Without one a rolled-back, wiped or rewritten log verifies (docs/audit.md, *Production
    posture*)."""
    anchor_waiver: str | None = Field(default=None, min_length=1, max_length=256)
    """With ``require_anchor`` and no ``syslog``: start anyway, for this stated reason. The waiver
    is recorded in the ``start`` record and shown in GetServerInfo and the health detail."""
    tsa: TsaSettings | None = None
    """Timestamp checkpoints with RFC 3161 from this TSA (the tokens travel with the anchors)."""
    content_capture: bool = False
    """Opt-in: store prompt/output content SM4-GCM-encrypted. Off: SM3 digests only."""
    content_key_path: Path | None = None
    """File holding the 16-byte SM4 content key (raw or 32 hex characters)."""
    content_key_env: str | None = None
    """Or: name of an environment variable holding the key as 32 hex characters."""
    content_key_id: str = "content-1"
    archive_dir: Path | None = None
    """Where retention writes sealed archives (default: ``<path>.archive/`` next to the SQLite file)."""
    archive_encrypt: bool = False
    """Encrypt archives with SM4-GCM under the content key."""
    disk_warn_ratio: float = Field(default=0.9, gt=0, le=1)
    """Warn (log, metric, health detail) when the audit filesystem is fuller than this."""

    @model_validator(mode="before")
    @classmethod
    def _default_node_id(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("node_id") is None:
            store = data.get("store", StoreKind.SQLITE)
            data = {**data, "node_id": socket.gethostname() if str(store) == "postgresql" else "local"}
        return data

    @field_validator("retention_days")
    @classmethod
    def _retention(cls, v: int) -> int:
        if v < MIN_RETENTION_DAYS:
            raise ValueError(f"retention_days must be at least {MIN_RETENTION_DAYS} (got {v})")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> AuditSettings:
        if self.store is StoreKind.POSTGRESQL and self.dsn is None:
            raise ValueError("store = postgresql needs dsn")
        if self.store is StoreKind.POSTGRESQL and self.retention_enabled and self.archive_dir is None:
            raise ValueError("store = postgresql needs archive_dir (retention archives before it purges)")
        if (self.content_capture or self.archive_encrypt) and not (self.content_key_path or self.content_key_env):
            raise ValueError("content_capture and archive_encrypt need content_key_path or content_key_env")
        if self.signing_key_password_env and self.signing_key_password_file:
            raise ValueError("signing_key_password_env and signing_key_password_file are exclusive")
        if self.tsa is not None and self.syslog is None:
            raise ValueError("tsa needs syslog: the timestamp tokens travel with the shipped checkpoints")
        if self.anchor_waiver is not None and not self.require_anchor:
            raise ValueError("anchor_waiver waives require_anchor: set require_anchor = true with it")
        if self.require_anchor and self.syslog is None and self.anchor_waiver is None:
            raise ValueError(
                "require_anchor: no off-host anchor is configured; set syslog (a collector off the host) "
                "or, to start without one, anchor_waiver with the reason"
            )
        return self

    @property
    def anchor_posture(self) -> Literal["syslog", "waived", "none"]:
        """Which off-host anchor protects the log: ``syslog``; ``waived`` (``require_anchor``
        with ``anchor_waiver``); ``none`` (neither: rollback, wipe and a rewrite with the key are
        not detectable)."""
        if self.syslog is not None:
            return "syslog"
        return "waived" if self.require_anchor else "none"

    def effective_archive_dir(self) -> Path:
        if self.archive_dir is not None:
            return self.archive_dir
        if self.store is StoreKind.SQLITE:
            return self.path.parent / (self.path.name + ".archive")
        raise AuditConfigError("archive_dir is required with store = postgresql")

    def load_content_key(self) -> bytes | None:
        """The SM4 key for content and archives, or ``None`` when neither is configured."""
        raw: str | bytes | None = None
        if self.content_key_env:
            raw = os.environ.get(self.content_key_env)
            if raw is None:
                raise AuditConfigError(f"environment variable {self.content_key_env} is not set")
        elif self.content_key_path:
            try:
                raw = self.content_key_path.read_bytes()
            except OSError as exc:
                raise AuditConfigError(f"cannot read the content key file: {exc.strerror}") from None
        if raw is None:
            return None
        return parse_sm4_key(raw)


def parse_sm4_key(raw: str | bytes) -> bytes:
    if isinstance(raw, bytes) and len(raw) == 16:
        return raw
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise AuditConfigError("the SM4 content key must be 16 raw bytes or 32 hex characters") from None
    if len(key) != 16:
        raise AuditConfigError("the SM4 content key must be 16 bytes")
    return key


StoreUrl = Literal["sqlite", "postgresql"]


def store_from_url(url: str) -> AuditSettings:
    """Settings for CLI use from ``sqlite:///path``, a plain path, or ``postgresql://...``."""
    if url.startswith(("postgresql://", "postgres://")):
        return AuditSettings(store=StoreKind.POSTGRESQL, dsn=SecretStr(url), node_id="cli", retention_enabled=False)
    if url.startswith("sqlite://"):
        url = url.removeprefix("sqlite://")
    if not url:
        raise AuditConfigError("empty store location")
    return AuditSettings(store=StoreKind.SQLITE, path=Path(url), node_id="cli", retention_enabled=False)
