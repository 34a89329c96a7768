"""Helpers shared by the trust tests (a module of its own: ``conftest`` names clash across test dirs)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from trust.image_signing import OCI_INDEX, OCI_MANIFEST


def make_model(root: Path) -> Path:
    """A small model-like directory: nested files, an empty file, a non-ASCII name."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (root / "tokenizer.json").write_text('{"model": {}}')
    (root / "model-00001-of-00002.safetensors").write_bytes(os.urandom(300_000))
    (root / "model-00002-of-00002.safetensors").write_bytes(os.urandom(200_000))
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "empty.txt").write_bytes(b"")
    (root / "sub" / "说明.md").write_text("模型说明")
    return root


def blob(root: Path, data: bytes) -> dict:
    d = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / d).write_bytes(data)
    return {"digest": f"sha256:{d}", "size": len(data)}


def make_layout(root: Path, multi_platform: bool = False) -> str:
    root.mkdir()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    config = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **blob(root, b'{"architecture":"amd64"}'),
    }
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(root, b"layer bytes")}
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [layer]})
    mdesc = {"mediaType": OCI_MANIFEST, **blob(root, manifest.encode())}
    top = mdesc
    if multi_platform:
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [{**mdesc, "platform": {"os": "linux", "architecture": "amd64"}}],
            }
        )
        top = {"mediaType": OCI_INDEX, **blob(root, index.encode())}
    top["annotations"] = {"org.opencontainers.image.ref.name": "1.0"}
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return top["digest"]
