"""Property tests (hypothesis) of the manifest canonicalisation rules."""

from __future__ import annotations

import json
import tempfile
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trust.errors import Reason, VerificationError
from trust.manifest import (
    FileEntry,
    build_manifest,
    canonical_entries,
    canonical_json,
    check_path,
    entries_from_json,
    manifest_digest,
)

ALPHABET = st.characters(codec="utf-8", exclude_characters="/\\\x7f", exclude_categories=("Cc", "Cs", "Zl", "Zp"))
segment = (
    st.text(ALPHABET, min_size=1, max_size=12)
    .map(lambda s: unicodedata.normalize("NFC", s))
    .filter(lambda s: s not in (".", "..") and 0 < len(s.encode()) <= 60)
)
path = st.lists(segment, min_size=1, max_size=4).map("/".join)
hexdigest = st.binary(min_size=32, max_size=32).map(bytes.hex)
entry = st.builds(FileEntry, path, st.integers(0, 2**40), hexdigest)


def unique_entries(min_size: int = 0, max_size: int = 20):
    return st.lists(entry, min_size=min_size, max_size=max_size, unique_by=lambda e: e.name.casefold())


@settings(deadline=None)
@given(path)
def test_valid_paths_are_accepted(p: str) -> None:
    assert check_path(p) == p


@settings(deadline=None)
@given(st.lists(segment, min_size=0, max_size=3), st.lists(segment, min_size=0, max_size=3))
def test_dotdot_anywhere_is_a_path_escape(before: list[str], after: list[str]) -> None:
    with pytest.raises(VerificationError) as ei:
        check_path("/".join([*before, "..", *after]))
    assert ei.value.reason == Reason.PATH_ESCAPE


@settings(deadline=None)
@given(path)
def test_absolute_path_is_a_path_escape(p: str) -> None:
    with pytest.raises(VerificationError) as ei:
        check_path("/" + p)
    assert ei.value.reason == Reason.PATH_ESCAPE


@settings(deadline=None)
@given(st.lists(segment, min_size=1, max_size=3), st.sampled_from(["", "."]), st.integers(0, 3))
def test_empty_or_dot_parts_are_invalid(parts: list[str], bad: str, at: int) -> None:
    parts.insert(min(at, len(parts)), bad)
    with pytest.raises(VerificationError) as ei:
        check_path("/".join(parts))
    assert ei.value.reason in (Reason.INVALID_PATH, Reason.PATH_ESCAPE)
    assert ei.value.reason == (Reason.PATH_ESCAPE if parts[0] == "" else Reason.INVALID_PATH)


@settings(deadline=None)
@given(path, st.sampled_from(["\\", "\x00", "\n", "\x1f"]))
def test_backslash_and_control_characters_are_invalid(p: str, c: str) -> None:
    with pytest.raises(VerificationError) as ei:
        check_path(p + c)
    assert ei.value.reason == Reason.INVALID_PATH


@settings(deadline=None)
@given(path)
def test_non_nfc_paths_are_invalid(p: str) -> None:
    nfd = unicodedata.normalize("NFD", p + "é")
    with pytest.raises(VerificationError) as ei:
        check_path(nfd)
    assert ei.value.reason == Reason.INVALID_PATH


@settings(deadline=None)
@given(unique_entries(), st.randoms(use_true_random=False))
def test_canonical_form_is_order_independent_and_idempotent(entries: list[FileEntry], rnd) -> None:
    canon = canonical_entries(entries)
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    assert canonical_entries(shuffled) == canon
    assert canonical_entries(canon) == canon
    assert manifest_digest(canonical_entries(shuffled)) == manifest_digest(canon)
    names = [e.name.encode() for e in canon]
    assert names == sorted(names)


@settings(deadline=None)
@given(unique_entries())
def test_canonical_json_roundtrips(entries: list[FileEntry]) -> None:
    canon = canonical_entries(entries)
    data = canonical_json(canon)
    assert entries_from_json(json.loads(data)) == canon
    # No whitespace and sorted keys: re-serialising the parsed JSON canonically is byte-identical.
    assert json.dumps(json.loads(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() == data


@settings(deadline=None)
@given(unique_entries(min_size=1), st.data())
def test_any_change_changes_the_digest(entries: list[FileEntry], data) -> None:
    canon = canonical_entries(entries)
    i = data.draw(st.integers(0, len(canon) - 1))
    field = data.draw(st.sampled_from(["name", "size", "digest"]))
    e = canon[i]
    if field == "name":
        new_name = data.draw(path)
        assume(all(new_name.casefold() != x.name.casefold() for x in canon))
        changed = FileEntry(new_name, e.size, e.digest)
    elif field == "size":
        changed = FileEntry(e.name, e.size + data.draw(st.integers(1, 10)), e.digest)
    else:
        d = data.draw(hexdigest)
        assume(d != e.digest)
        changed = FileEntry(e.name, e.size, d)
    other = canonical_entries([*canon[:i], changed, *canon[i + 1 :]])
    assert manifest_digest(other) != manifest_digest(canon)


@settings(deadline=None)
@given(unique_entries(min_size=1), st.data())
def test_duplicates_and_case_collisions_are_rejected(entries: list[FileEntry], data) -> None:
    e = data.draw(st.sampled_from(entries))
    with pytest.raises(VerificationError) as ei:
        canonical_entries([*entries, e])
    assert ei.value.reason == Reason.DUPLICATE_ENTRY
    base = data.draw(st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True))
    assume(all(x.name.casefold() != base for x in entries))
    variant = data.draw(st.sampled_from([base.upper(), base.capitalize(), base.swapcase()]))
    assume(variant != base)
    with pytest.raises(VerificationError) as ei:
        canonical_entries([*entries, FileEntry(base, 0, e.digest), FileEntry(variant, 1, e.digest)])
    assert ei.value.reason == Reason.CASE_COLLISION


@settings(deadline=None)
@given(unique_entries(min_size=2))
def test_non_canonical_order_is_rejected_when_parsing(entries: list[FileEntry]) -> None:
    canon = canonical_entries(entries)
    with pytest.raises(VerificationError) as ei:
        entries_from_json([e.to_json() for e in reversed(canon)])
    assert ei.value.reason == Reason.MALFORMED_STATEMENT


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(path, st.binary(max_size=64), min_size=1, max_size=8))
def test_scanned_tree_matches_what_was_written(files: dict[str, bytes]) -> None:
    names = list(files)
    # A path cannot be both a file and a directory, and case-colliding paths are refused by design.
    assume(len({n.casefold() for n in names}) == len(names))
    assume(not any(b.startswith(a + "/") for a in names for b in names))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n, content in files.items():
            p = root / n
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content)
        entries = build_manifest(root, jobs=2)
    assert [e.name for e in entries] == sorted(names, key=lambda n: n.encode())
    assert all(e.size == len(files[e.name]) for e in entries)
