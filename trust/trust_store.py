"""The trust store: which SM2 public keys may sign what xinserve serves, and which are revoked.

Directory format (documented in docs/signing.md)::

    <dir>/trust-store.json      the index (optional, see below)
    <dir>/keys/<name>.pem       SubjectPublicKeyInfo PEM files, one key each

``trust-store.json``::

    {
      "version": 1,
      "keys": [
        {"name": "release-2026", "file": "keys/release-2026.pem",
         "key_id": "<hex SM3 of the key's DER, optional: checked when present>",
         "not_before": "2026-01-01T00:00:00Z", "not_after": "2027-01-01T00:00:00Z"}
      ],
      "revoked": [
        {"key_id": "<hex>", "reason": "laptop stolen", "revoked_at": "2026-05-01T00:00:00Z"}
      ]
    }

Without ``trust-store.json`` every ``*.pem`` directly in ``<dir>`` or ``<dir>/keys`` is trusted with
its file stem as name, no validity window and no revocation. Any malformed file fails the whole load
(:class:`TrustStoreError`): a half-read trust store is never used.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trust.errors import KeyFormatError, Reason, TrustStoreError, VerificationError
from trust.sm2 import Sm2PublicKey

INDEX_FILENAME = "trust-store.json"
KEYS_DIRNAME = "keys"
FORMAT_VERSION = 1
_MAX_FILE = 1 << 20
_KEY_ID_RE = re.compile(r"[0-9a-f]{64}")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")


def _parse_time(value: Any, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TrustStoreError(f"{what} must be an RFC 3339 string")
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TrustStoreError(f"{what} is not an RFC 3339 time: {value!r}") from None
    if t.tzinfo is None:
        raise TrustStoreError(f"{what} must carry a time zone (e.g. Z)")
    return t.astimezone(timezone.utc)


def _fmt_time(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class TrustedKey:
    name: str
    public_key: Sm2PublicKey
    not_before: datetime | None = None
    not_after: datetime | None = None

    @property
    def key_id(self) -> str:
        return self.public_key.key_id


@dataclass(frozen=True)
class Revocation:
    key_id: str
    reason: str = ""
    revoked_at: datetime | None = None


@dataclass(frozen=True)
class TrustStore:
    keys: dict[str, TrustedKey] = field(default_factory=dict)
    revoked: dict[str, Revocation] = field(default_factory=dict)
    source: str = "<memory>"

    @classmethod
    def from_keys(
        cls, keys: Iterable[TrustedKey | Sm2PublicKey], revoked: Iterable[Revocation | str] = ()
    ) -> TrustStore:
        """An in-memory store (tests, the embedded default's demo key)."""
        by_id: dict[str, TrustedKey] = {}
        for k in keys:
            tk = k if isinstance(k, TrustedKey) else TrustedKey(name=k.key_id[:16], public_key=k)
            by_id[tk.key_id] = tk
        rv = {}
        for r in revoked:
            rr = r if isinstance(r, Revocation) else Revocation(key_id=r)
            rv[rr.key_id] = rr
        return cls(keys=by_id, revoked=rv)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> TrustStore:
        """Load a trust store directory; raises :class:`TrustStoreError` on anything wrong."""
        root = Path(directory)
        if not root.is_dir():
            raise TrustStoreError(f"trust store {root} is not a directory")
        index = root / INDEX_FILENAME
        if index.exists():
            store = cls._load_index(root, index)
        else:
            pems = sorted(p for d in (root, root / KEYS_DIRNAME) if d.is_dir() for p in d.glob("*.pem"))
            keys = [TrustedKey(name=p.stem, public_key=_read_key(p)) for p in pems]
            store = cls.from_keys(keys)
        if not store.keys:
            raise TrustStoreError(f"trust store {root} holds no trusted key")
        return TrustStore(keys=store.keys, revoked=store.revoked, source=str(root))

    @classmethod
    def _load_index(cls, root: Path, index: Path) -> TrustStore:
        try:
            raw = index.read_bytes()
        except OSError as e:
            raise TrustStoreError(f"cannot read {index}: {e.strerror}") from None
        if len(raw) > _MAX_FILE:
            raise TrustStoreError(f"{index} is too large")
        try:
            doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
        except (ValueError, UnicodeDecodeError) as e:
            raise TrustStoreError(f"{index} is not valid JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            raise TrustStoreError(f'{index}: expected an object with "version": {FORMAT_VERSION}')
        _only(doc, {"version", "keys", "revoked"}, str(index))
        keys: dict[str, TrustedKey] = {}
        names: set[str] = set()
        for i, entry in enumerate(doc.get("keys", [])):
            where = f"{index} keys[{i}]"
            if not isinstance(entry, dict):
                raise TrustStoreError(f"{where} must be an object")
            _only(entry, {"name", "file", "key_id", "not_before", "not_after"}, where)
            name, file = entry.get("name"), entry.get("file")
            if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
                raise TrustStoreError(f"{where}: name must match {_NAME_RE.pattern}")
            if name in names:
                raise TrustStoreError(f"{where}: duplicate name {name!r}")
            names.add(name)
            if not isinstance(file, str) or not file:
                raise TrustStoreError(f"{where}: file is required")
            path = (root / file).resolve()
            if not path.is_relative_to(root.resolve()):
                raise TrustStoreError(f"{where}: file must lie inside the trust store")
            pub = _read_key(path)
            declared = entry.get("key_id")
            if declared is not None and declared != pub.key_id:
                raise TrustStoreError(f"{where}: key_id does not match the key in {file}")
            nb = _parse_time(entry.get("not_before"), f"{where} not_before")
            na = _parse_time(entry.get("not_after"), f"{where} not_after")
            if nb and na and nb >= na:
                raise TrustStoreError(f"{where}: not_before must precede not_after")
            if pub.key_id in keys:
                raise TrustStoreError(f"{where}: the same key is listed twice")
            keys[pub.key_id] = TrustedKey(name=name, public_key=pub, not_before=nb, not_after=na)
        revoked: dict[str, Revocation] = {}
        for i, entry in enumerate(doc.get("revoked", [])):
            where = f"{index} revoked[{i}]"
            if not isinstance(entry, dict):
                raise TrustStoreError(f"{where} must be an object")
            _only(entry, {"key_id", "reason", "revoked_at"}, where)
            kid = entry.get("key_id")
            if not isinstance(kid, str) or not _KEY_ID_RE.fullmatch(kid):
                raise TrustStoreError(f"{where}: key_id must be 64 lower-case hex characters")
            reason = entry.get("reason", "")
            if not isinstance(reason, str):
                raise TrustStoreError(f"{where}: reason must be a string")
            revoked[kid] = Revocation(kid, reason, _parse_time(entry.get("revoked_at"), f"{where} revoked_at"))
        return cls(keys=keys, revoked=revoked)

    def check(self, key_id: str, now: datetime | None = None) -> TrustedKey:
        """The trusted key for ``key_id``, or VerificationError(untrusted/revoked/expired/...)."""
        if key_id in self.revoked:
            r = self.revoked[key_id]
            raise VerificationError(
                Reason.REVOKED_KEY, f"key {key_id[:16]} is revoked" + (f" ({r.reason})" if r.reason else "")
            )
        tk = self.keys.get(key_id)
        if tk is None:
            raise VerificationError(Reason.UNTRUSTED_KEY, f"key {key_id[:16]} is not in the trust store")
        now = now or datetime.now(timezone.utc)
        if now.tzinfo is None:  # a naive time is taken as UTC rather than crashing the comparison
            now = now.replace(tzinfo=timezone.utc)
        if tk.not_before and now < tk.not_before:
            raise VerificationError(Reason.KEY_NOT_YET_VALID, f"key {tk.name} is valid from {_fmt_time(tk.not_before)}")
        if tk.not_after and now >= tk.not_after:
            raise VerificationError(Reason.KEY_EXPIRED, f"key {tk.name} expired at {_fmt_time(tk.not_after)}")
        return tk


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _only(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = set(obj) - allowed
    if extra:
        raise TrustStoreError(f"{where}: unknown field(s) {sorted(extra)}")


def _read_key(path: Path) -> Sm2PublicKey:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TrustStoreError(f"cannot read key {path}: {e.strerror}") from None
    try:
        return Sm2PublicKey.from_pem(data)
    except KeyFormatError as e:
        raise TrustStoreError(f"{path}: {e}") from None


# --- writing (operator helpers used by the CLI) ------------------------------------------------


def _read_index(root: Path) -> dict[str, Any]:
    index = root / INDEX_FILENAME
    if index.exists():
        TrustStore._load_index(root, index)  # validate before changing anything
        doc: dict[str, Any] = json.loads(index.read_text("utf-8"))
        return doc
    # No index yet: adopt the PEM files that were trusted implicitly, so nothing silently drops out.
    keys = []
    for d in (root, root / KEYS_DIRNAME):
        for p in sorted(d.glob("*.pem")) if d.is_dir() else []:
            keys.append({"name": p.stem, "file": str(p.relative_to(root)), "key_id": _read_key(p).key_id})
    return {"version": FORMAT_VERSION, "keys": keys, "revoked": []}


def _write_index(root: Path, doc: dict[str, Any]) -> None:
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".trust-store.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / INDEX_FILENAME)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_trusted_key(
    directory: str | os.PathLike[str],
    public_key: Sm2PublicKey,
    name: str,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> Path:
    """Copy ``public_key`` into ``<dir>/keys/<name>.pem`` and list it in ``trust-store.json``."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if not _NAME_RE.fullmatch(name):
        raise TrustStoreError(f"key name must match {_NAME_RE.pattern}")
    doc = _read_index(root)
    if any(k.get("name") == name for k in doc["keys"]):
        raise TrustStoreError(f"a key named {name!r} is already trusted")
    if any(k.get("key_id") == public_key.key_id for k in doc["keys"]):
        raise TrustStoreError("this key is already trusted")
    (root / KEYS_DIRNAME).mkdir(exist_ok=True)
    pem_path = root / KEYS_DIRNAME / f"{name}.pem"
    pem_path.write_bytes(public_key.to_pem())
    entry: dict[str, Any] = {"name": name, "file": f"{KEYS_DIRNAME}/{name}.pem", "key_id": public_key.key_id}
    if not_before:
        entry["not_before"] = _fmt_time(not_before)
    if not_after:
        entry["not_after"] = _fmt_time(not_after)
    doc["keys"].append(entry)
    _write_index(root, doc)
    return pem_path


def revoke_key(directory: str | os.PathLike[str], key_id: str, reason: str = "") -> None:
    """Add ``key_id`` to the revocation list of ``trust-store.json`` (the key file stays)."""
    root = Path(directory)
    if not _KEY_ID_RE.fullmatch(key_id):
        raise TrustStoreError("key id must be 64 lower-case hex characters")
    doc = _read_index(root) if root.is_dir() else None
    if doc is None:
        raise TrustStoreError(f"trust store {root} is not a directory")
    if any(r.get("key_id") == key_id for r in doc.setdefault("revoked", [])):
        return
    doc["revoked"].append({"key_id": key_id, "reason": reason, "revoked_at": _fmt_time(datetime.now(timezone.utc))})
    _write_index(root, doc)
