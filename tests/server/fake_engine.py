"""An ``Engine`` (engine_backends.protocol) without vLLM, for tests of the service's state
handling that need no real generation: it can be told to die, as a killed engine core does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from engine_backends.errors import EngineDeadError, EngineUnavailableError
from engine_backends.protocol import (
    CompletionChunk,
    EmbedResult,
    EngineLoad,
    FinishReason,
    GenerateInput,
    GenerationUpdate,
    ModelInfo,
    ModelKind,
)


class FakeEngine:
    """Generates one token (id 7, text "x") per request; ``dead = True`` makes it fail as a
    dead vLLM engine does (``check_health`` and every call raise EngineDeadError)."""

    def __init__(self, name: str, kind: ModelKind = "generate") -> None:
        self.dead = False
        self.started = False
        self.model_path: Path | None = None
        self.lora: dict[str, Path] = {}
        self._info = ModelInfo(name, kind, 256, 100, "float32", "fake", "0", "cpu", 20)

    @property
    def info(self) -> ModelInfo:
        return self._info

    def use_files(self, model_path: Path, lora_adapters: Mapping[str, Path]) -> None:
        self.model_path = model_path
        self.lora = dict(lora_adapters)

    async def start(self) -> None:
        self.started = True

    def _alive(self) -> None:
        if not self.started:
            raise EngineUnavailableError("not started")
        if self.dead:
            raise EngineDeadError(f"model {self._info.name!r}: the engine is dead")

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        self._alive()
        chunk = CompletionChunk(0, "x", [7], FinishReason.LENGTH)
        yield GenerationUpdate(request.request_id, [chunk], 1, 0, True)

    async def abort(self, request_id: str) -> bool:
        return False

    def auto_tool_calls(self, tools):
        """No tool-call parser (``info.tool_call_parser`` is None)."""
        return None

    async def embed(
        self, request_id: str, inputs: Sequence[str | Sequence[int]], normalize: bool | None, dimensions=None
    ) -> EmbedResult:
        self._alive()
        return EmbedResult([[1.0] for _ in inputs], len(inputs))

    async def tokenize(self, text: str, add_special_tokens: bool) -> list[int]:
        self._alive()
        return [1] * len(text)

    async def detokenize(self, token_ids: Sequence[int], skip_special_tokens: bool) -> str:
        self._alive()
        return "x" * len(token_ids)

    async def check_health(self) -> None:
        self._alive()

    def load(self) -> EngineLoad:
        return EngineLoad(0, 0, 0.0)

    async def shutdown(self) -> None:
        self.started = False
