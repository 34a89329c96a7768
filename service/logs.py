"""Logging with structlog: JSON lines when stderr is not a terminal, key-value otherwise.

Request id and trace id are bound per call through ``structlog.contextvars``. Never log
prompt text, generated text, tokens, keys or secrets: log sizes, ids and codes.
"""

from __future__ import annotations

import logging
import os
import sys

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
    ]
    if json_output:
        # ``exc_info`` (an engine crash's root cause) as a structured ``exception`` list of
        # {exc_type, exc_value, frames: [{filename, lineno, name}]}; never local variables.
        shared.append(
            structlog.processors.ExceptionRenderer(structlog.tracebacks.ExceptionDictTransformer(show_locals=False))
        )
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


def quiet_engine_logs() -> None:
    """Call before vLLM is imported: it then logs through the root logger, warnings only."""
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
