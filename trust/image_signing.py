"""Sign and verify OCI container images by manifest digest.

What is signed is the digest a registry and a runtime name the image by: the descriptor that
``index.json`` of an OCI image layout points to, or the digest given on the command line. For a
multi-platform image that is the *image index* (which pins every platform manifest by digest, so the
signature covers all of them); for a single-platform image it is the image manifest. The runtime
check must compare against that same digest (``repo@sha256:...`` as pulled), not the platform
manifest a multi-arch pull resolves to — see docs/signing.md.

Statement::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "<image reference without digest>",
                  "digest": {"sha256": "<hex>", "sm3": "<hex, when signed from a layout>"}}],
     "predicateType": "https://xinserve.dev/image-signing/sm/v1",
     "predicate": {"mediaType": "<manifest or index media type, when known>"}}

From a layout the signature can also be attached as an OCI 1.1 referrer: an image manifest with
``artifactType`` :data:`SIGNATURE_ARTIFACT_TYPE`, the empty config, one layer holding the DSSE
envelope, and ``subject`` = the signed descriptor; it is listed in ``index.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from trust.dsse import INTOTO_PAYLOAD_TYPE, parse_envelope, sign_envelope, strict_json, verify_envelope
from trust.errors import Reason, SigningError, VerificationError
from trust.model_signing import STATEMENT_TYPE
from trust.sm2 import Sm2PrivateKey
from trust.sm3 import sm3
from trust.trust_store import TrustStore

IMAGE_PREDICATE_TYPE = "https://xinserve.dev/image-signing/sm/v1"
SIGNATURE_ARTIFACT_TYPE = "application/vnd.xinserve.signature.v1+dsse"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
_DIGEST_RE = re.compile(r"sha256:([0-9a-f]{64})")
_MAX_JSON = 16 << 20


@dataclass(frozen=True)
class ImageVerification:
    reference: str
    digest: str  # "sha256:<hex>"
    key_id: str
    key_name: str


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str  # "sha256:<hex>"
    size: int
    ref_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def parse_digest(digest: str) -> str:
    """The hex of a ``sha256:<64 hex>`` digest; ValueError otherwise."""
    m = _DIGEST_RE.fullmatch(digest or "")
    if not m:
        raise ValueError("image digest must be sha256:<64 lower-case hex>")
    return m.group(1)


def _statement(reference: str, sha256_hex: str, sm3_hex: str | None, media_type: str | None) -> bytes:
    digest = {"sha256": sha256_hex}
    if sm3_hex:
        digest["sm3"] = sm3_hex
    predicate: dict[str, Any] = {}
    if media_type:
        predicate["mediaType"] = media_type
    st = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": reference, "digest": digest}],
        "predicateType": IMAGE_PREDICATE_TYPE,
        "predicate": predicate,
    }
    return json.dumps(st, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign_image(
    digest: str,
    reference: str,
    private_key: Sm2PrivateKey,
    *,
    media_type: str | None = None,
    manifest_bytes: bytes | None = None,
) -> bytes:
    """A DSSE envelope signing image ``reference`` at ``digest`` (sha256:...)."""
    sha = parse_digest(digest)
    if not reference or "@" in reference or len(reference) > 512:
        raise ValueError("reference must be a repository[:tag] without a digest")
    sm3_hex = None
    if manifest_bytes is not None:
        if hashlib.sha256(manifest_bytes).hexdigest() != sha:
            raise ValueError("manifest bytes do not match the digest")
        sm3_hex = sm3(manifest_bytes).hex()
    return sign_envelope(_statement(reference, sha, sm3_hex, media_type), private_key)


def verify_image(
    envelope: bytes,
    trust_store: TrustStore,
    digest: str,
    *,
    reference: str | None = None,
    manifest_bytes: bytes | None = None,
    now: datetime | None = None,
) -> ImageVerification:
    """Verify ``envelope`` signs ``digest`` (and ``reference`` if given) with a trusted key."""
    try:
        sha = parse_digest(digest)
    except ValueError as e:
        raise VerificationError(Reason.SUBJECT_MISMATCH, str(e)) from None
    env = parse_envelope(envelope)
    key = verify_envelope(env, trust_store, INTOTO_PAYLOAD_TYPE, now)
    st: Any = strict_json(env.payload, "statement", Reason.MALFORMED_STATEMENT)
    bad = Reason.MALFORMED_STATEMENT
    if not isinstance(st, dict) or set(st) != {"_type", "subject", "predicateType", "predicate"}:
        raise VerificationError(bad, "statement must hold exactly _type, subject, predicateType, predicate")
    if st["_type"] != STATEMENT_TYPE:
        raise VerificationError(bad, f"_type is not {STATEMENT_TYPE}")
    if st["predicateType"] != IMAGE_PREDICATE_TYPE:
        raise VerificationError(Reason.WRONG_PREDICATE_TYPE, "not an image signature")
    subj = st["subject"]
    if (
        not isinstance(subj, list)
        or len(subj) != 1
        or not isinstance(subj[0], dict)
        or set(subj[0]) != {"name", "digest"}
        or not isinstance(subj[0]["name"], str)
        or not isinstance(subj[0]["digest"], dict)
        or not isinstance(subj[0]["digest"].get("sha256"), str)
    ):
        raise VerificationError(bad, "subject must be one {name, digest: {sha256[, sm3]}}")
    if subj[0]["digest"]["sha256"] != sha:
        raise VerificationError(Reason.SUBJECT_MISMATCH, f"signature is for sha256:{subj[0]['digest']['sha256'][:16]}…")
    if reference is not None and subj[0]["name"] != reference:
        raise VerificationError(Reason.SUBJECT_MISMATCH, f"signature is for {subj[0]['name'][:100]!r}")
    if manifest_bytes is not None:
        if hashlib.sha256(manifest_bytes).hexdigest() != sha:
            raise VerificationError(Reason.FILE_MODIFIED, "manifest blob does not match its digest")
        sig_sm3 = subj[0]["digest"].get("sm3")
        if sig_sm3 is not None and sig_sm3 != sm3(manifest_bytes).hex():
            raise VerificationError(Reason.SUBJECT_MISMATCH, "SM3 of the manifest differs from the signed one")
    return ImageVerification(subj[0]["name"], f"sha256:{sha}", key.key_id, key.name)


# --- OCI image layout ----------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise VerificationError(Reason.IO_ERROR, f"cannot read {what}: {e.strerror}") from None
    if len(data) > _MAX_JSON:
        raise VerificationError(Reason.MALFORMED_ENVELOPE, f"{what} is too large")
    return strict_json(data, what, Reason.MALFORMED_ENVELOPE)


def _blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / parse_digest(digest)


def read_blob(layout: Path, digest: str) -> bytes:
    try:
        data = _blob_path(layout, digest).read_bytes()
    except (OSError, ValueError) as e:
        raise VerificationError(Reason.FILE_MISSING, f"blob {digest[:23]}… not readable: {e}") from None
    if hashlib.sha256(data).hexdigest() != parse_digest(digest):
        raise VerificationError(Reason.FILE_MODIFIED, f"blob {digest[:23]}… does not match its digest")
    return data


def _descriptors(layout: Path) -> list[tuple[Descriptor, dict[str, Any]]]:
    index = _read_json(layout / "index.json", "index.json")
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        raise VerificationError(Reason.MALFORMED_ENVELOPE, "index.json has no manifests list")
    out = []
    for m in index["manifests"]:
        try:
            parse_digest(m["digest"])
            ann = m.get("annotations") or {}
            d = Descriptor(str(m["mediaType"]), m["digest"], int(m["size"]), ann.get(REF_NAME_ANNOTATION))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise VerificationError(Reason.MALFORMED_ENVELOPE, "index.json holds a malformed descriptor") from None
        out.append((d, m))
    return out


def select_image(layout: str | os.PathLike[str], ref_name: str | None = None) -> Descriptor:
    """The image descriptor of ``index.json`` (by ``ref.name`` annotation if several)."""
    root = Path(layout)
    images = [d for d, raw in _descriptors(root) if raw.get("artifactType") != SIGNATURE_ARTIFACT_TYPE]
    if ref_name is not None:
        images = [d for d in images if d.ref_name == ref_name]
    if len(images) != 1:
        which = f" with ref.name {ref_name!r}" if ref_name else ""
        raise VerificationError(
            Reason.SUBJECT_MISMATCH, f"index.json lists {len(images)} images{which}; pick one with --ref-name"
        )
    return images[0]


def sign_image_layout(
    layout: str | os.PathLike[str],
    private_key: Sm2PrivateKey,
    reference: str,
    *,
    ref_name: str | None = None,
    attach: bool = False,
) -> tuple[bytes, Descriptor]:
    """Sign the image an OCI layout's index.json points to; optionally attach as a referrer."""
    root = Path(layout)
    try:
        desc = select_image(root, ref_name)
        manifest = read_blob(root, desc.digest)
    except VerificationError as e:
        raise SigningError(e.reason.value, e.detail) from None
    envelope = sign_image(desc.digest, reference, private_key, media_type=desc.media_type, manifest_bytes=manifest)
    if attach:
        _attach(root, desc, envelope, private_key.public_key().key_id)
    return envelope, desc


def _write_blob(root: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    path = root / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _atomic_write(path, data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _attach(root: Path, subject: Descriptor, envelope: bytes, key_id: str) -> None:
    config = {"mediaType": OCI_EMPTY, **_write_blob(root, b"{}")}
    layer = {"mediaType": DSSE_MEDIA_TYPE, **_write_blob(root, envelope)}
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": SIGNATURE_ARTIFACT_TYPE,
        "config": config,
        "layers": [layer],
        "subject": subject.to_json(),
        "annotations": {"dev.xinserve.signature.key_id": key_id},
    }
    mbytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8")
    mdesc = {"mediaType": OCI_MANIFEST, "artifactType": SIGNATURE_ARTIFACT_TYPE, **_write_blob(root, mbytes)}
    index_path = root / "index.json"
    index = json.loads(index_path.read_text("utf-8"))
    index["manifests"].append(mdesc)
    _atomic_write(index_path, (json.dumps(index, indent=2) + "\n").encode("utf-8"))


def find_attached_signatures(layout: str | os.PathLike[str], subject_digest: str) -> list[bytes]:
    """Envelopes attached as referrers of ``subject_digest`` in the layout's index.json."""
    root = Path(layout)
    out: list[bytes] = []
    for d, raw in _descriptors(root):
        if raw.get("artifactType") != SIGNATURE_ARTIFACT_TYPE:
            continue
        m = strict_json(read_blob(root, d.digest), "referrer manifest", Reason.MALFORMED_ENVELOPE)
        try:
            if m["subject"]["digest"] != subject_digest:
                continue
            layers = [x for x in m["layers"] if x["mediaType"] == DSSE_MEDIA_TYPE]
        except (KeyError, TypeError):
            raise VerificationError(Reason.MALFORMED_ENVELOPE, "malformed signature referrer") from None
        out.extend(read_blob(root, x["digest"]) for x in layers)
    return out


def verify_image_layout(
    layout: str | os.PathLike[str],
    trust_store: TrustStore,
    *,
    envelope: bytes | None = None,
    reference: str | None = None,
    ref_name: str | None = None,
    now: datetime | None = None,
) -> ImageVerification:
    """Verify the layout's image with ``envelope`` or, if None, its attached referrer signatures."""
    root = Path(layout)
    desc = select_image(root, ref_name)
    manifest = read_blob(root, desc.digest)
    candidates = [envelope] if envelope is not None else find_attached_signatures(root, desc.digest)
    if not candidates:
        raise VerificationError(Reason.UNSIGNED, f"no signature attached to {desc.digest[:23]}…")
    errors: list[VerificationError] = []
    for env in candidates:
        try:
            return verify_image(env, trust_store, desc.digest, reference=reference, manifest_bytes=manifest, now=now)
        except VerificationError as e:
            errors.append(e)
    raise errors[0]
