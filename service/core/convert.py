"""Engine results → xinserve.v1 messages.

``positions``/``completion_output`` build a message in one go (for a streamed step, a few
tokens); the ``*_bounded`` coroutines build a whole completion's logprobs a slice at a time,
yielding to the event loop between slices, so that health checks and other calls are served
while a large reply is assembled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from engine_backends.protocol import CompletionChunk, FinishReason, TokenLogprob
from xinserve.v1 import common_pb2, inference_pb2

FINISH_REASONS = {
    None: common_pb2.FINISH_REASON_UNSPECIFIED,
    FinishReason.STOP: common_pb2.FINISH_REASON_STOP,
    FinishReason.STOP_SEQUENCE: common_pb2.FINISH_REASON_STOP_SEQUENCE,
    FinishReason.LENGTH: common_pb2.FINISH_REASON_LENGTH,
    FinishReason.CANCELLED: common_pb2.FINISH_REASON_CANCELLED,
    FinishReason.TIME_LIMIT: common_pb2.FINISH_REASON_TIME_LIMIT,
    FinishReason.ERROR: common_pb2.FINISH_REASON_ERROR,
}


SLICE_ENTRIES = 2048
"""``*_bounded``: at most this many logprob candidates are converted per event-loop iteration
(a position with more candidates is converted whole)."""


def _position(pos: Sequence[TokenLogprob]) -> common_pb2.PositionLogprobs:
    return common_pb2.PositionLogprobs(
        candidates=[
            common_pb2.TokenLogprob(token_id=c.token_id, logprob=c.logprob, rank=c.rank, decoded_token=c.decoded_token)
            for c in pos
        ]
    )


def positions(items: Sequence[Sequence[TokenLogprob]] | None) -> list[common_pb2.PositionLogprobs]:
    """Per-position logprobs as ``PositionLogprobs`` messages, in one go."""
    if not items:
        return []
    return [_position(pos) for pos in items]


async def extend_positions_bounded(
    target, items: Sequence[Sequence[TokenLogprob]] | None, max_entries: int = SLICE_ENTRIES
) -> None:
    """Append ``items`` as ``PositionLogprobs`` to the repeated field ``target`` (e.g. a
    ``CompletionOutput.logprobs``), a slice of whole positions at a time: between slices of
    at most ``max_entries`` candidates it yields to the event loop (``asyncio.sleep(0)``)."""
    if not items:
        return
    batch: list[common_pb2.PositionLogprobs] = []
    size = 0
    for pos in items:
        if batch and size + len(pos) > max_entries:
            target.extend(batch)
            batch, size = [], 0
            await asyncio.sleep(0)
        batch.append(_position(pos))
        size += len(pos)
    target.extend(batch)


def _fill_completion_fields(out: inference_pb2.CompletionOutput, chunk: CompletionChunk) -> None:
    out.index = chunk.index
    out.text = chunk.text
    out.token_ids.extend(chunk.token_ids)
    out.finish_reason = FINISH_REASONS[chunk.finish_reason]
    if chunk.stop_string is not None:
        out.stop_string = chunk.stop_string
    elif chunk.stop_token_id is not None:
        out.stop_token_id = chunk.stop_token_id
    if chunk.cumulative_logprob is not None:
        out.cumulative_logprob = chunk.cumulative_logprob


def completion_output(chunk: CompletionChunk) -> inference_pb2.CompletionOutput:
    """A whole completion as a ``CompletionOutput``, in one go."""
    out = inference_pb2.CompletionOutput()
    _fill_completion_fields(out, chunk)
    out.logprobs.extend(positions(chunk.logprobs))
    return out


async def fill_completion_output_bounded(out: inference_pb2.CompletionOutput, chunk: CompletionChunk) -> None:
    """Fill ``out`` (e.g. ``response.outputs.add()``, so nothing is copied afterwards) with a
    whole completion, its logprobs added by ``extend_positions_bounded``."""
    _fill_completion_fields(out, chunk)
    await extend_positions_bounded(out.logprobs, chunk.logprobs)


def fill_stream_message(msg, request_id: str, chunk: CompletionChunk, final_for_index: bool) -> None:
    """Fill a GenerateStreamResponse or ChatStreamResponse (same field numbers and names)."""
    msg.request_id = request_id
    msg.index = chunk.index
    msg.text = chunk.text
    msg.token_ids.extend(chunk.token_ids)
    msg.logprobs.extend(positions(chunk.logprobs))
    if final_for_index:
        msg.finish_reason = FINISH_REASONS[chunk.finish_reason]
        if chunk.stop_string is not None:
            msg.stop_string = chunk.stop_string
        elif chunk.stop_token_id is not None:
            msg.stop_token_id = chunk.stop_token_id
