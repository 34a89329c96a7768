"""A configured model (and its LoRA adapters) and where it is in its life: loading, ready or
failed, and what signature verification found. Data only; ``service.runtime.state.Runtime`` holds
the entries and moves them between states."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from engine_backends.protocol import Engine, ModelKind


class ModelState(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class Verification(enum.Enum):
    NOT_CHECKED = "not_checked"
    VERIFIED = "verified"
    UNSIGNED_ALLOWED = "unsigned_allowed"
    FAILED = "failed"


@dataclass
class AdapterEntry:
    """A LoRA adapter configured for a model, verified like a model before it may be used.

    ``load_path`` is the directory the engine loads (the verified private copy), set only
    when the adapter may be served. ``verification_reason`` is the trust reason code
    (``unsigned``, ``file_modified`` ...) when verification failed.
    """

    name: str
    path: Path
    verification: Verification = Verification.NOT_CHECKED
    verification_reason: str = ""
    verification_detail: str = ""
    manifest_digest: str = ""
    load_path: Path | None = None

    @property
    def servable(self) -> bool:
        return self.load_path is not None

    def audit_detail(self) -> dict[str, str | int | bool]:
        """What a call's audit record carries about the adapter it used."""
        out: dict[str, str | int | bool] = {"lora_adapter": self.name, "lora_verification": self.verification.value}
        if self.manifest_digest:
            out["lora_manifest_digest"] = self.manifest_digest
        return out


@dataclass
class ModelEntry:
    """A configured model and where it is in its life.

    ``state_reason`` is safe for any caller (no server path, no exception text);
    ``reason_code`` is its machine-readable code and ``state_detail`` the operator's detail
    (admin and auditor roles, and the log). ``load_path`` is what the engine loads: the
    verified private copy, or ``path`` itself when an unverified model is allowed.
    """

    name: str
    kind: ModelKind
    path: Path
    engine: Engine | None = None
    state: ModelState = ModelState.LOADING
    state_reason: str = ""
    verification: Verification = Verification.NOT_CHECKED
    verification_detail: str = ""
    manifest_digest: str = ""
    reason_code: str = ""
    state_detail: str = ""
    verification_reason: str = ""
    load_path: Path | None = None
    adapters: dict[str, AdapterEntry] = field(default_factory=dict)
    ready_since: int = 0
    """Unix time (seconds) the model last became READY; 0 before (OpenAI's ``created``)."""
