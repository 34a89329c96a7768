"""Sign and verify model directories: a detached DSSE envelope over an in-toto Statement v1.

The envelope lives in the model directory as :data:`SIGNATURE_FILENAME`. Its payload::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "<model name>", "digest": {"sm3": "<manifest digest>"}}],
     "predicateType": "https://xinserve.dev/model-signing/sm/v1",
     "predicate": {"serialization": {"method": "files", "hash_type": "sm3",
                                      "allow_symlinks": true, "ignore_paths": [...]},
                   "resources": [{"name", "size", "algorithm": "sm3", "digest"}, ...]}}

The structure follows OpenSSF model-signing v1 with SM3 in place of SHA-256 and SM2 in place of
ECDSA P-256. Verification order: envelope → signature and key trust (cheap) → statement → manifest
canonical form and digest → directory listing → sizes → SM3 of every file (parallel threads).
"""

from __future__ import annotations

import json
import os
import stat as _stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from trust.dsse import (
    INTOTO_PAYLOAD_TYPE,
    MAX_ENVELOPE_SIZE,
    parse_envelope,
    sign_envelope,
    strict_json,
    verify_envelope,
)
from trust.errors import Reason, SigningError, VerificationError
from trust.manifest import (
    DiskFile,
    FileEntry,
    canonical_entries,
    canonical_json,
    entries_from_json,
    hash_files,
    manifest_digest,
    scan,
)
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore

SIGNATURE_FILENAME = "xinserve-model.sig.dsse.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MODEL_PREDICATE_TYPE = "https://xinserve.dev/model-signing/sm/v1"
DEFAULT_IGNORE: tuple[str, ...] = (".git/", ".cache/huggingface/")

ProgressFn = Callable[[int], None]


@dataclass(frozen=True)
class ModelVerification:
    """A model that verified: what was proven and by whom."""

    model_name: str
    manifest_digest: str  # "sm3:<hex>"
    key_id: str
    key_name: str
    files: int
    total_bytes: int


def _statement(model_name: str, entries: Sequence[FileEntry], ignore: Sequence[str]) -> bytes:
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sm3": manifest_digest(entries)}}],
        "predicateType": MODEL_PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": "sm3",
                "allow_symlinks": True,
                "ignore_paths": list(ignore),
            },
            "resources": [e.to_json() for e in entries],
        },
    }
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _effective_ignore(ignore: Sequence[str]) -> list[str]:
    out = [SIGNATURE_FILENAME]
    for pat in ignore:
        if not isinstance(pat, str) or not pat or pat.startswith("/") or "\x00" in pat:
            raise ValueError(f"bad ignore pattern {pat!r}")
        if pat not in out:
            out.append(pat)
    return out


def sign_model(
    model_dir: str | os.PathLike[str],
    private_key: Sm2PrivateKey,
    model_name: str,
    *,
    ignore: Sequence[str] = DEFAULT_IGNORE,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    on_total: Callable[[int], None] | None = None,
) -> Path:
    """Hash ``model_dir``, sign its manifest, write the envelope into it; return the envelope path.

    Raises SigningError(reason, detail) when the directory cannot be signed (nothing to sign, a path
    that escapes, an unreadable file).
    """
    if not isinstance(model_name, str) or not model_name or len(model_name) > 256:
        raise SigningError("invalid_name", "model name must be 1 to 256 characters")
    root = Path(model_dir)
    patterns = _effective_ignore(ignore)
    try:
        files = scan(root, patterns)
        if on_total is not None:
            on_total(sum(f.size for f in files))
        digests = hash_files(files, jobs, progress)
        entries = canonical_entries(FileEntry(f.name, digests[f.name][1], digests[f.name][0]) for f in files)
    except VerificationError as e:
        raise SigningError(e.reason.value, e.detail) from None
    if not entries:
        raise SigningError(Reason.EMPTY_MANIFEST.value, f"{root} holds no file to sign")
    envelope = sign_envelope(_statement(model_name, entries, patterns), private_key)
    out = root / SIGNATURE_FILENAME
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".xinserve-sig.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(envelope)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _read_envelope(root: Path) -> bytes:
    path = root / SIGNATURE_FILENAME
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise VerificationError(Reason.UNSIGNED, f"no {SIGNATURE_FILENAME} in {root}") from None
    except OSError as e:
        raise VerificationError(Reason.IO_ERROR, f"cannot stat {path}: {e.strerror}") from None
    if not _stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENVELOPE_SIZE:
        raise VerificationError(Reason.MALFORMED_ENVELOPE, f"{SIGNATURE_FILENAME} is not a regular file of sane size")
    try:
        return path.read_bytes()
    except OSError as e:
        raise VerificationError(Reason.IO_ERROR, f"cannot read {path}: {e.strerror}") from None


def parse_model_statement(payload: bytes) -> tuple[str, str, list[FileEntry], list[str]]:
    """(model name, manifest digest hex, entries, ignore patterns) from a statement; strict."""
    bad = Reason.MALFORMED_STATEMENT
    st: Any = strict_json(payload, "statement", bad)
    if not isinstance(st, dict) or set(st) != {"_type", "subject", "predicateType", "predicate"}:
        raise VerificationError(bad, "statement must hold exactly _type, subject, predicateType, predicate")
    if st["_type"] != STATEMENT_TYPE:
        raise VerificationError(bad, f"_type is not {STATEMENT_TYPE}")
    if st["predicateType"] != MODEL_PREDICATE_TYPE:
        raise VerificationError(
            Reason.WRONG_PREDICATE_TYPE,
            f"predicateType {str(st['predicateType'])[:80]!r} is not a model signature",
        )
    subj = st["subject"]
    if (
        not isinstance(subj, list)
        or len(subj) != 1
        or not isinstance(subj[0], dict)
        or set(subj[0]) != {"name", "digest"}
        or not isinstance(subj[0]["name"], str)
        or not isinstance(subj[0]["digest"], dict)
        or set(subj[0]["digest"]) != {"sm3"}
        or not isinstance(subj[0]["digest"]["sm3"], str)
    ):
        raise VerificationError(bad, "subject must be one {name, digest: {sm3}}")
    pred = st["predicate"]
    if not isinstance(pred, dict) or set(pred) != {"serialization", "resources"}:
        raise VerificationError(bad, "predicate must hold exactly serialization and resources")
    ser = pred["serialization"]
    if (
        not isinstance(ser, dict)
        or ser.get("method") != "files"
        or ser.get("hash_type") != "sm3"
        or set(ser) != {"method", "hash_type", "allow_symlinks", "ignore_paths"}
        or not isinstance(ser["ignore_paths"], list)
        or not all(isinstance(p, str) for p in ser["ignore_paths"])
    ):
        raise VerificationError(bad, "serialization must be files/sm3 with a list of ignore_paths")
    try:
        ignore = _effective_ignore(ser["ignore_paths"])
    except ValueError as e:
        raise VerificationError(bad, str(e)) from None
    entries = entries_from_json(pred["resources"])
    return subj[0]["name"], subj[0]["digest"]["sm3"], entries, ignore


@dataclass(frozen=True)
class SignedManifest:
    """A model signature that verified (envelope, key trust, statement), before any file is read.

    ``digest`` is the hex SM3 of the manifest; ``entries`` the signed files in canonical order;
    ``ignore`` the effective ignore patterns (the signature file included).
    """

    model_name: str
    digest: str
    entries: list[FileEntry]
    ignore: list[str]
    key_id: str
    key_name: str

    def verification(self) -> ModelVerification:
        """The :class:`ModelVerification` this manifest proves once every file matched it."""
        return ModelVerification(
            model_name=self.model_name,
            manifest_digest=f"sm3:{self.digest}",
            key_id=self.key_id,
            key_name=self.key_name,
            files=len(self.entries),
            total_bytes=sum(e.size for e in self.entries),
        )


def read_signed_manifest(
    model_dir: str | os.PathLike[str],
    trust_store: TrustStore,
    model_name: str | None = None,
    *,
    now: datetime | None = None,
) -> SignedManifest:
    """Verify ``model_dir``'s envelope, its signer's trust and its statement (no file is hashed).

    Raises VerificationError(reason, detail): unsigned, malformed_envelope, bad_signature,
    untrusted_key, revoked_key, key_expired, malformed_statement, subject_mismatch,
    empty_manifest, manifest_digest_mismatch, io_error.
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise VerificationError(Reason.IO_ERROR, f"{root} is not a directory")
    envelope = parse_envelope(_read_envelope(root))
    key = verify_envelope(envelope, trust_store, INTOTO_PAYLOAD_TYPE, now)
    name, digest, entries, ignore = parse_model_statement(envelope.payload)
    if model_name is not None and name != model_name:
        raise VerificationError(Reason.SUBJECT_MISMATCH, f"signed for model {name[:80]!r}, not {model_name!r}")
    if not entries:
        raise VerificationError(Reason.EMPTY_MANIFEST, "the signed manifest lists no file")
    if manifest_digest(entries) != digest:
        raise VerificationError(Reason.MANIFEST_DIGEST_MISMATCH, "subject digest is not SM3 of the manifest")
    return SignedManifest(name, digest, entries, ignore, key.key_id, key.name)


def check_listing(model_dir: str | os.PathLike[str], signed: SignedManifest) -> dict[str, DiskFile]:
    """The directory's files (after the signed ignore rules), which must be exactly the signed
    ones with the signed sizes; name -> file.

    Raises VerificationError: file_missing, file_added, file_renamed, case_mismatch,
    file_size_changed, and scan's path_escape, unsupported_file, invalid_path, io_error.
    """
    on_disk = {f.name: f for f in scan(Path(model_dir), signed.ignore)}
    _compare_listing({e.name: e for e in signed.entries}, on_disk)
    for e in signed.entries:
        if on_disk[e.name].size != e.size:
            raise VerificationError(
                Reason.FILE_SIZE_CHANGED, f"{e.name}: {on_disk[e.name].size} bytes, signed {e.size}"
            )
    return on_disk


def verify_model(
    model_dir: str | os.PathLike[str],
    trust_store: TrustStore,
    model_name: str | None = None,
    *,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    on_total: Callable[[int], None] | None = None,
    now: datetime | None = None,
) -> ModelVerification:
    """Verify ``model_dir`` against ``trust_store``; raise VerificationError(reason, detail).

    Blocking (hashes every byte): call it from a worker thread in async code. ``on_total(n)`` is
    called once with the number of bytes about to be hashed (to size a progress bar).
    """
    signed = read_signed_manifest(model_dir, trust_store, model_name, now=now)
    on_disk = check_listing(model_dir, signed)
    entries = signed.entries
    if on_total is not None:
        on_total(sum(e.size for e in entries))
    hashed = hash_files([on_disk[e.name] for e in entries], jobs, progress)
    for e in entries:
        got_digest, got_size = hashed[e.name]
        if got_size != e.size:
            raise VerificationError(Reason.FILE_SIZE_CHANGED, f"{e.name} changed size while being verified")
        if got_digest != e.digest:
            raise VerificationError(Reason.FILE_MODIFIED, f"{e.name}: SM3 differs from the signed manifest")
    return signed.verification()


def _compare_listing(expected: dict[str, FileEntry], on_disk: dict[str, DiskFile]) -> None:
    missing = sorted(set(expected) - set(on_disk))
    added = sorted(set(on_disk) - set(expected))
    if not missing and not added:
        return
    if len(missing) == 1 and len(added) == 1:
        m, a = expected[missing[0]], on_disk[added[0]]
        if m.name.casefold() == a.name.casefold():
            raise VerificationError(Reason.CASE_MISMATCH, f"{a.name!r} is signed as {m.name!r}")
        if m.size == a.size and hash_files([a], 1)[a.name][0] == m.digest:
            raise VerificationError(Reason.FILE_RENAMED, f"{m.name!r} was renamed to {a.name!r}")

    def show(names: list[str]) -> str:
        return ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    if missing:
        extra = f"; also added: {show(added)}" if added else ""
        raise VerificationError(Reason.FILE_MISSING, f"missing: {show(missing)}{extra}")
    raise VerificationError(Reason.FILE_ADDED, f"not in the signed manifest: {show(added)}")


__all__ = [
    "DEFAULT_IGNORE",
    "MODEL_PREDICATE_TYPE",
    "SIGNATURE_FILENAME",
    "ModelVerification",
    "SignedManifest",
    "canonical_json",
    "check_listing",
    "read_signed_manifest",
    "sign_model",
    "verify_model",
    "verify_model_async",
]


async def verify_model_async(
    model_dir: str | os.PathLike[str],
    trust_store: TrustStore,
    model_name: str | None = None,
    **kwargs: Any,
) -> ModelVerification:
    """:func:`verify_model` in a worker thread, for asyncio callers (the event loop never blocks)."""
    import asyncio

    return await asyncio.to_thread(verify_model, model_dir, trust_store, model_name, **kwargs)
