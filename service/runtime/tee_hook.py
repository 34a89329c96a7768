"""The server's TEE hook: attest at start, release model keys from a KBS, decrypt to tmpfs.

Startup order (ARCHITECTURE.md): open audit → :meth:`TeeHook.start` (build the evidence provider,
collect evidence once; ``attestation_collected``) → per model: verify the signature (over the
ciphertext) → :meth:`TeeHook.prepare_model` (for an encrypted model: evidence → KBS → key;
``key_released`` or ``key_refused``; decrypt into a private tmpfs directory) → load the engine
from it. At stop, :meth:`TeeHook.close` zeroes and removes every decrypted copy. The key itself is
never logged, audited or kept after decryption.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from audit import EventType
from service.core.logs import get_logger
from service.runtime.model_entry import ModelEntry, ModelState
from trust.sm3 import sm3_hex
from trust.tee.config import TeeSettings
from trust.tee.errors import EvidenceError, KeyReleaseError, TeeError, TeeReason
from trust.tee.evidence import TEE_NONE, Evidence, EvidenceProvider
from trust.tee.kbs_client import KbsClient
from trust.tee.model_encryption import is_encrypted
from trust.tee.model_release import DecryptionFailed, KeyRelease, release_and_decrypt, resource_of
from trust.tee.private_dir import PrivateDir
from trust.tee.providers import provider_from_settings


class ModelRuntime(Protocol):
    """What the hook needs of ``service.runtime.state.Runtime``: audit events and model states."""

    async def audit_event(self, event: Any, outcome: str = "OK", **detail: Any) -> None: ...

    async def mark(
        self, entry: ModelEntry, state: ModelState, reason: str = "", code: str = "", detail: str = ""
    ) -> None: ...


log = get_logger("xinserve.tee")

_SAFE_REFUSAL = {
    TeeReason.NO_TEE: "no TEE evidence provider is configured",
    TeeReason.KBS_UNREACHABLE: "the key broker is unreachable",
    TeeReason.KBS_REFUSED: "the key broker refused the attestation",
    TeeReason.POLICY_DENIED: "the key broker's policy denies the key",
    TeeReason.RESOURCE_NOT_FOUND: "the key broker has no such key",
    TeeReason.MALFORMED_JWE: "the key broker's answer could not be decrypted",
    TeeReason.KBS_PROTOCOL: "the key broker answered outside the protocol",
}


class TeeStartupError(Exception):
    """The configured TEE provider cannot be used at start. Safe to print."""


@dataclass
class TeeHook:
    """TEE state of one server process (shared by its front ends)."""

    settings: TeeSettings
    provider: EvidenceProvider
    keys_from_kbs: bool = False
    startup_evidence: Evidence | None = None
    _dirs: list[PrivateDir] = field(default_factory=list)

    @property
    def tee(self) -> str:
        return self.provider.tee

    @property
    def recorded(self) -> bool:
        return bool(self.provider.recorded)

    @classmethod
    async def start(cls, settings: TeeSettings, runtime: ModelRuntime) -> TeeHook:
        """Build the provider and, unless it is ``none``, collect evidence once (audited).

        Raises TeeStartupError when the provider cannot be built or collects nothing.
        """
        try:
            provider = provider_from_settings(settings)
        except EvidenceError as exc:
            raise TeeStartupError(f"tee.provider {settings.provider}: {exc}") from None
        hook = cls(settings, provider)
        try:
            tee = provider.tee
        except EvidenceError as exc:
            raise TeeStartupError(f"the TEE evidence provider failed at start: {exc}") from None
        if tee == TEE_NONE:
            return hook
        if provider.recorded:
            log.warning(
                "RECORDED_TEE_EVIDENCE",
                note="tee.provider recorded replays stored evidence: it proves nothing about this machine",
            )
        report_data = bytes.fromhex(sm3_hex(b"xinserve-start\n" + str(os.getpid()).encode()))
        try:
            evidence = await asyncio.to_thread(provider.collect, report_data)
        except EvidenceError as exc:
            await runtime.audit_event(
                EventType.ATTESTATION_COLLECTED,
                "UNAVAILABLE",
                purpose="startup",
                tee=provider.tee,
                reason=exc.reason.value,
            )
            raise TeeStartupError(f"the TEE evidence provider failed at start: {exc}") from None
        hook.startup_evidence = evidence
        await hook.audit_evidence(runtime, evidence, "startup")
        return hook

    async def audit_evidence(self, runtime: ModelRuntime, evidence: Evidence, purpose: str, **extra: Any) -> None:
        await runtime.audit_event(
            EventType.ATTESTATION_COLLECTED,
            purpose=purpose,
            tee=evidence.tee,
            provider=evidence.provider,
            recorded=evidence.recorded,
            evidence_sm3=sm3_hex(evidence.raw),
            report_data_sm3=sm3_hex(evidence.report_data),
            **extra,
        )
        log.info("attestation_collected", purpose=purpose, tee=evidence.tee, recorded=evidence.recorded)

    async def prepare_model(self, runtime: ModelRuntime, entry: ModelEntry) -> bool:
        """For an encrypted model: release its key, decrypt it to tmpfs and point the engine there.

        Returns True when the model may load (not encrypted, or decrypted); False after marking it
        FAILED with a precise reason (no key, no load).
        """

        source = entry.load_path or entry.path
        if not await asyncio.to_thread(is_encrypted, source):
            return True

        async def fail(code: str, safe: str, detail: str) -> bool:
            entry.reason_code, entry.state_detail = code, detail
            log.error("encrypted_model_not_loaded", model=entry.name, reason=code, detail=detail)
            await runtime.mark(entry, ModelState.FAILED, safe)
            entry.reason_code, entry.state_detail = code, detail
            return False

        try:
            resource = await asyncio.to_thread(resource_of, source)
        except TeeError as exc:
            return await fail("encrypted_model_invalid", "the encrypted model's manifest is invalid", str(exc))
        kbs_url = self.settings.kbs_url or ""
        try:
            private = PrivateDir(self.settings.decrypt_dir)
        except TeeError as exc:
            return await fail("decryption_failed", "no private in-memory directory for the decrypted model", str(exc))
        try:
            if not kbs_url:
                raise KeyReleaseError(TeeReason.KBS_UNREACHABLE, "no key broker is configured (tee.kbs_url)")
            verify: Any = str(self.settings.kbs_ca_file) if self.settings.kbs_ca_file else True
            client = KbsClient(kbs_url, self.provider, verify=verify, timeout=self.settings.kbs_timeout_seconds)
            release = await asyncio.to_thread(release_and_decrypt, client, source, private.path)
        except DecryptionFailed as exc:
            await asyncio.to_thread(private.remove)
            await self._audit_release(runtime, entry, exc.release)
            return await fail("decryption_failed", "the model does not decrypt with the released key", str(exc))
        except (KeyReleaseError, EvidenceError) as exc:
            await asyncio.to_thread(private.remove)
            outcome = "UNAVAILABLE" if exc.reason is TeeReason.KBS_UNREACHABLE else "PERMISSION_DENIED"
            await runtime.audit_event(
                EventType.KEY_REFUSED,
                outcome,
                model=entry.name,
                manifest_digest=entry.manifest_digest or None,
                kbs=kbs_url or None,
                resource=resource,
                tee=self.provider.tee,
                reason=exc.reason.value,
            )
            safe = _SAFE_REFUSAL.get(exc.reason, "the evidence provider failed")
            return await fail("key_refused", f"model key not released ({exc.reason.value}): {safe}", str(exc))
        except BaseException:
            await asyncio.to_thread(private.remove)
            raise
        await self._audit_release(runtime, entry, release)
        self._dirs.append(private)
        self.keys_from_kbs = True
        entry.load_path = private.path
        if entry.engine is not None:
            adapters = {a.name: a.load_path for a in entry.adapters.values() if a.load_path is not None}
            entry.engine.use_files(private.path, adapters)
        log.info("encrypted_model_decrypted", model=entry.name, resource=resource)
        return True

    async def _audit_release(self, runtime: ModelRuntime, entry: ModelEntry, release: KeyRelease) -> None:
        await runtime.audit_event(
            EventType.ATTESTATION_COLLECTED,
            purpose="key_release",
            model=entry.name,
            tee=release.tee,
            recorded=release.recorded,
            evidence_sm3=release.evidence_sm3,
        )
        await runtime.audit_event(
            EventType.KEY_RELEASED,
            model=entry.name,
            manifest_digest=entry.manifest_digest or None,
            kbs=release.kbs_url,
            resource=release.resource,
            tee=release.tee,
            recorded=release.recorded,
        )

    async def collect_for(self, report_data: bytes) -> Evidence:
        """Evidence over ``report_data`` from the configured provider (in a worker thread)."""
        return await asyncio.to_thread(self.provider.collect, report_data)

    def close(self) -> None:
        """Zero and remove every decrypted copy."""
        for d in self._dirs:
            d.remove()
        self._dirs.clear()
