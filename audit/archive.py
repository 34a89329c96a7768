"""The retention archive file: ``audit-<chain>-<from>-<to>.jsonl.gz``, optionally sealed with
SM4-GCM (GB/T 32907) in 1 MiB chunks (``.sm4``, magic ``XAUDSM4\x01``, each chunk bound to the
file name, its index and whether it is the last).

Content: one JSON header line (``type`` ``xinserve.audit.archive``, ``chain``, ``from``,
``through``, ``prev_hash``), one line per record ``{"seq", "hash", "body"}``, one line per signed
checkpoint ``{"checkpoint": ...}``. Written by retention (:mod:`audit.retention`), read back and
checked by it and by ``audit verify`` (:mod:`audit.verify`).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from audit.chain import SignedCheckpoint
from audit.errors import AuditConfigError, AuditEncodingError
from trust.sm3 import sm3

ARCHIVE_TYPE = "xinserve.audit.archive"
_CHUNK = 1 << 20


def file_sm3(path: Path) -> bytes:
    from trust.sm3 import sm3_file

    return sm3_file(path)[0]


def write_archive(
    path: Path,
    header: dict[str, Any],
    rows: Iterator[tuple[int, bytes, bytes]],
    checkpoints: list[SignedCheckpoint],
    key: bytes | None,
) -> None:
    """Write the archive to ``path`` atomically (a ``.tmp`` file fsync'd, renamed, the directory
    fsync'd); sealed with the 16-byte SM4 ``key`` when one is given."""
    tmp = path.with_name(path.name + ".tmp")
    raw = io.BytesIO() if key is not None else None
    with open(tmp, "wb") as fh:
        sink = raw if raw is not None else fh
        with gzip.GzipFile(fileobj=sink, mode="wb", mtime=0) as gz:
            gz.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            for seq, body, h in rows:
                gz.write(
                    b'{"seq":%d,"hash":"%s","body":%s}\n'
                    % (seq, h.hex().encode(), json.dumps(body.decode("utf-8"), ensure_ascii=False).encode())
                )
            for c in checkpoints:
                gz.write(json.dumps({"checkpoint": c.to_json()}, sort_keys=True).encode() + b"\n")
        if raw is not None and key is not None:
            from trust import sm4

            data = raw.getvalue()
            chunks = [data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK)] or [b""]
            fh.write(b"XAUDSM4\x01")
            for i, chunk in enumerate(chunks):
                aad = _aad(path.name, i, i == len(chunks) - 1)
                sealed = sm4.seal(key, chunk, aad)
                fh.write(struct.pack(">I", len(sealed)) + sealed)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _aad(name: str, index: int, last: bool) -> bytes:
    return f"{name}|{index}|{int(last)}".encode()


def read_archive(
    path: Path, key: bytes | None = None
) -> tuple[dict[str, Any], list[tuple[int, bytes, bytes]], list[SignedCheckpoint]]:
    """``(header, [(seq, body, hash)], checkpoints)`` of an archive (decrypting with ``key``)."""
    data = path.read_bytes()
    if data.startswith(b"XAUDSM4\x01"):
        if key is None:
            raise AuditConfigError("the archive is encrypted: an SM4 key is needed")
        from trust import sm4
        from trust.errors import DecryptionError

        name = path.name
        pos, i, out = 8, 0, []
        while pos < len(data):
            (length,) = struct.unpack(">I", data[pos : pos + 4])
            sealed = data[pos + 4 : pos + 4 + length]
            pos += 4 + length
            try:
                out.append(sm4.open_(key, sealed, _aad(name, i, pos >= len(data))))
            except DecryptionError:
                raise AuditEncodingError("archive chunk fails SM4-GCM authentication") from None
            i += 1
        data = b"".join(out)
    try:
        lines = gzip.decompress(data).splitlines()
        header = json.loads(lines[0])
        if header.get("type") != ARCHIVE_TYPE:
            raise AuditEncodingError("not an audit archive")
        rows: list[tuple[int, bytes, bytes]] = []
        cps: list[SignedCheckpoint] = []
        for line in lines[1:]:
            obj = json.loads(line)
            if "checkpoint" in obj:
                cps.append(SignedCheckpoint.from_json(obj["checkpoint"]))
            else:
                rows.append((int(obj["seq"]), obj["body"].encode("utf-8"), bytes.fromhex(obj["hash"])))
    except (OSError, EOFError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise AuditEncodingError(f"malformed archive: {type(exc).__name__}") from None
    return header, rows, cps


def verify_archive(path: Path, keys: list[Any], key: bytes | None = None) -> list[str]:
    """Problems found in an archive (empty list: it verifies): chain, signatures, signed heads."""
    from trust.errors import InvalidSignature

    header, rows, cps = read_archive(path, key)
    problems: list[str] = []
    trusted = {k.key_id: k for k in keys}
    heads = {}
    for c in cps:
        k = trusted.get(c.checkpoint.key_id)
        if k is None:
            problems.append(f"checkpoint {c.checkpoint.n}: untrusted key")
            continue
        try:
            k.verify(c.signature, c.payload)
        except InvalidSignature:
            problems.append(f"checkpoint {c.checkpoint.n}: invalid signature")
            continue
        heads[c.checkpoint.tree_size] = c.checkpoint
    h = bytes.fromhex(header["prev_hash"])
    expect = int(header["from"])
    for seq, body, stored in rows:
        if seq != expect:
            problems.append(f"record {expect} missing")
            break
        h = sm3(h + body)
        if h != stored:
            problems.append(f"record {seq} altered")
            break
        cp = heads.get(seq)
        if cp is not None and cp.head != h:
            problems.append(f"records up to {seq} do not match signed checkpoint {cp.n}")
            break
        expect += 1
    if not problems and expect - 1 != int(header["through"]):
        problems.append(f"archive ends at {expect - 1}, header says {header['through']}")
    return problems
