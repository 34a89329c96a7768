"""The contract's replies → OpenAI response objects and stream chunks (OpenAI API reference:
completions, chat completions, embeddings; vLLM's ``/tokenize``): choices, finish reasons,
usage, log-probabilities and tool calls. The requests are built in
``service.frontends.openai.request_mapping``.
"""

from __future__ import annotations

import base64
import struct
import time
from typing import Any

from service.operations.tools import ToolDelta
from xinserve.v1 import common_pb2, inference_pb2

_FINISH: dict[int, str] = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_STOP_SEQUENCE: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length",
    common_pb2.FINISH_REASON_TIME_LIMIT: "length",
    common_pb2.FINISH_REASON_CANCELLED: "abort",
    common_pb2.FINISH_REASON_ERROR: "error",
}


def merged_completions(
    replies: list[inference_pb2.GenerateResponse], n: int, request_id: str
) -> inference_pb2.GenerateResponse:
    """One ``GenerateResponse`` for the replies to a batch of prompts, as vLLM's completions
    server builds it: prompt ``p``'s output ``i`` becomes index ``p * n + i``; usage summed."""
    merged = inference_pb2.GenerateResponse(request_id=request_id)
    for p, reply in enumerate(replies):
        for output in reply.outputs:
            added = merged.outputs.add()
            added.CopyFrom(output)
            added.index = p * n + output.index
        add_usage(merged.usage, reply.usage)
    return merged


def add_usage(total: common_pb2.Usage, part: common_pb2.Usage) -> None:
    """Add ``part``'s token counts to ``total``."""
    total.prompt_tokens += part.prompt_tokens
    total.completion_tokens += part.completion_tokens
    total.cached_tokens += part.cached_tokens


# -- replies ------------------------------------------------------------------------------


def usage(u: common_pb2.Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }
    if u.cached_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": u.cached_tokens}
    return out


def finish_reason(value: int) -> str | None:
    return _FINISH.get(value)


def _sampled(position: common_pb2.PositionLogprobs, token_id: int) -> common_pb2.TokenLogprob | None:
    for c in position.candidates:
        if c.token_id == token_id:
            return c
    return None


def _top(position: common_pb2.PositionLogprobs, n: int) -> list[common_pb2.TokenLogprob]:
    """The ``n`` most likely candidates (vLLM adds the sampled token when it ranks lower)."""
    return sorted(position.candidates, key=lambda c: c.rank)[:n]


def completion_logprobs(token_ids, positions, top_n: int, offset: int = 0) -> dict[str, Any] | None:
    """OpenAI's completions ``logprobs`` object (tokens, token_logprobs, top_logprobs, text_offset)."""
    if not positions:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    at = offset
    for tid, pos in zip(token_ids, positions, strict=False):
        chosen = _sampled(pos, tid)
        text = chosen.decoded_token if chosen else ""
        tokens.append(text)
        lps.append(chosen.logprob if chosen else None)
        tops.append({c.decoded_token: c.logprob for c in _top(pos, top_n)})
        offsets.append(at)
        at += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(token_ids, positions, top_n: int) -> dict[str, Any] | None:
    """OpenAI's chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    if not positions:
        return None
    content = []
    for tid, pos in zip(token_ids, positions, strict=False):
        chosen = _sampled(pos, tid)
        text = chosen.decoded_token if chosen else ""
        content.append(
            {
                "token": text,
                "logprob": chosen.logprob if chosen else -9999.0,
                "bytes": list(text.encode("utf-8")),
                "top_logprobs": [
                    {"token": c.decoded_token, "logprob": c.logprob, "bytes": list(c.decoded_token.encode("utf-8"))}
                    for c in _top(pos, top_n)
                ],
            }
        )
    return {"content": content}


def completion_response(reply: inference_pb2.GenerateResponse, model: str, top_n: int) -> dict[str, Any]:
    return {
        "id": f"cmpl-{reply.request_id}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": o.index,
                "text": o.text,
                "logprobs": completion_logprobs(o.token_ids, o.logprobs, top_n),
                "finish_reason": finish_reason(o.finish_reason),
            }
            for o in reply.outputs
        ],
        "usage": usage(reply.usage),
    }


def _openai_calls(calls) -> list[dict[str, Any]]:
    """The contract's ``ToolCall`` messages as OpenAI ``tool_calls`` (arguments: JSON text)."""
    return [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in calls
    ]


def _tool_finish(forced: str, reason: str | None) -> str | None:
    """vLLM's and OpenAI's finish reason for forced tool calls: ``tool_calls`` for
    ``required`` (when the model stopped), ``stop`` for a named function."""
    return "tool_calls" if forced == "required" and reason == "stop" else reason


def chat_response(
    reply: inference_pb2.ChatResponse,
    model: str,
    top_n: int,
    forced: str | None = None,
    contents: dict[int, str | None] | None = None,
) -> dict[str, Any]:
    """OpenAI's ``chat.completion``. An output with ``tool_calls`` (read by the operation:
    forced by ``forced``, see ``forced_tool``, or read by the model's tool-call parser for
    ``tool_choice: "auto"``) becomes an assistant message with those ``tool_calls`` and the
    content ``contents[index]`` (``null`` for a forced call; what the parser left of the
    text for ``auto``), ``finish_reason`` ``tool_calls`` as vLLM answers (a named function:
    ``stop``); an output without them is its text."""
    choices = []
    for o in reply.outputs:
        message: dict[str, Any] = {"role": "assistant", "content": o.text}
        reason = finish_reason(o.finish_reason)
        if o.tool_calls and forced is not None:
            message = {"role": "assistant", "content": None, "tool_calls": _openai_calls(o.tool_calls)}
            reason = _tool_finish(forced, reason)
        elif o.tool_calls:
            content = (contents or {}).get(o.index)
            message = {"role": "assistant", "content": content, "tool_calls": _openai_calls(o.tool_calls)}
            reason = "tool_calls"
        choices.append(
            {
                "index": o.index,
                "message": message,
                "logprobs": chat_logprobs(o.token_ids, o.logprobs, top_n),
                "finish_reason": reason,
            }
        )
    return {
        "id": f"chatcmpl-{reply.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(reply.usage),
    }


def embedding_response(reply: inference_pb2.EmbedResponse, model: str, encoding: str) -> dict[str, Any]:
    def encode(values) -> list[float] | str:
        if encoding == "base64":  # little-endian float32, as OpenAI's API sends it
            return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")
        return list(values)

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": e.index, "embedding": encode(e.values)} for e in reply.embeddings],
        "model": model,
        "usage": {"prompt_tokens": reply.usage.prompt_tokens, "total_tokens": reply.usage.prompt_tokens},
    }


class StreamChunks:
    """Turns ``GenerateStreamResponse``/``ChatStreamResponse`` messages into OpenAI stream
    chunks (``text_completion`` / ``chat.completion.chunk``), plus the usage chunk when
    ``stream_options.include_usage`` is set."""

    def __init__(
        self,
        *,
        chat: bool,
        model: str,
        request_id: str,
        include_usage: bool,
        top_n: int,
        forced: str | None = None,
    ) -> None:
        self.chat = chat
        self.forced = forced
        self._tool_text: dict[int, list[str]] = {}
        self.model = model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id}"
        self.created = int(time.time())
        self.include_usage = include_usage
        self.top_n = top_n
        self._started: set[int] = set()

    def _chunk(self, choices: list[dict[str, Any]], usage_obj: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            out["usage"] = usage_obj
        return out

    def _tool_chunks(self, msg) -> list[dict[str, Any]]:
        """Forced tool calls, streamed as OpenAI streams them once the index's JSON is
        complete: per call a delta with ``index``, ``id``, ``type`` and ``function.name``
        (``arguments`` empty), then one with the ``arguments``; then the finish reason in an
        empty delta. Text that is not the forced JSON (cut by ``max_tokens``) is sent as
        content."""
        parts = self._tool_text.setdefault(msg.index, [])
        if msg.text:
            parts.append(msg.text)
        if not msg.finish_reason:
            return []
        assert self.forced is not None
        text = "".join(parts)
        reason = finish_reason(msg.finish_reason)
        calls = _openai_calls(msg.tool_calls)
        started: dict[str, Any] = {"role": "assistant"}
        if not calls:
            return [
                self._chunk(
                    [
                        {
                            "index": msg.index,
                            "delta": {**started, "content": text},
                            "logprobs": None,
                            "finish_reason": reason,
                        }
                    ]
                )
            ]
        out = []
        for k, call in enumerate(calls):
            function = call["function"]
            head = {
                "index": k,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            first = {**started, "content": None} if k == 0 else {}
            out.append(
                self._chunk(
                    [
                        {
                            "index": msg.index,
                            "delta": {**first, "tool_calls": [head]},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
            args = {"index": k, "function": {"arguments": function["arguments"]}}
            out.append(
                self._chunk(
                    [{"index": msg.index, "delta": {"tool_calls": [args]}, "logprobs": None, "finish_reason": None}]
                )
            )
        out.append(
            self._chunk(
                [
                    {
                        "index": msg.index,
                        "delta": {},
                        "logprobs": None,
                        "finish_reason": _tool_finish(self.forced, reason),
                    }
                ]
            )
        )
        return out

    def _auto_chunks(self, msg, reading: ToolDelta) -> list[dict[str, Any]]:
        """``tool_choice: "auto"``: the tool-call parser's reading of each message (vLLM's
        ``extract_tool_calls_streaming``, run by the operation), content and tool-call
        deltas as it returns them; the last call's arguments it held back are sent before
        the finish reason, which is ``tool_calls`` when the reply called a tool."""
        delta: dict[str, Any] = {"role": "assistant"} if reading.first else {}
        if reading.content:
            delta["content"] = reading.content
        if reading.calls:
            delta["tool_calls"] = reading.calls
        reason = finish_reason(msg.finish_reason)
        out = []
        if reason is not None and reading.called:
            if reading.rest is not None:
                if delta:
                    out.append(
                        self._chunk([{"index": msg.index, "delta": delta, "logprobs": None, "finish_reason": None}])
                    )
                delta = {"tool_calls": [reading.rest]}
            reason = "tool_calls" if reason == "stop" else reason
        if delta or reason is not None:
            out.append(self._chunk([{"index": msg.index, "delta": delta, "logprobs": None, "finish_reason": reason}]))
        return out

    def chunks(self, msg, reading: ToolDelta | None = None) -> list[dict[str, Any]]:
        """The chunks of one stream message; ``reading``: its ``ToolDelta`` for
        ``tool_choice: "auto"`` (``Inference.chat_stream_read``)."""
        out = []
        has_content = bool(msg.text or msg.token_ids or msg.finish_reason)
        if has_content and self.chat and self.forced is not None:
            out.extend(self._tool_chunks(msg))
        elif has_content and self.chat and reading is not None:
            out.extend(self._auto_chunks(msg, reading))
        elif has_content:
            reason = finish_reason(msg.finish_reason)
            if self.chat:
                delta: dict[str, Any] = {"content": msg.text} if msg.text or not reason else {}
                if msg.index not in self._started:
                    self._started.add(msg.index)
                    delta = {"role": "assistant", "content": msg.text}
                choice = {
                    "index": msg.index,
                    "delta": delta,
                    "logprobs": chat_logprobs(msg.token_ids, msg.logprobs, self.top_n),
                    "finish_reason": reason,
                }
            else:
                choice = {
                    "index": msg.index,
                    "text": msg.text,
                    "logprobs": completion_logprobs(msg.token_ids, msg.logprobs, self.top_n),
                    "finish_reason": reason,
                }
            out.append(self._chunk([choice]))
        if msg.HasField("usage") and self.include_usage:
            out.append(self._chunk([], usage(msg.usage)))
        return out


def tokenize_response(reply: inference_pb2.TokenizeResponse) -> dict[str, Any]:
    """vLLM's ``/tokenize`` reply: ``count``, ``max_model_len``, ``tokens``, ``token_strs``."""
    ids = list(reply.token_ids)
    return {"count": len(ids), "max_model_len": reply.max_model_len, "tokens": ids, "token_strs": None}
