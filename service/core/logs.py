"""Logging with structlog: JSON lines when stderr is not a terminal, key-value otherwise.

Request id and trace id are bound per call through ``structlog.contextvars``. Never log
prompt text, generated text, tokens, keys or secrets: log sizes, ids and codes. An exception
is logged by its type (and, at debug level, its frames), never by its message.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

import structlog


def configure(log_format: str = "auto", level: str = "info") -> None:
    """Configure structlog and the stdlib root logger (which vLLM's loggers propagate to)."""
    json_output = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    numeric = getattr(logging, level.upper(), logging.INFO)
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_output else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.types.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        ExceptionSummary(frames=numeric <= logging.DEBUG, text=not json_output),
    ]
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Libraries' stdlib logs (vLLM, grpc, transformers) go through the same renderer, so a
    # JSON log stays one JSON object per line. vLLM leaves logging to us when
    # VLLM_CONFIGURE_LOGGING=0 is set before it is imported (see quiet_engine_logs).
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(processor=renderer, foreign_pre_chain=shared))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(numeric, logging.WARNING))


REFUSAL_LOG_INTERVAL_S = 10.0
"""Refusals a peer can repeat for free (connections over a cap, bodies past a share) are logged
at most once per this many seconds per reason, with the number refused since."""


class ExceptionSummary:
    """structlog processor: an event's ``exc_info`` becomes ``exception``, a list (outermost
    first, then each ``__cause__``/``__context__``) of ``{"type": "module.QualName"}``, with
    ``"frames": [{"filename", "lineno", "name"}]`` (innermost last) only when ``frames`` is set
    (debug level). With ``text`` (the console renderer) the same as lines of text. The
    exception's message is never logged: it may quote a prompt, a path or a secret. Applied to
    structlog events and to stdlib records (vLLM, grpc) alike.
    """

    _MAX_CHAIN = 8

    def __init__(self, frames: bool, text: bool = False) -> None:
        self.frames = frames
        self.text = text

    def __call__(self, logger: object, method: str, event_dict: structlog.types.EventDict) -> structlog.types.EventDict:
        exc_info = event_dict.pop("exc_info", None)
        exc = _exception_of(exc_info)
        if exc is not None:
            chain = self._chain(exc)
            event_dict["exception"] = _as_text(chain) if self.text else chain
        return event_dict

    def _chain(self, exc: BaseException) -> list[dict[str, object]]:
        chain: list[dict[str, object]] = []
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen and len(chain) < self._MAX_CHAIN:
            seen.add(id(current))
            kind = type(current)
            entry: dict[str, object] = {"type": f"{kind.__module__}.{kind.__qualname__}"}
            if self.frames:
                entry["frames"] = [
                    {"filename": f.filename, "lineno": f.lineno, "name": f.name}
                    for f in traceback.extract_tb(current.__traceback__)
                ]
            chain.append(entry)
            current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
        return chain


def _as_text(chain: list[dict[str, object]]) -> str:
    lines: list[str] = []
    for i, entry in enumerate(chain):
        lines.append(f"{'caused by ' if i else ''}{entry['type']}")
        for frame in entry.get("frames") or []:  # type: ignore[attr-defined]
            lines.append(f'  File "{frame["filename"]}", line {frame["lineno"]}, in {frame["name"]}')
    return "\n".join(lines)


def _exception_of(exc_info: object) -> BaseException | None:
    if exc_info is None or exc_info is False:
        return None
    if isinstance(exc_info, BaseException):
        return exc_info
    if exc_info is True:
        return sys.exc_info()[1]
    if isinstance(exc_info, tuple) and len(exc_info) == 3 and isinstance(exc_info[1], BaseException):
        return exc_info[1]
    return None


def quiet_engine_logs() -> None:
    """Call before vLLM is imported: it then logs through the root logger, warnings only."""
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
