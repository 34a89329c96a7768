"""The tamper matrix: every way a signed model directory can be wrong, each with its own reason."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trust_sm2_reference as ref

from trust._curve import SM2P256V1
from trust.dsse import pae, sign_envelope
from trust.errors import Reason, SigningError, VerificationError
from trust.model_signing import SIGNATURE_FILENAME, sign_model, verify_model
from trust.sm2 import Sm2PrivateKey, encode_der_signature, parse_der_signature
from trust.trust_store import Revocation, TrustedKey, TrustStore

Ctx = dict[str, Any]


def sig_path(d: Path) -> Path:
    return d / SIGNATURE_FILENAME


def load_env(d: Path) -> dict[str, Any]:
    return json.loads(sig_path(d).read_text())


def save_env(d: Path, env: dict[str, Any]) -> None:
    sig_path(d).write_text(json.dumps(env))


def resign(d: Path, key: Sm2PrivateKey, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit the statement and sign it again with a trusted key: only the content check may fail."""
    st = json.loads(base64.b64decode(load_env(d)["payload"]))
    edit(st)
    sig_path(d).write_bytes(sign_envelope(json.dumps(st).encode(), key))


def edit_sig(d: Path, fn: Callable[[bytes], bytes]) -> None:
    env = load_env(d)
    sig = base64.b64decode(env["signatures"][0]["sig"])
    env["signatures"][0]["sig"] = base64.b64encode(fn(sig)).decode()
    save_env(d, env)


def sign_with_empty_id(d: Path, key: Sm2PrivateKey) -> None:
    """What `openssl dgst -sm3 -sign` without -sigopt distid produces: the Z value over an EMPTY ID."""
    env = load_env(d)
    payload = base64.b64decode(env["payload"])
    r, s = ref.sign(
        SM2P256V1,
        int.from_bytes(key._d, "big"),
        b"",
        pae(env["payloadType"], payload),
        secrets.randbelow(SM2P256V1.n - 1) + 1,
    )
    env["signatures"][0]["sig"] = base64.b64encode(encode_der_signature(r, s)).decode()
    save_env(d, env)


def add_resource(name: str, copy_of: int = 0) -> Callable[[dict[str, Any]], None]:
    def edit(st: dict[str, Any]) -> None:
        res = st["predicate"]["resources"]
        res.append(dict(res[copy_of], name=name))
        res.sort(key=lambda r: r["name"].encode())
        from trust.manifest import FileEntry, manifest_digest

        try:
            st["subject"][0]["digest"]["sm3"] = manifest_digest(
                [FileEntry(r["name"], r["size"], r["digest"]) for r in res]
            )
        except Exception:
            pass

    return edit


def flip_byte(d: Path) -> None:
    p = d / "model-00001-of-00002.safetensors"
    data = bytearray(p.read_bytes())
    data[12345] ^= 0x01
    p.write_bytes(bytes(data))


def truncate(d: Path) -> None:
    p = d / "model-00002-of-00002.safetensors"
    p.write_bytes(p.read_bytes()[:-1])


def append_bytes(d: Path) -> None:
    with (d / "config.json").open("ab") as f:
        f.write(b" ")


def symlink_outside(d: Path) -> None:
    outside = d.parent / "outside-config.json"
    shutil.copy(d / "config.json", outside)  # identical content: only the escape is wrong
    (d / "config.json").unlink()
    (d / "config.json").symlink_to(outside)


def empty_dir(d: Path) -> None:
    shutil.rmtree(d)
    d.mkdir()


CASES: list[tuple[str, Callable[[Path, Ctx], None], Reason]] = [
    ("flipped byte", lambda d, c: flip_byte(d), Reason.FILE_MODIFIED),
    ("truncated file", lambda d, c: truncate(d), Reason.FILE_SIZE_CHANGED),
    ("bytes appended", lambda d, c: append_bytes(d), Reason.FILE_SIZE_CHANGED),
    ("file added", lambda d, c: (d / "extra.bin").write_bytes(b"x"), Reason.FILE_ADDED),
    (
        "file added in a new dir",
        lambda d, c: ((d / "n").mkdir(), (d / "n" / "x").write_bytes(b"")),
        Reason.FILE_ADDED,
    ),
    ("file removed", lambda d, c: (d / "tokenizer.json").unlink(), Reason.FILE_MISSING),
    ("file renamed", lambda d, c: (d / "tokenizer.json").rename(d / "tok.json"), Reason.FILE_RENAMED),
    ("case-only rename", lambda d, c: (d / "config.json").rename(d / "Config.json"), Reason.CASE_MISMATCH),
    ("symlink to outside", lambda d, c: symlink_outside(d), Reason.PATH_ESCAPE),
    ("dangling symlink", lambda d, c: (d / "x.bin").symlink_to(d / "nope"), Reason.PATH_ESCAPE),
    (
        "'..' in the manifest",
        lambda d, c: resign(d, c["key"], add_resource("../evil.bin")),
        Reason.PATH_ESCAPE,
    ),
    (
        "absolute path in the manifest",
        lambda d, c: resign(d, c["key"], add_resource("/etc/passwd")),
        Reason.PATH_ESCAPE,
    ),
    (
        "'.' part in the manifest",
        lambda d, c: resign(d, c["key"], add_resource("./config.json")),
        Reason.INVALID_PATH,
    ),
    (
        "duplicate entries",
        lambda d, c: resign(d, c["key"], add_resource("config.json")),
        Reason.DUPLICATE_ENTRY,
    ),
    (
        "case-colliding entries",
        lambda d, c: resign(d, c["key"], add_resource("CONFIG.json")),
        Reason.CASE_COLLISION,
    ),
    (
        "entries out of order",
        lambda d, c: resign(d, c["key"], lambda st: st["predicate"]["resources"].reverse()),
        Reason.MALFORMED_STATEMENT,
    ),
    (
        "subject digest not the manifest's",
        lambda d, c: resign(d, c["key"], lambda st: st["subject"][0]["digest"].update(sm3="0" * 64)),
        Reason.MANIFEST_DIGEST_MISMATCH,
    ),
    (
        "manifest lists no file",
        lambda d, c: resign(d, c["key"], lambda st: st["predicate"].update(resources=[])),
        Reason.EMPTY_MANIFEST,
    ),
    (
        "image signature used for a model",
        lambda d, c: resign(
            d, c["key"], lambda st: st.update(predicateType="https://xinserve.dev/image-signing/sm/v1")
        ),
        Reason.WRONG_PREDICATE_TYPE,
    ),
    ("signed by an untrusted key", lambda d, c: sign_model(d, c["other_key"], "m"), Reason.UNTRUSTED_KEY),
    ("signed by a revoked key", lambda d, c: sign_model(d, c["revoked_key"], "m"), Reason.REVOKED_KEY),
    ("signed by an expired key", lambda d, c: sign_model(d, c["expired_key"], "m"), Reason.KEY_EXPIRED),
    (
        "signed by a not-yet-valid key",
        lambda d, c: sign_model(d, c["future_key"], "m"),
        Reason.KEY_NOT_YET_VALID,
    ),
    ("signed with the empty ID", lambda d, c: sign_with_empty_id(d, c["key"]), Reason.BAD_SIGNATURE),
    (
        "keyid relabelled to a trusted key",
        lambda d, c: (
            sign_model(d, c["other_key"], "m"),
            save_env(
                d,
                {
                    **load_env(d),
                    "signatures": [{**load_env(d)["signatures"][0], "keyid": c["key"].public_key().key_id}],
                },
            ),
        ),
        Reason.BAD_SIGNATURE,
    ),
    (
        "payload changed after signing",
        lambda d, c: save_env(
            d,
            {
                **load_env(d),
                "payload": base64.b64encode(
                    base64.b64decode(load_env(d)["payload"]).replace(b'"name":"m"', b'"name":"n"')
                ).decode(),
            },
        ),
        Reason.BAD_SIGNATURE,
    ),
    (
        "envelope payload type changed",
        lambda d, c: save_env(d, {**load_env(d), "payloadType": "application/json"}),
        Reason.WRONG_PAYLOAD_TYPE,
    ),
    ("signature truncated", lambda d, c: edit_sig(d, lambda s: s[:-1]), Reason.MALFORMED_SIGNATURE),
    ("signature padded", lambda d, c: edit_sig(d, lambda s: s + b"\x00"), Reason.MALFORMED_SIGNATURE),
    (
        "non-DER signature (raw r||s)",
        lambda d, c: edit_sig(d, lambda s: b"".join(v.to_bytes(32, "big") for v in parse_der_signature(s))),
        Reason.MALFORMED_SIGNATURE,
    ),
    (
        "signature bytes flipped",
        lambda d, c: edit_sig(d, lambda s: s[:-1] + bytes([s[-1] ^ 1])),
        Reason.BAD_SIGNATURE,
    ),
    ("envelope not JSON", lambda d, c: sig_path(d).write_bytes(b"\x00garbage"), Reason.MALFORMED_ENVELOPE),
    (
        "envelope without signatures",
        lambda d, c: save_env(d, {**load_env(d), "signatures": []}),
        Reason.MALFORMED_ENVELOPE,
    ),
    (
        "payload not base64",
        lambda d, c: save_env(d, {**load_env(d), "payload": "!!"}),
        Reason.MALFORMED_ENVELOPE,
    ),
    (
        "envelope with an unknown field",
        lambda d, c: save_env(d, {**load_env(d), "x": 1}),
        Reason.MALFORMED_ENVELOPE,
    ),
    (
        "envelope duplicate JSON key",
        lambda d, c: sig_path(d).write_text(
            sig_path(d).read_text().replace('"payloadType"', '"payloadType": "x", "payloadType"', 1)
        ),
        Reason.MALFORMED_ENVELOPE,
    ),
    ("signature file removed", lambda d, c: sig_path(d).unlink(), Reason.UNSIGNED),
    ("empty directory", lambda d, c: empty_dir(d), Reason.UNSIGNED),
]


@pytest.fixture(scope="module")
def ctx() -> Ctx:
    now = datetime.now(UTC)
    key, other, revoked, expired, future = (Sm2PrivateKey.generate() for _ in range(5))
    store = TrustStore.from_keys(
        [
            TrustedKey("release", key.public_key()),
            TrustedKey("revoked", revoked.public_key()),
            TrustedKey("expired", expired.public_key(), not_after=now - timedelta(days=1)),
            TrustedKey("future", future.public_key(), not_before=now + timedelta(days=1)),
        ],
        revoked=[Revocation(revoked.public_key().key_id, "compromised")],
    )
    return {
        "key": key,
        "other_key": other,
        "revoked_key": revoked,
        "expired_key": expired,
        "future_key": future,
        "store": store,
    }


@pytest.fixture
def signed(model_dir: Path, ctx: Ctx) -> Path:
    sign_model(model_dir, ctx["key"], "m")
    verify_model(model_dir, ctx["store"], "m")  # the untouched directory verifies
    return model_dir


@pytest.mark.parametrize(("case", "tamper", "reason"), CASES, ids=[c[0] for c in CASES])
def test_tamper_matrix(signed: Path, ctx: Ctx, case: str, tamper: Callable[[Path, Ctx], None], reason: Reason) -> None:
    tamper(signed, ctx)
    with pytest.raises(VerificationError) as ei:
        verify_model(signed, ctx["store"], "m")
    assert ei.value.reason == reason, f"{case}: got {ei.value.reason.value} ({ei.value.detail})"
    assert ei.value.detail  # a human-readable explanation accompanies every code


def test_every_case_has_a_distinct_purpose() -> None:
    assert len({c[0] for c in CASES}) == len(CASES)
    # Every reason a model can fail with (besides I/O and disk oddities tested elsewhere) is exercised.
    exercised = {c[2] for c in CASES}
    image_only = {Reason.MALFORMED_IMAGE, Reason.UNSUPPORTED_DIGEST}  # OCI layouts: test_trust_image_blobs.py
    elsewhere = {Reason.IO_ERROR, Reason.UNSUPPORTED_FILE, Reason.SUBJECT_MISMATCH, *image_only}
    assert set(Reason) - elsewhere - exercised == set()


def test_wrong_model_name(signed: Path, ctx: Ctx) -> None:
    with pytest.raises(VerificationError) as ei:
        verify_model(signed, ctx["store"], "another-model")
    assert ei.value.reason == Reason.SUBJECT_MISMATCH


def test_result_describes_what_was_proven(signed: Path, ctx: Ctx) -> None:
    res = verify_model(signed, ctx["store"])
    assert res.model_name == "m" and res.key_name == "release"
    assert res.key_id == ctx["key"].public_key().key_id
    assert res.manifest_digest.startswith("sm3:") and len(res.manifest_digest) == 68
    assert res.files == 6 and res.total_bytes == sum(
        p.stat().st_size for p in signed.rglob("*") if p.is_file() and p.name != SIGNATURE_FILENAME
    )


def test_in_tree_symlink_and_ignored_dirs_verify(model_dir: Path, ctx: Ctx) -> None:
    (model_dir / "alias.json").symlink_to("config.json")
    sign_model(model_dir, ctx["key"], "m")
    (model_dir / ".git").mkdir()
    (model_dir / ".git" / "HEAD").write_text("ref: x")  # ignored by the default rules, recorded in the statement
    assert verify_model(model_dir, ctx["store"]).files == 7
    st = json.loads(base64.b64decode(load_env(model_dir)["payload"]))
    assert ".git/" in st["predicate"]["serialization"]["ignore_paths"]


def test_fifo_is_refused(model_dir: Path, ctx: Ctx) -> None:
    sign_model(model_dir, ctx["key"], "m")
    os.mkfifo(model_dir / "pipe")
    with pytest.raises(VerificationError) as ei:
        verify_model(model_dir, ctx["store"])
    assert ei.value.reason == Reason.UNSUPPORTED_FILE


def test_signing_refuses_what_verification_would(tmp_path: Path, ctx: Ctx) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SigningError) as ei:
        sign_model(tmp_path / "empty", ctx["key"], "m")
    assert ei.value.reason == "empty_manifest"
    d = tmp_path / "esc"
    d.mkdir()
    (d / "link").symlink_to("/etc/hostname")
    with pytest.raises(SigningError) as ei:
        sign_model(d, ctx["key"], "m")
    assert ei.value.reason == "path_escape"


def test_missing_directory_is_an_io_error(tmp_path: Path, ctx: Ctx) -> None:
    with pytest.raises(VerificationError) as ei:
        verify_model(tmp_path / "nope", ctx["store"])
    assert ei.value.reason == Reason.IO_ERROR


def test_parallel_and_serial_hashing_agree(signed: Path, ctx: Ctx) -> None:
    a = verify_model(signed, ctx["store"], jobs=1)
    b = verify_model(signed, ctx["store"], jobs=4)
    assert a == b
    seen: list[int] = []
    totals: list[int] = []
    verify_model(signed, ctx["store"], progress=seen.append, on_total=totals.append)
    assert sum(seen) == totals[0] == a.total_bytes


def _cosign(d: Path, *keys: Sm2PrivateKey) -> None:
    """Replace the envelope's signatures with one per key over the same payload."""
    env = load_env(d)
    payload = base64.b64decode(env["payload"])
    env["signatures"] = [
        {"keyid": k.public_key().key_id, "sig": base64.b64encode(k.sign(pae(env["payloadType"], payload))).decode()}
        for k in keys
    ]
    save_env(d, env)


def test_one_trusted_signature_among_several_suffices(signed: Path, ctx: Ctx) -> None:
    _cosign(signed, ctx["other_key"], ctx["revoked_key"], ctx["key"])
    assert verify_model(signed, ctx["store"], "m").key_name == "release"


def test_without_a_good_signature_the_most_telling_reason_wins(signed: Path, ctx: Ctx) -> None:
    _cosign(signed, ctx["other_key"], ctx["revoked_key"])
    with pytest.raises(VerificationError) as ei:
        verify_model(signed, ctx["store"], "m")
    assert ei.value.reason == Reason.REVOKED_KEY


async def test_async_wrapper_runs_off_the_event_loop(signed: Path, ctx: Ctx) -> None:
    from trust.model_signing import verify_model_async

    res = await verify_model_async(signed, ctx["store"], "m")
    assert res.key_name == "release"
    (signed / "config.json").unlink()
    with pytest.raises(VerificationError) as ei:
        await verify_model_async(signed, ctx["store"], "m")
    assert ei.value.reason == Reason.FILE_MISSING


def test_signature_without_keyid_is_matched_against_trusted_keys(signed: Path, ctx: Ctx) -> None:
    env = load_env(signed)
    env["signatures"] = [{"sig": env["signatures"][0]["sig"]}]
    save_env(signed, env)
    assert verify_model(signed, ctx["store"], "m").key_name == "release"
    sign_model(signed, ctx["other_key"], "m")
    env = load_env(signed)
    env["signatures"] = [{"sig": env["signatures"][0]["sig"]}]
    save_env(signed, env)
    with pytest.raises(VerificationError) as ei:
        verify_model(signed, ctx["store"], "m")
    assert ei.value.reason == Reason.UNTRUSTED_KEY
