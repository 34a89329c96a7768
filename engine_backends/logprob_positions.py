"""vLLM's per-position logprobs read as the engine protocol's ``TokenLogprob`` lists, lazily:
one position at a time, when a consumer reaches it.

A unary completion with logprobs holds n x tokens x (logprobs + 1) candidates (131,072 at
``limits.max_logprob_entries``' default). Made into objects up front, they cost memory and,
alive together, long pauses of Python's cyclic garbage collector, during which the event
loop answers nothing. Read lazily, a position's objects live only while the reply message
is built from them (``service.core.convert`` builds it a bounded slice per event-loop iteration).

Reads the two shapes of vllm/logprobs.py (``FlatLogprobs`` and ``list[dict[int, Logprob] |
None]``) without importing vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from engine_backends.protocol import TokenLogprob


class LogprobPositions(Sequence[list[TokenLogprob]]):
    """A completion's (or a prompt's) logprobs, position by position, from vLLM's container.

    Per position the sampled (or prompt) token comes first, then the top candidates by rank,
    each token id once (as in vLLM's dict form; the flat form repeats the sampled token when
    it is among the top ``logprobs``). A position without logprobs (the first prompt token)
    is an empty list. The container must not change afterwards (vLLM hands a finished
    request's container, or a fresh slice per streamed delta).
    """

    __slots__ = ("_source",)

    def __init__(self, source: Any) -> None:
        self._source = source

    def __len__(self) -> int:
        return len(self._source)

    @overload
    def __getitem__(self, index: int) -> list[TokenLogprob]: ...

    @overload
    def __getitem__(self, index: slice) -> LogprobPositions: ...

    def __getitem__(self, index: int | slice) -> list[TokenLogprob] | LogprobPositions:
        if isinstance(index, slice):
            return LogprobPositions(self._source[index])
        return _from_dict(self._source[index])

    def __iter__(self) -> Iterator[list[TokenLogprob]]:
        source = self._source
        if hasattr(source, "start_indices"):  # vLLM's FlatLogprobs
            ids, lps, ranks, texts = source.token_ids, source.logprobs, source.ranks, source.decoded_tokens
            for start, end in zip(source.start_indices, source.end_indices, strict=True):
                seen: set[int] = set()
                position: list[TokenLogprob] = []
                for i in range(start, end):
                    tid = ids[i]
                    if tid not in seen:
                        seen.add(tid)
                        position.append(TokenLogprob(int(tid), float(lps[i]), int(ranks[i] or 0), texts[i] or ""))
                yield position
        else:
            for item in source:
                yield _from_dict(item)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LogprobPositions({len(self)} positions)"


def _from_dict(position: Any) -> list[TokenLogprob]:
    if not position:
        return []
    return [
        TokenLogprob(int(tid), float(lp.logprob), int(lp.rank or 0), lp.decoded_token or "")
        for tid, lp in position.items()
    ]


def logprob_positions(source: Any) -> LogprobPositions | None:
    """``LogprobPositions`` over vLLM's container; None when vLLM returned no logprobs."""
    return None if source is None else LogprobPositions(source)
