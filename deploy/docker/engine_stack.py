"""Install xinserve into a vendor's vLLM image without changing the image's engine stack.

The engine stack is what the vendor built its vLLM against: vllm and its chip plugin, torch and
the vendor's torch builds (torch_npu, torch_mlu, ...), triton and the vendor's triton, and the
transformers, tokenizers and numpy the image carries. ``install`` runs pip as the Dockerfile
needs it:

1. constraints ``name==version`` for every engine-stack distribution installed (``constraints``);
2. ``pip install --dry-run --report`` of the requested wheels with those constraints; refused if
   the report would install or change any engine-stack distribution (``check_report``);
3. the install itself with the same constraints;
4. afterwards the engine-stack versions must equal the constraints and ``pip check`` must report
   no problem that it did not report before (the vendor's image may already carry some).

Usage (exit 0 when installed, 1 when refused, the reason on stderr)::

    python3 engine_stack.py install [pip install arguments...]
    python3 engine_stack.py constraints          # print the constraints only

Standard library only: it runs in the vendor's image before anything is installed.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

ENGINE_STACK_NAMES = frozenset({"transformers", "tokenizers", "numpy", "xformers", "flashinfer-python"})
"""Engine-stack distributions by exact (normalized) name; see also ``ENGINE_STACK_PREFIXES``."""
ENGINE_STACK_PREFIXES = ("vllm", "torch", "triton", "pytorch-triton", "intel-extension-for-pytorch")
"""Name prefixes of engine-stack distributions: vllm-ascend, torch-npu, torch-mlu, triton-ascend, ..."""


class EngineStackChanged(Exception):
    """The install would change, or changed, the vendor's engine stack; the message says which."""


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_engine_stack(name: str) -> bool:
    """Whether the distribution ``name`` belongs to the image's engine stack."""
    n = normalize(name)
    return n in ENGINE_STACK_NAMES or any(n == p or n.startswith(p + "-") for p in ENGINE_STACK_PREFIXES)


def installed() -> dict[str, str]:
    """{normalized name: version} of the distributions importable by this interpreter."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            out.setdefault(normalize(name), dist.version)
    return out


def constraints(dists: Mapping[str, str]) -> list[str]:
    """``name==version`` for each engine-stack distribution of ``dists``, sorted.

    A local version label (``2.10.0+cpu``) is kept: pip compares it exactly.
    """
    return sorted(f"{name}=={version}" for name, version in dists.items() if is_engine_stack(name))


def check_report(report: Mapping[str, object]) -> None:
    """Refuse a ``pip install --report`` that installs or changes an engine-stack distribution.

    Raises:
        EngineStackChanged: naming each such distribution and the version pip chose.
    """
    touched = []
    for item in report.get("install", []) or []:  # type: ignore[union-attr]
        meta = item.get("metadata", {})
        if is_engine_stack(meta.get("name", "")):
            touched.append(f"{meta.get('name')} {meta.get('version')}")
    if touched:
        raise EngineStackChanged(f"installing would change the image's engine stack: {', '.join(sorted(touched))}")


def check_unchanged(before: Mapping[str, str], after: Mapping[str, str]) -> None:
    """Refuse if an engine-stack distribution of ``before`` has another version (or is gone) in ``after``.

    Raises:
        EngineStackChanged: naming each changed distribution, before -> after.
    """
    changed = [
        f"{name} {version} -> {after.get(name, 'removed')}"
        for name, version in sorted(before.items())
        if is_engine_stack(name) and after.get(name) != version
    ]
    added = [f"{name} {after[name]} (new)" for name in sorted(set(after) - set(before)) if is_engine_stack(name)]
    if changed or added:
        raise EngineStackChanged(f"the image's engine stack changed: {', '.join(changed + added)}")


def new_problems(before: Iterable[str], after: Iterable[str]) -> list[str]:
    """``pip check`` lines present after the install and not before."""
    seen = set(before)
    return [line for line in after if line and line not in seen]


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 (this interpreter's pip with the build's own arguments)
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )


def _pip_check() -> list[str]:
    proc = _pip("check")
    return [line for line in proc.stdout.splitlines() if line and not line.startswith("No broken requirements")]


def install(pip_args: list[str]) -> None:
    """Run the four steps of the module docstring with ``pip install`` arguments ``pip_args``.

    Raises:
        EngineStackChanged: step 2 or 4 refused (the message says what changed).
        RuntimeError: pip failed (its output is in the message).
    """
    before = installed()
    problems_before = _pip_check()
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp, "engine-stack.txt")
        pins.write_text("\n".join(constraints(before)) + "\n")
        report_path = Path(tmp, "report.json")
        dry = _pip("install", "--dry-run", "--quiet", "--report", str(report_path), "-c", str(pins), *pip_args)
        if dry.returncode != 0:
            raise RuntimeError(f"pip cannot install xinserve beside this image's engine stack:\n{dry.stderr}")
        check_report(json.loads(report_path.read_text()))
        done = _pip("install", "-c", str(pins), *pip_args)
        if done.returncode != 0:
            raise RuntimeError(f"pip install failed:\n{done.stdout}\n{done.stderr}")
    check_unchanged(before, installed())
    problems = new_problems(problems_before, _pip_check())
    if problems:
        raise EngineStackChanged("pip check reports new problems after installing xinserve:\n" + "\n".join(problems))


def main(argv: list[str]) -> int:
    if argv[:1] == ["constraints"]:
        print("\n".join(constraints(installed())))
        return 0
    if argv[:1] == ["install"] and len(argv) > 1:
        try:
            install(argv[1:])
        except (EngineStackChanged, RuntimeError) as exc:
            print(f"engine_stack: {exc}", file=sys.stderr)
            return 1
        pins = constraints(installed())
        print(f"engine_stack: installed; engine stack unchanged ({len(pins)} distributions): {' '.join(pins)}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
