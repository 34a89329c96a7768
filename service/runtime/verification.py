"""Verify a model and its LoRA adapters, then load exactly the verified bytes (fail closed).

Each model directory and each LoRA adapter directory must carry a signature
(``xinserve sign model DIR --name <served model name | adapter name>``) by a key of the trust
store. Verification reads every signed file once and writes the bytes it hashed to a private
read-only copy under ``<data_dir>/verified-models/`` (``trust.verified_copy``); the engine
loads that copy, never the operator's directory, so a file changed after (or during) the check
is never served. A model that fails is FAILED and not loaded; an adapter that fails is listed
as refused and never loaded, and requests naming it get FAILED_PRECONDITION. With
``trust.allow_unsigned_models`` (development only) both are served from their own directory.

Messages shown to every caller carry a reason code and a fixed sentence per code; the
verifier's detail (file names, paths) goes to the log and to admin/auditor callers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import quote

from audit import EventType
from service.core.logs import get_logger
from service.runtime.state import AdapterEntry, ModelEntry, ModelState, Runtime, Verification
from trust.errors import Reason, VerificationError
from trust.trust_store import TrustStore
from trust.verified_copy import VerifiedCopy, copy_verified_model

log = get_logger("xinserve.verification")

VERIFIED_DIRNAME = "verified-models"

_SAFE: dict[str, str] = {
    Reason.UNSIGNED: "the directory carries no signature",
    Reason.MALFORMED_ENVELOPE: "the signature envelope is malformed",
    Reason.WRONG_PAYLOAD_TYPE: "the signature is not an in-toto statement",
    Reason.MALFORMED_SIGNATURE: "the signature is malformed",
    Reason.BAD_SIGNATURE: "the signature does not verify",
    Reason.UNTRUSTED_KEY: "the signing key is not in the trust store",
    Reason.REVOKED_KEY: "the signing key is revoked",
    Reason.KEY_NOT_YET_VALID: "the signing key is not yet valid",
    Reason.KEY_EXPIRED: "the signing key has expired",
    Reason.MALFORMED_STATEMENT: "the signed statement is malformed",
    Reason.WRONG_PREDICATE_TYPE: "the signature is not a model signature",
    Reason.SUBJECT_MISMATCH: "the signature is for another name",
    Reason.MANIFEST_DIGEST_MISMATCH: "the signed manifest does not match its digest",
    Reason.EMPTY_MANIFEST: "the signed manifest lists no file",
    Reason.PATH_ESCAPE: "a path leaves the directory",
    Reason.INVALID_PATH: "a path is not canonical",
    Reason.DUPLICATE_ENTRY: "a file is listed twice",
    Reason.CASE_COLLISION: "two file names differ only by case",
    Reason.UNSUPPORTED_FILE: "the directory holds a file of an unsupported type",
    Reason.FILE_MISSING: "a signed file is missing",
    Reason.FILE_ADDED: "a file is not in the signed manifest",
    Reason.FILE_RENAMED: "a signed file was renamed",
    Reason.CASE_MISMATCH: "a file name differs from the signed one by case",
    Reason.FILE_SIZE_CHANGED: "a file's size differs from the signed one",
    Reason.FILE_MODIFIED: "a file's content differs from the signed one",
    Reason.IO_ERROR: "a file could not be read",
}
NO_TRUST_STORE = "no_trust_store"


def safe_verification_message(code: str) -> str:
    """A sentence for a verification reason code that holds no path or file name."""
    if code == NO_TRUST_STORE:
        return "no trust store is configured"
    return _SAFE.get(code, "verification failed")


def copies_root(data_dir: Path) -> Path:
    """Where verified private copies live: ``<data_dir>/verified-models``."""
    return data_dir / VERIFIED_DIRNAME


def _model_copy_dir(root: Path, model: str) -> Path:
    return root / quote(model, safe="") / "model"


def _adapter_copy_dir(root: Path, model: str, adapter: str) -> Path:
    return root / quote(model, safe="") / "lora" / quote(adapter, safe="")


async def _verify_copy(path: Path, store: TrustStore | None, name: str, dest: Path) -> VerifiedCopy:
    if store is None:
        raise VerificationError(Reason.UNTRUSTED_KEY, "no trust store is configured (trust.trust_store_dir)")
    return await asyncio.to_thread(copy_verified_model, path, store, name, dest)


def _code(exc: VerificationError, store: TrustStore | None) -> str:
    return NO_TRUST_STORE if store is None else exc.reason.value


async def verify_entry(entry: ModelEntry, store: TrustStore | None, allow_unsigned: bool, copies: Path) -> bool:
    """Verify a model (and then its adapters) before its engine may load it (fail closed).

    On success the entry's ``load_path`` is the verified copy under ``copies``. Returns True
    if the model may be loaded: verified, or failed with ``allow_unsigned`` (then marked
    UNSIGNED_ALLOWED, loaded from its own directory, and warned about loudly).
    """
    try:
        result = await _verify_copy(entry.path, store, entry.name, _model_copy_dir(copies, entry.name))
    except VerificationError as exc:
        code = _code(exc, store)
        detail = f"{code}: {exc.detail}"
        entry.verification_reason = code
        entry.verification_detail = detail
        if allow_unsigned:
            entry.verification = Verification.UNSIGNED_ALLOWED
            entry.load_path = entry.path
            log.warning(
                "UNVERIFIED_MODEL_SERVED",
                model=entry.name,
                reason=detail,
                note="--allow-unsigned-models is for development only",
            )
        else:
            entry.verification = Verification.FAILED
            entry.state = ModelState.FAILED
            entry.reason_code = "verification_failed"
            entry.state_reason = f"signature verification failed ({code}): {safe_verification_message(code)}"
            entry.state_detail = detail
            log.error("model_verification_failed", model=entry.name, reason=detail)
            return False
    else:
        v = result.verification
        entry.verification = Verification.VERIFIED
        entry.manifest_digest = v.manifest_digest
        entry.verification_detail = f"signed by {v.key_name} (key {v.key_id[:16]}), {v.files} files"
        entry.load_path = result.path
        log.info("model_verified", model=entry.name, manifest_digest=v.manifest_digest, key_id=v.key_id)
    for adapter in entry.adapters.values():
        await verify_adapter(entry.name, adapter, store, allow_unsigned, copies)
    return True


async def verify_adapter(
    model: str, adapter: AdapterEntry, store: TrustStore | None, allow_unsigned: bool, copies: Path
) -> bool:
    """Verify one LoRA adapter of ``model`` (signed for the adapter's name); True if servable."""
    try:
        result = await _verify_copy(adapter.path, store, adapter.name, _adapter_copy_dir(copies, model, adapter.name))
    except VerificationError as exc:
        code = _code(exc, store)
        adapter.verification_reason = code
        adapter.verification_detail = f"{code}: {exc.detail}"
        if allow_unsigned:
            adapter.verification = Verification.UNSIGNED_ALLOWED
            adapter.load_path = adapter.path
            log.warning(
                "UNVERIFIED_LORA_ADAPTER_SERVED",
                model=model,
                lora_adapter=adapter.name,
                reason=adapter.verification_detail,
                note="--allow-unsigned-models is for development only",
            )
            return True
        adapter.verification = Verification.FAILED
        adapter.load_path = None
        log.error(
            "lora_adapter_verification_failed",
            model=model,
            lora_adapter=adapter.name,
            reason=adapter.verification_detail,
        )
        return False
    v = result.verification
    adapter.verification = Verification.VERIFIED
    adapter.manifest_digest = v.manifest_digest
    adapter.verification_detail = f"signed by {v.key_name} (key {v.key_id[:16]}), {v.files} files"
    adapter.load_path = result.path
    log.info("lora_adapter_verified", model=model, lora_adapter=adapter.name, manifest_digest=v.manifest_digest)
    return True


async def verify_and_load(runtime: Runtime, entry: ModelEntry, store: TrustStore | None, copies: Path) -> None:
    """Verify ``entry`` and its adapters (each verification audited), then load exactly the
    verified files into its engine, or mark it FAILED."""
    allow = runtime.settings.trust.allow_unsigned_models
    ok = await verify_entry(entry, store, allow, copies)
    await runtime.audit_event(
        EventType.MODEL_VERIFIED,
        "OK" if ok else "FAILED_PRECONDITION",
        model=entry.name,
        manifest_digest=entry.manifest_digest or None,
        status=entry.verification.value,
        reason=entry.verification_reason or None,
        detail=entry.verification_detail,
    )
    if not ok:
        await runtime.mark(entry, ModelState.FAILED, entry.state_reason, entry.reason_code, entry.state_detail)
        return
    for adapter in entry.adapters.values():
        await runtime.audit_event(
            EventType.MODEL_VERIFIED,
            "OK" if adapter.servable else "FAILED_PRECONDITION",
            model=entry.name,
            manifest_digest=adapter.manifest_digest or None,
            lora_adapter=adapter.name,
            status=adapter.verification.value,
            reason=adapter.verification_reason or None,
            detail=adapter.verification_detail,
        )
    assert entry.engine is not None and entry.load_path is not None
    entry.engine.use_files(
        entry.load_path, {a.name: a.load_path for a in entry.adapters.values() if a.load_path is not None}
    )
    await runtime.load_model(entry)
