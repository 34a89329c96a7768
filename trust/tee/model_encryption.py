"""SM4-GCM encrypted model directories (``xinserve encrypt model``).

Layout of an encrypted directory::

    xinserve-encrypted.json   the manifest (below), plaintext
    <path>.sm4                one per plaintext file: trust.sm4 sealed blob (version ‖ nonce ‖ ct ‖ tag)

Manifest (canonical JSON, sorted keys)::

    {"format": "xinserve-encrypted-model/v1", "cipher": "SM4-GCM", "key_id": "<repo>/<type>/<tag>",
     "plaintext_manifest_digest": "sm3:<hex>",
     "files": [{"name": "<plaintext path>", "size": <int>, "sm3": "<hex of plaintext>"}, ...]}

Each file is sealed with a fresh random 96-bit nonce; the associated data is
``"xinserve-model-file/v1\\n" ‖ name ‖ "\\n" ‖ plaintext_manifest_digest``, so a blob moved to
another name or into another model does not open. ``plaintext_manifest_digest`` is the SM3 manifest
digest (trust.manifest) of the plaintext directory. Decryption checks every file's SM3 and size.
The SM2 model signature (trust.model_signing) is made over this encrypted directory, so it verifies
without the key. ``key_id`` names the KBS resource that holds the 16-byte SM4 key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trust import sm4
from trust.errors import DecryptionError, VerificationError
from trust.manifest import FileEntry, build_manifest, check_path, manifest_digest
from trust.model_signing import DEFAULT_IGNORE, SIGNATURE_FILENAME
from trust.sm3 import sm3_hex
from trust.tee.errors import TeeError, TeeReason
from trust.tee.kbs_client import check_resource_path

MANIFEST_FILENAME = "xinserve-encrypted.json"
FORMAT = "xinserve-encrypted-model/v1"
SUFFIX = ".sm4"
MAX_MANIFEST = 16 << 20


@dataclass(frozen=True)
class EncryptedModel:
    """A parsed encrypted-model manifest."""

    key_id: str
    plaintext_manifest_digest: str
    files: tuple[FileEntry, ...]

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "cipher": "SM4-GCM",
            "key_id": self.key_id,
            "plaintext_manifest_digest": self.plaintext_manifest_digest,
            "files": [{"name": f.name, "size": f.size, "sm3": f.digest} for f in self.files],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def file_aad(name: str, plaintext_manifest_digest: str) -> bytes:
    """The SM4-GCM associated data of one file."""
    return b"xinserve-model-file/v1\n" + name.encode() + b"\n" + plaintext_manifest_digest.encode()


def _bad(detail: str) -> TeeError:
    return TeeError(TeeReason.ENCRYPTED_MODEL, detail)


def is_encrypted(model_dir: str | os.PathLike[str]) -> bool:
    """True when ``model_dir`` holds an encrypted-model manifest."""
    return (Path(model_dir) / MANIFEST_FILENAME).is_file()


def read_manifest(model_dir: str | os.PathLike[str]) -> EncryptedModel:
    """Parse ``<model_dir>/xinserve-encrypted.json`` strictly; TeeError(encrypted_model) otherwise."""
    path = Path(model_dir) / MANIFEST_FILENAME
    try:
        if path.stat().st_size > MAX_MANIFEST:
            raise _bad("encrypted-model manifest larger than 16 MiB")
        doc: Any = json.loads(path.read_bytes())
    except OSError as exc:
        raise _bad(f"cannot read the encrypted-model manifest: {exc.strerror}") from None
    except (ValueError, RecursionError):
        raise _bad("encrypted-model manifest is not JSON") from None
    keys = {"format", "cipher", "key_id", "plaintext_manifest_digest", "files"}
    if not isinstance(doc, dict) or set(doc) != keys:
        raise _bad("encrypted-model manifest must hold exactly " + ", ".join(sorted(keys)))
    if doc["format"] != FORMAT or doc["cipher"] != "SM4-GCM":
        raise _bad("encrypted-model manifest is not format v1 / SM4-GCM")
    try:
        key_id = check_resource_path(doc["key_id"])
    except ValueError as exc:
        raise _bad(f"key_id: {exc}") from None
    digest = doc["plaintext_manifest_digest"]
    if not isinstance(digest, str) or not digest.startswith("sm3:") or len(digest) != 68:
        raise _bad("plaintext_manifest_digest is not sm3:<64 hex>")
    files = doc["files"]
    if not isinstance(files, list) or not files:
        raise _bad("files must be a non-empty list")
    entries = []
    try:
        for f in files:
            if not isinstance(f, dict) or set(f) != {"name", "size", "sm3"}:
                raise _bad("each file is {name, size, sm3}")
            size, hexdigest = f["size"], f["sm3"]
            if type(size) is not int or size < 0 or not isinstance(hexdigest, str) or len(hexdigest) != 64:
                raise _bad("file size or sm3 malformed")
            entries.append(FileEntry(check_path(f["name"]), size, hexdigest))
        if "sm3:" + manifest_digest(entries) != digest:
            raise _bad("plaintext_manifest_digest does not match the listed files")
    except VerificationError as exc:
        raise _bad(f"file list: {exc.detail}") from None
    return EncryptedModel(key_id, digest, tuple(entries))


def encrypt_model(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    key: bytes,
    key_id: str,
    ignore: Sequence[str] = DEFAULT_IGNORE,
) -> EncryptedModel:
    """Encrypt every file of ``source`` into the new (or empty) directory ``output``.

    The source's own signature file is skipped (the encrypted copy is signed on its own).
    Raises ValueError (bad key or key_id, output not empty), VerificationError (a source path that
    cannot be listed), OSError.
    """
    check_resource_path(key_id)
    if len(key) != sm4.KEY_SIZE:
        raise ValueError("an SM4 key is exactly 16 bytes")
    out = Path(output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory")
    src = Path(source)
    entries = build_manifest(src, [SIGNATURE_FILENAME, MANIFEST_FILENAME, *ignore])
    if not entries:
        raise ValueError(f"{src} holds no file to encrypt")
    digest = "sm3:" + manifest_digest(entries)
    out.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        target = out / (entry.name + SUFFIX)
        target.parent.mkdir(parents=True, exist_ok=True)
        plaintext = (src / entry.name).read_bytes()
        if sm3_hex(plaintext) != entry.digest:
            raise ValueError(f"{entry.name} changed while being encrypted")
        target.write_bytes(sm4.seal(key, plaintext, file_aad(entry.name, digest)))
    model = EncryptedModel(check_resource_path(key_id), digest, tuple(entries))
    (out / MANIFEST_FILENAME).write_bytes(model.to_json())
    return model


def decrypt_model(encrypted_dir: str | os.PathLike[str], key: bytes, target: str | os.PathLike[str]) -> EncryptedModel:
    """Decrypt ``encrypted_dir`` into the existing directory ``target`` (a private tmpfs).

    Raises TeeError(encrypted_model) for a malformed manifest, a missing blob, a wrong key, a blob
    that does not authenticate, or plaintext whose SM3 or size differs from the manifest; TeeError
    (bad_key) for a key that is not 16 bytes.
    """
    if len(key) != sm4.KEY_SIZE:
        raise TeeError(TeeReason.BAD_KEY, "the released key is not a 16-byte SM4 key")
    model = read_manifest(encrypted_dir)
    src, dst = Path(encrypted_dir), Path(target)
    for entry in model.files:
        try:
            sealed = (src / (entry.name + SUFFIX)).read_bytes()
        except OSError as exc:
            raise _bad(f"cannot read the encrypted {entry.name}: {exc.strerror}") from None
        try:
            plaintext = sm4.open_(key, sealed, file_aad(entry.name, model.plaintext_manifest_digest))
        except DecryptionError:
            raise _bad(f"{entry.name} does not decrypt with the released key (wrong key or altered file)") from None
        if len(plaintext) != entry.size or sm3_hex(plaintext) != entry.digest:
            raise _bad(f"{entry.name} decrypted to other content than the manifest lists")
        out = dst / entry.name
        out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(plaintext)
    return model
