"""Engine results → xinserve.v1 messages."""

from __future__ import annotations

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


def positions(items: list[list[TokenLogprob]] | None) -> list[common_pb2.PositionLogprobs]:
    if not items:
        return []
    return [
        common_pb2.PositionLogprobs(
            candidates=[
                common_pb2.TokenLogprob(
                    token_id=c.token_id, logprob=c.logprob, rank=c.rank, decoded_token=c.decoded_token
                )
                for c in pos
            ]
        )
        for pos in items
    ]


def completion_output(chunk: CompletionChunk) -> inference_pb2.CompletionOutput:
    out = inference_pb2.CompletionOutput(
        index=chunk.index,
        text=chunk.text,
        token_ids=chunk.token_ids,
        finish_reason=FINISH_REASONS[chunk.finish_reason],
        logprobs=positions(chunk.logprobs),
    )
    if chunk.stop_string is not None:
        out.stop_string = chunk.stop_string
    elif chunk.stop_token_id is not None:
        out.stop_token_id = chunk.stop_token_id
    if chunk.cumulative_logprob is not None:
        out.cumulative_logprob = chunk.cumulative_logprob
    return out


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
