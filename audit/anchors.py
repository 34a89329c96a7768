"""Anchors: what the log ships off the host, and how an auditor reads it back.

An anchor message is one JSON object (the MSG of an RFC 5424 syslog message, or one line of
an anchor file):

* ``{"anchor": "checkpoint", "payload": <checkpoint payload text>, "signature": <hex>,
  "tst": <base64 RFC 3161 TimeStampResp, optional>}``; an exported checkpoint
  (``xinserve audit export --checkpoints``: ``payload`` and ``signature`` only) is read the same;
* ``{"anchor": "record", "chain": ..., "seq": ..., "hash": <hex chain hash>, "body": <the
  record's canonical encoding as text>}`` when records are shipped too.

:func:`load_anchors` reads anchor files in any of these forms: one JSON object, JSON lines, or
a collector's log file whose lines carry an anchor message anywhere in them (rsyslog's
``%rawmsg%`` or ``%msg%`` templates, or a traditional ``host app[pid]: MSG`` line).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.chain import SignedCheckpoint
from audit.errors import AuditConfigError, AuditEncodingError

_DECODER = json.JSONDecoder()
MAX_ANCHOR_FILE_BYTES = 1 << 31


@dataclass(slots=True)
class AnchorSet:
    """Anchors collected off the host. ``timestamps`` maps a checkpoint payload to its
    RFC 3161 ``TimeStampResp`` (DER); ``records`` maps ``(chain, seq)`` to the chain hash shipped."""

    checkpoints: list[SignedCheckpoint] = field(default_factory=list)
    timestamps: dict[bytes, bytes] = field(default_factory=dict)
    records: dict[tuple[str, int], bytes] = field(default_factory=dict)
    conflicts: dict[tuple[str, int], set[bytes]] = field(default_factory=dict)
    """Record positions shipped more than once with different chain hashes (a rebuilt chain
    was shipped too): every hash seen. The log can match at most one of them."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Per anchor file name: lines skipped because they are not text (not UTF-8, or NUL bytes)
    and hold no anchor message: other programs' lines in a shared collector's file."""

    def add(self, other: AnchorSet) -> None:
        seen = {(c.payload, c.signature) for c in self.checkpoints}
        self.checkpoints.extend(c for c in other.checkpoints if (c.payload, c.signature) not in seen)
        self.timestamps.update(other.timestamps)
        for key, h in other.records.items():
            first = self.records.setdefault(key, h)
            if first != h:
                self.conflicts.setdefault(key, {first}).add(h)
        for key, hashes in other.conflicts.items():
            self.conflicts.setdefault(key, set()).update(hashes)
        for name, n in other.skipped.items():
            self.skipped[name] = self.skipped.get(name, 0) + n

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.records)


def checkpoint_message(cp: SignedCheckpoint, tst: bytes | None = None) -> dict[str, Any]:
    """The anchor message of a signed checkpoint (with its timestamp token, if any)."""
    msg: dict[str, Any] = {"anchor": "checkpoint", **cp.to_json()}
    if tst is not None:
        msg["tst"] = base64.b64encode(tst).decode("ascii")
    return msg


def record_message(chain: str, seq: int, chain_hash: bytes, body: bytes) -> dict[str, Any]:
    """The anchor message of one record."""
    return {"anchor": "record", "chain": chain, "seq": seq, "hash": chain_hash.hex(), "body": body.decode("utf-8")}


def parse_message(obj: Any) -> AnchorSet | None:
    """The anchors in one decoded message, ``None`` if it is no anchor message.

    Raises ``AuditEncodingError`` for a message that claims to be an anchor but is malformed.
    """
    if not isinstance(obj, dict):
        return None
    kind = obj.get("anchor")
    out = AnchorSet()
    if kind == "record":
        try:
            key = (str(obj["chain"]), int(obj["seq"]))
            out.records[key] = bytes.fromhex(str(obj["hash"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise AuditEncodingError("malformed record anchor") from exc
        return out
    if kind not in (None, "checkpoint") or "payload" not in obj or "signature" not in obj:
        return None
    cp = SignedCheckpoint.from_json(obj)
    out.checkpoints.append(cp)
    if obj.get("tst") is not None:
        try:
            out.timestamps[cp.payload] = base64.b64decode(str(obj["tst"]), validate=True)
        except ValueError as exc:
            raise AuditEncodingError("malformed timestamp token in a checkpoint anchor") from exc
    return out


def _objects_in(line: str) -> Iterator[Any]:
    """JSON objects that start somewhere in ``line`` (the first that decodes at each ``{``)."""
    i = line.find("{")
    while i >= 0:
        try:
            obj, end = _DECODER.raw_decode(line, i)
        except ValueError:
            i = line.find("{", i + 1)
            continue
        yield obj
        i = line.find("{", end)


def parse_text(text: str) -> AnchorSet:
    """Every anchor in ``text`` (one JSON document, JSON lines, or a syslog file)."""
    out = AnchorSet()
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            whole = json.loads(stripped)
        except ValueError:
            whole = None
        if whole is not None:
            found = parse_message(whole)
            if found is not None:
                return found
    for line in text.splitlines():
        for obj in _objects_in(line):
            found = parse_message(obj)
            if found is not None:
                out.add(found)
                break
    return out


def _text_lines(data: bytes, name: str) -> tuple[str, int]:
    """The lines of ``data`` that are text (UTF-8 without NUL), joined, and how many were not.

    A line that is not text but carries an anchor message (read with U+FFFD for the bad bytes)
    is one of ours that was damaged: ``AuditEncodingError``. Any other such line belongs to
    another program writing to the same collector and is skipped.
    """
    kept: list[str] = []
    skipped = 0
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            if b"\x00" in raw:
                raise UnicodeDecodeError("utf-8", raw, 0, 1, "NUL byte")
            kept.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            damaged = raw.replace(b"\x00", b"\xff").decode("utf-8", errors="replace")
            if any(isinstance(o, dict) and "anchor" in o for o in _objects_in(damaged)):
                raise AuditEncodingError(
                    f"malformed anchor message in {name} line {number}: it is not UTF-8 text"
                ) from None
            skipped += 1
    return "\n".join(kept), skipped


def load_anchors(paths: Iterable[str | os.PathLike[str]]) -> AnchorSet:
    """Read anchor files (see the module docstring).

    Lines that are not text (not UTF-8, or holding NUL bytes) and carry no anchor message are
    skipped and counted in :attr:`AnchorSet.skipped` (a collector's file also holds other
    programs' messages). Raises ``AuditConfigError`` for a file that cannot be read or holds no
    anchor at all, and ``AuditEncodingError`` for a malformed anchor message (one that is not
    UTF-8 text included).
    """
    out = AnchorSet()
    for p in paths:
        path = Path(p)
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_ANCHOR_FILE_BYTES + 1)
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise AuditConfigError(f"cannot read anchor file {path.name}: {why}") from None
        if len(data) > MAX_ANCHOR_FILE_BYTES:
            raise AuditConfigError(f"anchor file {path.name} is larger than 2 GiB")
        text, skipped = _text_lines(data, path.name)
        found = parse_text(text)
        if not found:
            if skipped:
                raise AuditConfigError(
                    f"anchor file {path.name} holds no audit anchor (it is not text: "
                    f"{skipped} lines are not UTF-8 or hold NUL bytes)"
                )
            raise AuditConfigError(f"anchor file {path.name} holds no audit anchor")
        if skipped:
            found.skipped[path.name] = skipped
        out.add(found)
    return out
