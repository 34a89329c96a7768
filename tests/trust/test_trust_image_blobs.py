"""An OCI layout is verified as a whole: every blob the signed manifest or index references.

The layouts are built here the way image builders write them (OCI image spec v1.1): gzip'd tar
layers made with ``tarfile``, a config, image manifests, image indexes (nested too), all under
``blobs/<alg>/<hex>`` with ``index.json`` pointing at the image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trust.errors import Reason, SigningError, VerificationError
from trust.image_signing import OCI_INDEX, OCI_MANIFEST, sign_image, sign_image_layout, verify_image_layout
from trust.oci_layout import MAX_DEPTH, MAX_JSON_BYTES
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore

LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
REF = "registry.example.cn/xinserve:1.0"


def tar_layer(files: dict[str, bytes]) -> bytes:
    """A gzip'd tar archive holding ``files`` (what a layer blob is)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


@dataclass
class Layout:
    root: Path
    top: dict = field(default_factory=dict)
    layers: list[dict] = field(default_factory=list)
    configs: list[dict] = field(default_factory=list)
    manifests: list[dict] = field(default_factory=list)

    def blob(self, data: bytes, media_type: str, alg: str = "sha256") -> dict:
        hex_ = hashlib.new(alg, data).hexdigest()
        d = self.root / "blobs" / alg
        d.mkdir(parents=True, exist_ok=True)
        (d / hex_).write_bytes(data)
        return {"mediaType": media_type, "digest": f"{alg}:{hex_}", "size": len(data)}

    def path(self, desc: dict) -> Path:
        alg, hex_ = desc["digest"].split(":")
        return self.root / "blobs" / alg / hex_

    def manifest(self, arch: str, layer_alg: str = "sha256") -> dict:
        config = self.blob(json.dumps({"architecture": arch, "os": "linux"}).encode(), CONFIG_TYPE)
        layers = [
            self.blob(tar_layer({"etc/os-release": f"ID=test-{arch}\n".encode()}), LAYER_TYPE),
            self.blob(
                tar_layer({"app/server.py": os.urandom(4096), "app/model.bin": os.urandom(70_000)}),
                LAYER_TYPE,
                layer_alg,
            ),
        ]
        body = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": layers}
        desc = self.blob(json.dumps(body).encode(), OCI_MANIFEST)
        self.configs.append(config)
        self.layers.extend(layers)
        self.manifests.append(desc)
        return desc

    def index(self, children: list[dict]) -> dict:
        body = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": children}
        return self.blob(json.dumps(body).encode(), OCI_INDEX)

    def point_at(self, desc: dict) -> dict:
        self.top = {**desc, "annotations": {"org.opencontainers.image.ref.name": "1.0"}}
        (self.root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (self.root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [self.top]}))
        return desc

    def sign(self, key: Sm2PrivateKey) -> bytes:
        """An envelope over the top descriptor, signed without looking at the other blobs."""
        return sign_image(
            self.top["digest"],
            REF,
            key,
            media_type=self.top["mediaType"],
            manifest_bytes=self.path(self.top).read_bytes(),
        )


def flip(path: Path, offset: int = -1) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture
def single(tmp_path: Path) -> Layout:
    lay = Layout(tmp_path / "single")
    lay.point_at(lay.manifest("amd64"))
    return lay


@pytest.fixture
def nested(tmp_path: Path) -> Layout:
    """index -> index -> {amd64, arm64 manifests} (arm64's second layer named by sha512)."""
    lay = Layout(tmp_path / "nested")
    amd, arm = lay.manifest("amd64"), lay.manifest("arm64", layer_alg="sha512")
    platforms = [
        {**amd, "platform": {"os": "linux", "architecture": "amd64"}},
        {**arm, "platform": {"os": "linux", "architecture": "arm64"}},
    ]
    lay.point_at(lay.index([lay.index(platforms)]))
    return lay


def refused(lay: Layout, store: TrustStore, envelope: bytes | None = None) -> VerificationError:
    with pytest.raises(VerificationError) as ei:
        verify_image_layout(lay.root, store, envelope=envelope)
    assert ei.value.detail
    return ei.value


def test_intact_layouts_verify_and_count_every_blob(
    single: Layout, nested: Layout, key: Sm2PrivateKey, store: TrustStore
) -> None:
    res = verify_image_layout(single.root, store, envelope=single.sign(key), reference=REF)
    assert res.digest == single.top["digest"]
    assert res.blobs == 4  # manifest, config, two layers
    assert res.total_bytes == sum(d["size"] for d in [single.top, *single.configs, *single.layers])
    res = verify_image_layout(nested.root, store, envelope=nested.sign(key))
    assert res.blobs == 2 + 2 * 4  # two indexes, then per platform manifest + config + two layers


def test_flipped_byte_in_a_layer_is_refused_naming_the_layer(
    single: Layout, key: Sm2PrivateKey, store: TrustStore
) -> None:
    env = single.sign(key)
    layer = single.layers[1]
    flip(single.path(layer), offset=len(single.path(layer).read_bytes()) // 2)
    err = refused(single, store, env)
    assert err.reason == Reason.FILE_MODIFIED
    assert layer["digest"] in err.detail and "layer 1" in err.detail


def test_flipped_byte_in_the_config_is_refused(single: Layout, key: Sm2PrivateKey, store: TrustStore) -> None:
    env = single.sign(key)
    flip(single.path(single.configs[0]))
    err = refused(single, store, env)
    assert err.reason == Reason.FILE_MODIFIED and single.configs[0]["digest"] in err.detail


def test_missing_config_blob_is_refused(single: Layout, key: Sm2PrivateKey, store: TrustStore) -> None:
    env = single.sign(key)
    single.path(single.configs[0]).unlink()
    err = refused(single, store, env)
    assert err.reason == Reason.FILE_MISSING and single.configs[0]["digest"] in err.detail


@pytest.mark.parametrize("change", ["grown", "truncated"])
def test_layer_size_differing_from_its_descriptor_is_refused(
    single: Layout, key: Sm2PrivateKey, store: TrustStore, change: str
) -> None:
    env = single.sign(key)
    p = single.path(single.layers[0])
    data = p.read_bytes()
    p.write_bytes(data + b"\0" if change == "grown" else data[:-1])
    err = refused(single, store, env)
    assert err.reason == Reason.FILE_SIZE_CHANGED
    assert single.layers[0]["digest"] in err.detail and str(len(data)) in err.detail


def test_nested_index_reaches_every_platform_layer(nested: Layout, key: Sm2PrivateKey, store: TrustStore) -> None:
    env = nested.sign(key)
    sha512_layer = nested.layers[3]  # arm64's second layer
    assert sha512_layer["digest"].startswith("sha512:")
    flip(nested.path(sha512_layer))
    err = refused(nested, store, env)
    assert err.reason == Reason.FILE_MODIFIED and sha512_layer["digest"] in err.detail
    flip(nested.path(sha512_layer))
    assert verify_image_layout(nested.root, store, envelope=env).blobs == 10
    nested.path(nested.manifests[1]).unlink()  # a platform manifest the signed index pins
    err = refused(nested, store, env)
    assert err.reason == Reason.FILE_MISSING and nested.manifests[1]["digest"] in err.detail


def _signed_manifest_with_layer(lay: Layout, layer: dict, key: Sm2PrivateKey) -> bytes:
    config = lay.blob(b'{"architecture":"amd64","os":"linux"}', CONFIG_TYPE)
    body = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [layer]}
    lay.point_at(lay.blob(json.dumps(body).encode(), OCI_MANIFEST))
    return lay.sign(key)


HOSTILE = [
    ("traversal", "sha256:../../../outside", Reason.MALFORMED_IMAGE),
    ("traversal-after-hex", "sha256:" + "0" * 64 + "/../../outside", Reason.MALFORMED_IMAGE),
    ("absolute", "/etc/passwd", Reason.MALFORMED_IMAGE),
    ("upper-case-hex", "sha256:" + "A" * 64, Reason.MALFORMED_IMAGE),
    ("short-hex", "sha256:abc", Reason.MALFORMED_IMAGE),
    ("sha512-length-for-sha256", "sha256:" + "a" * 128, Reason.MALFORMED_IMAGE),
    ("nul", "sha256:" + "a" * 63 + "\0", Reason.MALFORMED_IMAGE),
    ("not-a-string", 12345, Reason.MALFORMED_IMAGE),
    ("unknown-algorithm", "md5:" + "a" * 32, Reason.UNSUPPORTED_DIGEST),
    ("registered-elsewhere", "blake3:" + "a" * 64, Reason.UNSUPPORTED_DIGEST),
]


@pytest.mark.parametrize(("case", "digest", "reason"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_layer_digest_is_refused_before_any_file_is_opened(
    tmp_path: Path, key: Sm2PrivateKey, store: TrustStore, case: str, digest: object, reason: Reason
) -> None:
    (tmp_path / "outside").write_bytes(b"not a layer")
    lay = Layout(tmp_path / "layout")
    env = _signed_manifest_with_layer(lay, {"mediaType": LAYER_TYPE, "digest": digest, "size": 11}, key)
    err = refused(lay, store, env)
    assert err.reason == reason, f"{case}: {err.reason.value} ({err.detail})"
    assert "\0" not in err.detail and len(err.detail) < 400


@pytest.mark.parametrize("size", [-1, True, "11", 1.5, None])
def test_malformed_descriptor_size_is_refused(
    tmp_path: Path, key: Sm2PrivateKey, store: TrustStore, size: object
) -> None:
    lay = Layout(tmp_path / "layout")
    layer = lay.blob(tar_layer({"a": b"x"}), LAYER_TYPE)
    env = _signed_manifest_with_layer(lay, {**layer, "size": size}, key)
    assert refused(lay, store, env).reason == Reason.MALFORMED_IMAGE


def test_fifo_or_directory_as_a_blob_is_refused_without_hanging(
    single: Layout, key: Sm2PrivateKey, store: TrustStore
) -> None:
    env = single.sign(key)
    p = single.path(single.layers[0])
    p.unlink()
    os.mkfifo(p)  # opening it for reading without O_NONBLOCK would block until a writer comes
    assert refused(single, store, env).reason == Reason.UNSUPPORTED_FILE
    p.unlink()
    p.mkdir()
    err = refused(single, store, env)
    assert err.reason == Reason.UNSUPPORTED_FILE  # Linux opens a directory O_RDONLY; fstat says what it is


def test_manifest_media_type_must_match_its_descriptor(tmp_path: Path, key: Sm2PrivateKey, store: TrustStore) -> None:
    lay = Layout(tmp_path / "layout")
    inner = lay.manifest("amd64")
    body = json.loads(lay.path(inner).read_bytes())
    body["mediaType"] = OCI_INDEX  # the blob claims to be an index; its descriptor says manifest
    lay.point_at(lay.blob(json.dumps(body).encode(), OCI_MANIFEST))
    assert refused(lay, store, lay.sign(key)).reason == Reason.MALFORMED_IMAGE


def test_indexes_nested_too_deep_are_refused(tmp_path: Path, key: Sm2PrivateKey, store: TrustStore) -> None:
    lay = Layout(tmp_path / "layout")
    desc = lay.manifest("amd64")
    for _ in range(MAX_DEPTH + 2):
        desc = lay.index([desc])
    lay.point_at(desc)
    err = refused(lay, store, lay.sign(key))
    assert err.reason == Reason.MALFORMED_IMAGE and "nest" in err.detail


@pytest.mark.parametrize(
    "index_json",
    [
        b"{not json",
        b"[" * 200_000 + b"]" * 200_000,
        b'{"manifests": 3}',
        b'{"manifests": [{"digest": "x"}]}',
        b'{"manifests": [], "manifests": []}',
    ],
    ids=["not-json", "deeply-nested", "manifests-not-a-list", "descriptor-without-fields", "duplicate-key"],
)
def test_malformed_index_json_is_refused(
    single: Layout, key: Sm2PrivateKey, store: TrustStore, index_json: bytes
) -> None:
    env = single.sign(key)
    (single.root / "index.json").write_bytes(index_json)
    assert refused(single, store, env).reason == Reason.MALFORMED_IMAGE


def test_huge_index_json_is_refused_without_parsing(single: Layout, key: Sm2PrivateKey, store: TrustStore) -> None:
    env = single.sign(key)
    with (single.root / "index.json").open("wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)
    err = refused(single, store, env)
    assert err.reason == Reason.MALFORMED_IMAGE and "index.json" in err.detail


def test_huge_manifest_descriptor_is_refused_before_reading(
    tmp_path: Path, key: Sm2PrivateKey, store: TrustStore
) -> None:
    lay = Layout(tmp_path / "layout")
    inner = lay.manifest("amd64")
    lay.point_at(lay.index([{**inner, "size": MAX_JSON_BYTES + 1}]))
    err = refused(lay, store, lay.sign(key))
    assert err.reason == Reason.MALFORMED_IMAGE and inner["digest"] in err.detail


def test_a_layout_with_a_broken_blob_is_not_signed(single: Layout, key: Sm2PrivateKey) -> None:
    flip(single.path(single.layers[0]))
    with pytest.raises(SigningError) as ei:
        sign_image_layout(single.root, key, REF)
    assert ei.value.reason == Reason.FILE_MODIFIED.value and single.layers[0]["digest"] in ei.value.detail


def test_signature_is_checked_before_the_blobs(single: Layout, other_key: Sm2PrivateKey, store: TrustStore) -> None:
    single.path(single.layers[0]).unlink()
    assert refused(single, store, single.sign(other_key)).reason == Reason.UNTRUSTED_KEY


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    from trust.cli import main

    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_verify_image_layout_checks_every_blob(
    single: Layout, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trust.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE

    key, ts = tmp_path / "k.pem", tmp_path / "ts"
    assert _cli(capsys, "keys", "generate", "--private-key", key, "--no-password")[0] == EXIT_OK
    assert _cli(capsys, "keys", "trust", tmp_path / "k.pub.pem", "--trust-store", ts, "--name", "rel")[0] == EXIT_OK
    rc, _, err = _cli(capsys, "sign", "image", "--layout", single.root, "--reference", REF, "--attach", "--key", key)
    assert rc == EXIT_OK, err
    rc, out, err = _cli(capsys, "verify", "image", "--layout", single.root, "--trust-store", ts)
    assert rc == EXIT_OK, err
    assert "4 blobs" in out
    layer = single.layers[1]
    flip(single.path(layer))
    rc, out, err = _cli(capsys, "verify", "image", "--layout", single.root, "--trust-store", ts, "--json")
    assert rc == EXIT_FAILED
    assert json.loads(out) == {
        "ok": False,
        "reason": "file_modified",
        "detail": f"layer 1 {layer['digest']} does not match its digest",
    }
    assert "[file_modified]" in err and layer["digest"] in err and "Traceback" not in err
    rc, _, err = _cli(
        capsys, "sign", "image", "--layout", single.root, "--reference", REF, "-o", tmp_path / "s", "--key", key
    )
    assert rc == EXIT_USAGE and layer["digest"] in err and "Traceback" not in err  # nothing is signed
    (single.root / "index.json").write_text(json.dumps({"manifests": [{**single.top, "digest": "sha256:../../x"}]}))
    rc, _, err = _cli(capsys, "verify", "image", "--layout", single.root, "--trust-store", ts)
    assert rc == EXIT_FAILED and "[malformed_image]" in err and "Traceback" not in err


@pytest.mark.parametrize("what", ["layer", "config", "blobs_dir", "algorithm_dir", "index_json"])
def test_a_symlink_to_identical_content_outside_the_layout_is_refused(
    single: Layout, key: Sm2PrivateKey, store: TrustStore, tmp_path: Path, what: str
) -> None:
    """Each blob (and index.json) must be a regular file of the layout: a symbolic link to a
    same-content file elsewhere, at the blob or at a directory on its way, is refused."""
    env = single.sign(key)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = {
        "layer": single.path(single.layers[1]),
        "config": single.path(single.configs[0]),
        "blobs_dir": single.root / "blobs",
        "algorithm_dir": single.root / "blobs" / "sha256",
        "index_json": single.root / "index.json",
    }[what]
    moved = outside / target.name
    target.rename(moved)
    target.symlink_to(moved)
    err = refused(single, store, env)
    assert err.reason == Reason.UNSUPPORTED_FILE, err
    assert "symbolic link" in err.detail
    if what in ("layer", "config"):
        assert target.name in err.detail  # names the blob's digest


def test_a_layout_reached_through_a_symlinked_root_verifies(
    single: Layout, key: Sm2PrivateKey, store: TrustStore, tmp_path: Path
) -> None:
    env = single.sign(key)
    link = tmp_path / "layout-link"
    link.symlink_to(single.root)
    assert verify_image_layout(link, store, envelope=env).blobs > 0
