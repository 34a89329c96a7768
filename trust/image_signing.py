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

From a layout, verification covers the whole image, not only the signed digest: the signed
manifest (or index, and every manifest it lists) is read, and every blob it references (config
and layers) must exist with the descriptor's size and digest (``trust.oci_layout``), so a
flipped byte in a layer is refused naming that layer's digest.

From a layout the signature can also be attached as an OCI 1.1 referrer: an image manifest with
``artifactType`` :data:`SIGNATURE_ARTIFACT_TYPE`, the empty config, one layer holding the DSSE
envelope, and ``subject`` = the signed descriptor; it is listed in ``index.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass, replace
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
from trust.model_signing import STATEMENT_TYPE
from trust.oci_layout import (
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    OciLayout,
    SymlinkError,
    open_layout_file,
    parse_descriptor,
)
from trust.sm2 import Sm2PrivateKey
from trust.sm3 import sm3
from trust.trust_store import TrustStore

IMAGE_PREDICATE_TYPE = "https://xinserve.dev/image-signing/sm/v1"
SIGNATURE_ARTIFACT_TYPE = "application/vnd.xinserve.signature.v1+dsse"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
_DIGEST_RE = re.compile(r"sha256:([0-9a-f]{64})")
_MAX_JSON = 16 << 20


__all__ = [
    "OCI_INDEX",
    "OCI_MANIFEST",
    "Descriptor",
    "ImageVerification",
    "find_attached_signatures",
    "parse_digest",
    "select_image",
    "sign_image",
    "sign_image_layout",
    "signed_digest_unverified",
    "verify_image",
    "verify_image_layout",
]


@dataclass(frozen=True)
class ImageVerification:
    """A verified image signature. ``blobs``/``total_bytes``: the distinct blobs (manifests,
    config, layers) checked from a layout and their size in bytes; 0 when only a digest was given."""

    reference: str
    digest: str  # "sha256:<hex>"
    key_id: str
    key_name: str
    blobs: int = 0
    total_bytes: int = 0


def parse_digest(digest: str) -> str:
    """The hex of a ``sha256:<64 hex>`` digest; ValueError otherwise."""
    m = _DIGEST_RE.fullmatch(digest or "")
    if not m:
        raise ValueError("image digest must be sha256:<64 lower-case hex>")
    return m.group(1)


def signed_digest_unverified(envelope: bytes) -> str | None:
    """The ``sha256:<hex>`` an image envelope's statement names, *without* verifying anything.

    For reports only (what a refused signature claimed); None when it cannot be read.
    """
    try:
        st = json.loads(parse_envelope(envelope).payload)
        hex_ = st["subject"][0]["digest"]["sha256"]
    except (VerificationError, ValueError, KeyError, IndexError, TypeError, RecursionError):
        return None
    return f"sha256:{hex_}" if isinstance(hex_, str) and re.fullmatch(r"[0-9a-f]{64}", hex_) else None


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


def _index_descriptors(root: Path) -> list[tuple[Descriptor, dict[str, Any]]]:
    """The descriptors of ``index.json`` (the layout's entry point, not content-addressed)."""
    try:
        fd = open_layout_file(root, "index.json")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise VerificationError(Reason.UNSUPPORTED_FILE, "index.json is not a regular file")
        with os.fdopen(fd, "rb") as f:
            data = f.read(_MAX_JSON + 1)
    except SymlinkError:
        raise VerificationError(Reason.UNSUPPORTED_FILE, "index.json is a symbolic link, not a regular file") from None
    except OSError as e:
        raise VerificationError(Reason.IO_ERROR, f"cannot read index.json: {e.strerror}") from None
    if len(data) > _MAX_JSON:
        raise VerificationError(Reason.MALFORMED_IMAGE, f"index.json is over {_MAX_JSON} bytes")
    index = strict_json(data, "index.json", Reason.MALFORMED_IMAGE)
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        raise VerificationError(Reason.MALFORMED_IMAGE, "index.json has no manifests list")
    return [(parse_descriptor(m, f"index.json manifests[{i}]"), m) for i, m in enumerate(index["manifests"])]


def select_image(layout: str | os.PathLike[str], ref_name: str | None = None) -> Descriptor:
    """The image descriptor of ``index.json`` (by ``ref.name`` annotation if several).

    Raises:
        VerificationError: ``io_error`` (no readable index.json), ``malformed_image``,
            ``unsupported_digest``, ``subject_mismatch`` (no or several images match).
    """
    root = Path(layout)
    images = [d for d, raw in _index_descriptors(root) if raw.get("artifactType") != SIGNATURE_ARTIFACT_TYPE]
    if ref_name is not None:
        images = [d for d in images if d.ref_name == ref_name]
    if len(images) != 1:
        which = f" with ref.name {ref_name!r}" if ref_name else ""
        raise VerificationError(
            Reason.SUBJECT_MISMATCH, f"index.json lists {len(images)} images{which}; pick one with --ref-name"
        )
    return images[0]


def _signable(desc: Descriptor) -> None:
    if not _DIGEST_RE.fullmatch(desc.digest):
        raise VerificationError(
            Reason.UNSUPPORTED_DIGEST, f"{desc.digest}: image signatures name a sha256 digest (as registries do)"
        )


def sign_image_layout(
    layout: str | os.PathLike[str],
    private_key: Sm2PrivateKey,
    reference: str,
    *,
    ref_name: str | None = None,
    attach: bool = False,
) -> tuple[bytes, Descriptor]:
    """Sign the image an OCI layout's index.json points to; optionally attach as a referrer.

    The whole image is checked first (every blob by size and digest): a broken layout is not signed.

    Raises:
        SigningError: the layout's image does not verify (reason codes as in ``trust.oci_layout``).
    """
    root = Path(layout)
    try:
        desc = select_image(root, ref_name)
        _signable(desc)
        oci = OciLayout(root)
        manifest = oci.read_blob(desc, "signed manifest")
        oci.verify_tree(desc)
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
    """Envelopes attached as referrers of ``subject_digest`` in the layout's index.json.

    Raises:
        VerificationError: a referrer manifest or envelope blob is malformed, missing or altered.
    """
    root = Path(layout)
    oci = OciLayout(root)
    out: list[bytes] = []
    for d, raw in _index_descriptors(root):
        if raw.get("artifactType") != SIGNATURE_ARTIFACT_TYPE:
            continue
        m = oci.read_json_blob(d, "signature referrer")
        try:
            if m["subject"]["digest"] != subject_digest:
                continue
            layers = [
                parse_descriptor(x, f"layer of signature referrer {d.digest}")
                for x in m["layers"]
                if x["mediaType"] == DSSE_MEDIA_TYPE
            ]
        except (KeyError, TypeError):
            raise VerificationError(Reason.MALFORMED_IMAGE, f"signature referrer {d.digest} is malformed") from None
        out.extend(oci.read_blob(x, "signature envelope", limit=MAX_ENVELOPE_SIZE) for x in layers)
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
    """Verify the layout's image with ``envelope`` or, if None, its attached referrer signatures;
    then every blob the signed manifest or index references, recursively (``trust.oci_layout``).

    Raises:
        VerificationError: the signature's reason codes (as :func:`verify_image`), or the
            layout's: ``file_missing``, ``file_size_changed``, ``file_modified``,
            ``unsupported_file``, ``malformed_image``, ``unsupported_digest``, ``io_error``;
            the detail names the blob's digest.
    """
    root = Path(layout)
    oci = OciLayout(root)
    desc = select_image(root, ref_name)
    _signable(desc)
    manifest = oci.read_blob(desc, "signed manifest")
    candidates = [envelope] if envelope is not None else find_attached_signatures(root, desc.digest)
    if not candidates:
        raise VerificationError(Reason.UNSIGNED, f"no signature attached to {desc.digest}")
    errors: list[VerificationError] = []
    result: ImageVerification | None = None
    for env in candidates:
        try:
            result = verify_image(env, trust_store, desc.digest, reference=reference, manifest_bytes=manifest, now=now)
            break
        except VerificationError as e:
            errors.append(e)
    if result is None:
        raise errors[0]
    tree = oci.verify_tree(desc)
    return replace(result, blobs=tree.blobs, total_bytes=tree.total_bytes)
