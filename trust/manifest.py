"""Model directory manifests: canonical file lists with SM3 digests.

Canonicalisation rules (docs/signing.md):

* A path is the file's relative POSIX path: UTF-8, NFC, parts separated by ``/``; no empty part, no
  ``.``, no ``..``, no leading ``/``, no backslash, no control character.
* Entries are sorted by the UTF-8 bytes of the path; no two entries may be equal, nor equal after
  Unicode case folding (the directory must survive a copy to a case-insensitive file system).
* Regular files are hashed. A symlink to a regular file inside the directory is hashed as its target's
  content under the link's path; a symlink that leaves the directory is refused (``path_escape``), as
  are symlinked directories, FIFOs, sockets and devices (``unsupported_file``). Empty directories
  carry no information and are not listed.
* Ignore patterns (recorded in the signed predicate) are ``fnmatch`` patterns over the whole relative
  path; a pattern ending in ``/`` drops a directory's whole subtree. The signature file is always
  ignored.
* The manifest digest is SM3 over the canonical JSON of the entry list:
  ``[{"algorithm":"sm3","digest":"<hex>","name":"<path>","size":<int>}, ...]`` with keys sorted,
  separators ``,`` and ``:``, no whitespace, UTF-8 (non-ASCII not escaped).
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trust.errors import Reason, VerificationError
from trust.sm3 import sm3, sm3_file

_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, order=True)
class FileEntry:
    """One manifest entry: ``name`` is the canonical relative path."""

    name: str
    size: int
    digest: str  # hex SM3 of the content

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": "sm3", "digest": self.digest, "name": self.name, "size": self.size}


def _sort_key(name: str) -> bytes:
    return name.encode("utf-8")


def check_path(name: Any) -> str:
    """Validate one manifest path; raise VerificationError(path_escape / invalid_path)."""
    if not isinstance(name, str) or not name:
        raise VerificationError(Reason.INVALID_PATH, "path must be a non-empty string")
    shown = name[:200].encode("unicode_escape").decode("ascii")
    if name.startswith("/"):
        raise VerificationError(Reason.PATH_ESCAPE, f"absolute path {shown!r}")
    parts = name.split("/")
    if ".." in parts:
        raise VerificationError(Reason.PATH_ESCAPE, f"'..' in path {shown!r}")
    if any(p in ("", ".") for p in parts):
        raise VerificationError(Reason.INVALID_PATH, f"empty or '.' part in path {shown!r}")
    if "\\" in name or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise VerificationError(Reason.INVALID_PATH, f"backslash or control character in path {shown!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise VerificationError(Reason.INVALID_PATH, f"path {shown!r} is not valid Unicode") from None
    if not unicodedata.is_normalized("NFC", name):
        raise VerificationError(Reason.INVALID_PATH, f"path {shown!r} is not in Unicode NFC")
    return name


def check_entries(entries: Sequence[FileEntry]) -> None:
    """Paths valid, no duplicates, no case collisions, canonical order; raise VerificationError."""
    seen: dict[str, str] = {}
    folded: dict[str, str] = {}
    for e in entries:
        check_path(e.name)
        if e.name in seen:
            raise VerificationError(Reason.DUPLICATE_ENTRY, f"{e.name!r} is listed twice")
        seen[e.name] = e.name
        f = e.name.casefold()
        if f in folded:
            raise VerificationError(Reason.CASE_COLLISION, f"{folded[f]!r} and {e.name!r} differ only by case")
        folded[f] = e.name
    names = [_sort_key(e.name) for e in entries]
    if names != sorted(names):
        raise VerificationError(Reason.MALFORMED_STATEMENT, "manifest entries are not in canonical order")


def canonical_entries(entries: Iterable[FileEntry]) -> list[FileEntry]:
    """Sort entries into canonical order and validate them (raises VerificationError)."""
    out = sorted(entries, key=lambda e: _sort_key(e.name))
    check_entries(out)
    return out


def canonical_json(entries: Sequence[FileEntry]) -> bytes:
    return json.dumps([e.to_json() for e in entries], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def manifest_digest(entries: Sequence[FileEntry]) -> str:
    """Hex SM3 of the canonical JSON of the (already canonical) entries."""
    return sm3(canonical_json(entries)).hex()


def entries_from_json(resources: Any) -> list[FileEntry]:
    """Parse the predicate's ``resources`` list strictly (order is checked by check_entries)."""
    if not isinstance(resources, list):
        raise VerificationError(Reason.MALFORMED_STATEMENT, "resources must be a list")
    out = []
    for r in resources:
        if not isinstance(r, dict) or set(r) != {"algorithm", "digest", "name", "size"}:
            raise VerificationError(Reason.MALFORMED_STATEMENT, "each resource is {name, size, algorithm, digest}")
        name, size, alg, digest = r["name"], r["size"], r["algorithm"], r["digest"]
        if alg != "sm3":
            raise VerificationError(Reason.MALFORMED_STATEMENT, f"resource algorithm {str(alg)[:20]!r} is not sm3")
        if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
            raise VerificationError(Reason.MALFORMED_STATEMENT, "resource digest is not 64 lower-case hex")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or size >= 1 << 63:
            raise VerificationError(Reason.MALFORMED_STATEMENT, "resource size is not a non-negative integer")
        out.append(FileEntry(check_path(name), size, digest))
    check_entries(out)
    return out


# --- scanning a directory ------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskFile:
    name: str  # canonical relative path
    path: Path  # absolute path to open (the link itself for an in-tree symlink: open follows it)
    size: int


def is_ignored(name: str, patterns: Sequence[str], is_dir: bool = False) -> bool:
    """``pat/`` patterns match directories (whole subtree dropped); other patterns match files."""
    for pat in patterns:
        if pat.endswith("/"):
            if is_dir and fnmatch.fnmatchcase(name, pat[:-1]):
                return True
        elif not is_dir and fnmatch.fnmatchcase(name, pat):
            return True
    return False


def scan(root: str | os.PathLike[str], ignore: Sequence[str] = ()) -> list[DiskFile]:
    """Every file under ``root`` in canonical order, after the ignore rules.

    Raises VerificationError (path_escape, unsupported_file, invalid_path, case_collision, io_error).
    """
    base = Path(root)
    try:
        real_root = base.resolve(strict=True)
    except OSError as e:
        raise VerificationError(Reason.IO_ERROR, f"{base}: {e.strerror}") from None
    if not real_root.is_dir():
        raise VerificationError(Reason.IO_ERROR, f"{base} is not a directory")
    out: list[DiskFile] = []

    def walk(directory: Path, prefix: str) -> None:
        try:
            with os.scandir(directory) as it:
                items = sorted(it, key=lambda d: os.fsencode(d.name))
        except OSError as e:
            raise VerificationError(Reason.IO_ERROR, f"cannot list {directory}: {e.strerror}") from None
        for item in items:
            try:
                name_part = os.fsencode(item.name).decode("utf-8")
            except UnicodeDecodeError:
                raise VerificationError(Reason.INVALID_PATH, f"file name in {prefix or '.'} is not UTF-8") from None
            rel = prefix + name_part
            try:
                st = item.stat(follow_symlinks=False)
            except OSError as e:
                raise VerificationError(Reason.IO_ERROR, f"cannot stat {rel}: {e.strerror}") from None
            if stat.S_ISDIR(st.st_mode):
                if is_ignored(rel, ignore, is_dir=True):
                    continue
                walk(Path(item.path), rel + "/")
                continue
            if is_ignored(rel, ignore):
                continue
            check_path(rel)
            path = Path(item.path)
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    raise VerificationError(Reason.PATH_ESCAPE, f"{rel} is a dangling or looping symlink") from None
                if not target.is_relative_to(real_root):
                    raise VerificationError(Reason.PATH_ESCAPE, f"{rel} is a symlink that leaves the directory")
                st = target.stat()
                if stat.S_ISDIR(st.st_mode):
                    raise VerificationError(Reason.UNSUPPORTED_FILE, f"{rel} is a symlinked directory")
            if not stat.S_ISREG(st.st_mode):
                raise VerificationError(Reason.UNSUPPORTED_FILE, f"{rel} is not a regular file")
            out.append(DiskFile(rel, path, st.st_size))

    walk(real_root, "")
    out.sort(key=lambda d: _sort_key(d.name))
    folded: dict[str, str] = {}
    for d in out:
        f = d.name.casefold()
        if f in folded:
            raise VerificationError(Reason.CASE_COLLISION, f"{folded[f]!r} and {d.name!r} differ only by case")
        folded[f] = d.name
    return out


def hash_files(
    files: Sequence[DiskFile],
    jobs: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, tuple[str, int]]:
    """Hash files in parallel threads (SM3 in cryptography releases the GIL): name → (hex, size).

    Raises VerificationError(io_error) if a file cannot be read.
    """
    jobs = max(1, jobs or os.cpu_count() or 1)
    order = sorted(files, key=lambda f: -f.size)  # largest first: better balance across threads

    def one(f: DiskFile) -> tuple[str, tuple[str, int]]:
        try:
            digest, size = sm3_file(f.path, progress)
        except OSError as e:
            raise VerificationError(Reason.IO_ERROR, f"cannot read {f.name}: {e.strerror}") from None
        return f.name, (digest.hex(), size)

    if jobs == 1 or len(order) <= 1:
        return dict(one(f) for f in order)
    with ThreadPoolExecutor(max_workers=min(jobs, len(order)), thread_name_prefix="sm3") as ex:
        return dict(ex.map(one, order))


def build_manifest(
    root: str | os.PathLike[str],
    ignore: Sequence[str] = (),
    jobs: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[FileEntry]:
    """Scan and hash ``root`` into canonical manifest entries."""
    files = scan(root, ignore)
    digests = hash_files(files, jobs, progress)
    return canonical_entries(FileEntry(f.name, digests[f.name][1], digests[f.name][0]) for f in files)
