"""Running a vendor tool: in a subprocess, with a timeout, a C locale and bounded output."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine_backends.devices.model import Device, DeviceToolError

MAX_OUTPUT_BYTES = 4 * 1024 * 1024
# Where vendor installers put their tools when they are not on PATH.
EXTRA_DIRS = (
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/local/Ascend/driver/tools",
    "/opt/hyhal/bin",
    "/usr/local/hyhal/bin",
    "/opt/mxdriver/bin",
    "/usr/local/neuware/bin",
    "/usr/local/xpu/bin",
)
# Other names a vendor installs the same tool under, tried in order after the first.
ALIASES: dict[str, tuple[str, ...]] = {"xpu-smi": ("xpu_smi",)}


def find_tool(name: str) -> str | None:
    """The tool's path: ``name`` then each of its ``ALIASES``, each on PATH, else in a vendor's
    usual install directory; None if absent."""
    for candidate in (name, *ALIASES.get(name, ())):
        found = shutil.which(candidate) or shutil.which(candidate, path=os.pathsep.join(EXTRA_DIRS))
        if found:
            return found
    return None


def run_tool(argv: Sequence[str], timeout: float) -> str:
    """Run ``argv`` and return its standard output (UTF-8, undecodable bytes replaced).

    The tool runs with ``LC_ALL=C`` (vendor tools translate headers otherwise), stdin closed,
    and is killed after ``timeout`` seconds.

    Raises:
        DeviceToolError: the tool is not installed, timed out, exited non-zero, or printed
            more than 4 MiB. The message names the tool and the reason, never its output
            beyond one line of stderr.
    """
    name = argv[0]
    path = find_tool(name)
    if path is None:
        names = " / ".join((name, *ALIASES.get(name, ())))
        raise DeviceToolError(f"{names} not found (not on PATH nor in the vendor's usual directories)")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        proc = subprocess.run(  # noqa: S603 - argv is a fixed vendor command line from the chip registry
            [path, *argv[1:]], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        raise DeviceToolError(f"{name} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise DeviceToolError(f"{name} could not be run: {exc.strerror}") from None
    if len(proc.stdout) > MAX_OUTPUT_BYTES:
        raise DeviceToolError(f"{name} printed more than {MAX_OUTPUT_BYTES} bytes")
    if proc.returncode != 0:
        first = proc.stderr.decode("utf-8", "replace").strip().splitlines()[:1] or [""]
        detail = f": {first[0][:200]}" if first[0] else ""
        raise DeviceToolError(f"{name} exited with status {proc.returncode}{detail}")
    return proc.stdout.decode("utf-8", "replace")


@dataclass(frozen=True)
class ToolReader:
    """A device kind read through one vendor command-line tool: run ``argv``, ``parse`` its output.

    Attributes:
        argv: the command line; its first word is the tool (found by ``find_tool``).
        parse: the parser of the tool's standard output (raises ``DeviceParseError``).
        read_with: ``(timeout seconds) -> devices``, replacing the plain run-and-parse for a kind
            that needs more than that one call (a fallback view, a second call); None otherwise.
    """

    argv: tuple[str, ...]
    parse: Callable[[str], list[Device]]
    read_with: Callable[[float], list[Device]] | None = None

    def __call__(self, timeout: float) -> list[Device]:
        """The kind's devices now, each call of the tool limited to ``timeout`` seconds.

        Raises:
            DeviceToolError: as ``run_tool``.
            DeviceParseError: the output is not in the format ``parse`` knows.
        """
        if self.read_with is not None:
            return self.read_with(timeout)
        return self.parse(run_tool(self.argv, timeout))
