"""The ``tee`` section of the server configuration (docs/tee.md)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trust.tee.configfs_tsm import DEFAULT_ROOT, PROVIDERS
from trust.tee.csv_guest import DEVICE

ProviderName = Literal["none", "configfs-tsm", "csv", "recorded"]


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def _loopback(host: str) -> bool:
    """A loopback KBS host: an address ``ipaddress`` calls loopback (127.0.0.0/8, ::1, and their
    IPv4-mapped forms) or a conventional loopback name (``localhost``, ``*.localhost``, RFC 6761).
    ``trust`` imports nothing of the server or client packages, so this restates
    ``xinserve_client.addresses.is_loopback_host``; tests/tee/test_kbs_loopback_rule.py holds the
    two equal."""
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


class TeeSettings(BaseModel):
    """Evidence provider, key broker and where decrypted models live."""

    model_config = ConfigDict(extra="forbid")

    provider: ProviderName = "none"
    """``none`` (no TEE), ``configfs-tsm`` (TDX / SEV-SNP / Arm CCA guests), ``csv`` (Hygon CSV),
    ``recorded`` (replays ``recorded_evidence_file``: demos and tests only)."""
    configfs_root: Path = DEFAULT_ROOT
    configfs_provider: str | None = None
    """Expected configfs-tsm provider: ``tdx_guest``, ``sev_guest`` or ``arm_cca_guest`` (any if unset)."""
    csv_device: Path = Path(DEVICE)
    recorded_evidence_file: Path | None = None
    allow_recorded: bool = False
    """Allow the ``recorded`` provider. Replayed evidence proves nothing; it is marked everywhere."""
    kbs_url: str | None = None
    """Base URL of the Trustee KBS (``https://kbs.example:8080``); needed for encrypted models."""
    kbs_ca_file: Path | None = None
    """PEM CA bundle that signs the KBS's TLS certificate (system CAs if unset)."""
    kbs_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    decrypt_dir: Path = Path("/dev/shm")  # noqa: S108 - tmpfs by design, checked at use
    """Where decrypted models are written: must be on tmpfs or ramfs (never persistent disk)."""

    @field_validator("configfs_provider")
    @classmethod
    def _provider_name(cls, value: str | None) -> str | None:
        if value is not None and value not in PROVIDERS:
            raise ValueError(f"must be one of {sorted(PROVIDERS)}")
        return value

    @field_validator("kbs_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL with a host")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise ValueError("plain http is allowed only to a loopback KBS; use https")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _recorded(self) -> TeeSettings:
        if self.provider == "recorded":
            if not self.allow_recorded:
                raise ValueError("tee.provider recorded needs tee.allow_recorded (demos and tests only)")
            if self.recorded_evidence_file is None:
                raise ValueError("tee.provider recorded needs tee.recorded_evidence_file")
        return self
