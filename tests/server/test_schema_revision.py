"""SCHEMA_REVISION follows the contract: any change to proto/xinserve/v1 that protoc sees
(fields, messages, enums, services; not comments) needs a new revision with its digest."""

import hashlib
import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

from service.frontends.grpc.server_servicer import MIN_CLIENT_REVISION, SCHEMA_DESCRIPTOR_SHA256, SCHEMA_REVISION

PROTO = Path(__file__).resolve().parents[2] / "proto"


def _descriptor_set(root: Path, out: Path) -> bytes:
    files = sorted(str(p.relative_to(root)) for p in (root / "xinserve" / "v1").glob("*.proto"))
    proc = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(root), f"--descriptor_set_out={out}", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def test_the_contract_digest_is_recorded_under_the_current_revision(tmp_path):
    digest = hashlib.sha256(_descriptor_set(PROTO, tmp_path / "set.bin")).hexdigest()
    assert SCHEMA_REVISION == max(SCHEMA_DESCRIPTOR_SHA256)
    assert digest == SCHEMA_DESCRIPTOR_SHA256[SCHEMA_REVISION], (
        f"proto/xinserve/v1 changed (descriptor digest {digest}): bump SCHEMA_REVISION in "
        "service/frontends/grpc/server_servicer.py and record the digest under the new revision"
    )


def test_each_revision_has_its_own_digest():
    assert sorted(SCHEMA_DESCRIPTOR_SHA256) == list(range(1, SCHEMA_REVISION + 1))
    assert len(set(SCHEMA_DESCRIPTOR_SHA256.values())) == len(SCHEMA_DESCRIPTOR_SHA256)
    assert 1 <= MIN_CLIENT_REVISION <= SCHEMA_REVISION


def test_a_new_field_changes_the_digest_and_a_comment_does_not(tmp_path):
    copy = tmp_path / "proto"
    (copy / "xinserve" / "v1").mkdir(parents=True)
    for p in (PROTO / "xinserve" / "v1").glob("*.proto"):
        (copy / "xinserve" / "v1" / p.name).write_text(p.read_text())
    base = _descriptor_set(copy, tmp_path / "base.bin")
    server = copy / "xinserve" / "v1" / "server.proto"
    server.write_text(server.read_text() + "\n// A comment only.\n")
    assert _descriptor_set(copy, tmp_path / "comment.bin") == base
    server.write_text(server.read_text() + "message AddedForTheTest {\n  string x = 1;\n}\n")
    changed = _descriptor_set(copy, tmp_path / "field.bin")
    assert changed != base
    names = {m.name for f in descriptor_pb2.FileDescriptorSet.FromString(changed).file for m in f.message_type}
    assert "AddedForTheTest" in names


def test_the_python_client_implements_the_current_revision():
    from xinserve_client import SCHEMA_REVISION as CLIENT_REVISION

    assert CLIENT_REVISION == SCHEMA_REVISION, "the client's stubs are generated from the same proto/"
