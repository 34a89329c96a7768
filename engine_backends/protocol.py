"""The ``Engine`` protocol the service talks to, and the neutral types it exchanges.

Nothing here imports vLLM: the service builds these types from the gRPC request after
validating it, and each backend translates them to its engine's API.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

ModelKind = Literal["generate", "embed"]
StructuredKind = Literal["json_schema", "regex", "choice", "grammar", "json_object"]


class FinishReason(enum.Enum):
    """Why a completion ended (mirrors xinserve.v1.FinishReason)."""

    STOP = "stop"  # EOS or a stop token id
    STOP_SEQUENCE = "stop_sequence"
    LENGTH = "length"
    CANCELLED = "cancelled"
    TIME_LIMIT = "time_limit"
    ERROR = "error"


@dataclass(frozen=True)
class StructuredOutput:
    """One structured-output constraint; ``value`` is text, a tuple of choices, or True."""

    kind: StructuredKind
    value: str | tuple[str, ...] | bool


@dataclass(frozen=True)
class SamplingOptions:
    """Validated sampling parameters, named as vLLM's ``SamplingParams``; None = model default."""

    n: int | None = None
    max_tokens: int | None = None
    min_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool | None = None
    ignore_eos: bool | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool | None = None
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    structured_output: StructuredOutput | None = None
    lora_name: str | None = None


@dataclass(frozen=True)
class GenerateInput:
    """One generation request: exactly one of prompt, prompt_token_ids or messages is set."""

    request_id: str
    sampling: SamplingOptions
    prompt: str | None = None
    prompt_token_ids: Sequence[int] | None = None
    messages: Sequence[Mapping[str, Any]] | None = None
    """Chat messages as chat templates take them: ``role``, ``content`` (text), optional
    ``name``, ``tool_calls`` (``[{"id", "type": "function", "function": {"name",
    "arguments": {...}}}]``) and ``tool_call_id``."""
    tools: Sequence[Mapping[str, Any]] | None = None
    """Chat only: OpenAI ``tools`` dicts passed to the chat template (``tools=``)."""
    add_generation_prompt: bool = True
    allow_special_tokens: bool = False
    """Chat only: message contents may carry special-token strings as control tokens."""
    refuse_prompt_special_tokens: bool = False
    """Text ``prompt`` only: refuse (``InvalidRequestError`` on ``prompt``) a prompt holding one
    of the tokenizer's special-token strings, instead of tokenizing it into that control token
    as vLLM does (``add_special_tokens=True``)."""
    stream: bool = False
    trace_headers: Mapping[str, str] | None = None


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    rank: int
    decoded_token: str


@dataclass
class CompletionChunk:
    """Part of one completion: a delta when streaming, the whole completion otherwise."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason | None = None
    stop_string: str | None = None
    stop_token_id: int | None = None
    logprobs: Sequence[Sequence[TokenLogprob]] | None = None
    cumulative_logprob: float | None = None


@dataclass
class GenerationUpdate:
    """One step of a generation. ``finished`` is True on the last update of the request."""

    request_id: str
    completions: list[CompletionChunk]
    prompt_tokens: int
    cached_tokens: int
    finished: bool
    prompt_logprobs: Sequence[Sequence[TokenLogprob]] | None = None


@dataclass(frozen=True)
class EmbedResult:
    """Vectors (one per input, input order) and the prompt tokens they took."""

    vectors: list[list[float]]
    prompt_tokens: int


@dataclass(frozen=True)
class ModelInfo:
    """What the service needs to know about a loaded model."""

    name: str
    kind: ModelKind
    max_model_len: int
    vocab_size: int
    dtype: str
    backend: str
    backend_version: str
    device: str
    max_logprobs: int
    lora_adapters: tuple[str, ...] = ()
    prefix_caching: bool = False
    tool_call_parser: str | None = None
    """vLLM tool parser (``ToolParserManager`` name) reading ``tool_choice: "auto"`` replies;
    None: ``auto`` is refused."""


@dataclass(frozen=True)
class EngineLoad:
    """Instantaneous load: requests running and waiting in the engine, KV-cache use in [0, 1]."""

    running: int
    waiting: int
    kv_cache_usage: float


class Engine(Protocol):
    """A loaded model behind an inference engine.

    Errors: methods raise ``engine_backends.errors`` exceptions only:
    ``InvalidRequestError``, ``UnknownLoraError``, ``EngineUnavailableError``,
    ``EngineFailureError``.
    """

    @property
    def info(self) -> ModelInfo: ...

    def auto_tool_calls(self, tools: Sequence[Mapping[str, Any]]) -> Any:
        """A reader of one reply's tool calls (``engine_backends.tool_calls.AutoToolCalls``)
        with the model's ``info.tool_call_parser``; None when it has none."""
        ...

    def use_files(self, model_path: Path, lora_adapters: Mapping[str, Path]) -> None:
        """Before ``start``: load the model from ``model_path`` and serve exactly the LoRA
        adapters in ``lora_adapters`` (name -> directory), e.g. verified private copies."""

    async def start(self) -> None:
        """Load the model and start the engine. Raises EngineFailureError or PlatformError."""

    def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        """Stream updates; closing the iterator (or cancelling its task) aborts the request."""
        ...

    async def abort(self, request_id: str) -> bool:
        """Abort a running request; False if no such request is running."""
        ...

    async def embed(
        self,
        request_id: str,
        inputs: Sequence[str | Sequence[int]],
        normalize: bool | None,
        dimensions: int | None = None,
    ) -> EmbedResult:
        """Embed texts or token-id lists (pooling models only), one vector per input.

        ``dimensions``: keep the first that many of each vector before normalizing (vLLM's
        ``PoolingParams.dimensions``, for Matryoshka models only).

        Raises:
            InvalidRequestError: naming ``inputs[i]`` (too long for the context),
                ``inputs[i][j]`` (a token id outside the vocabulary) or ``dimensions`` (the
                model is no Matryoshka model, or does not offer that size).
        """
        ...

    async def tokenize(self, text: str, add_special_tokens: bool) -> list[int]: ...

    async def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool) -> str: ...

    async def check_health(self) -> None:
        """Raise EngineUnavailableError if the engine is dead."""

    def load(self) -> EngineLoad: ...

    async def shutdown(self) -> None: ...
