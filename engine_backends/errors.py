"""Errors an engine raises; the service maps each to one gRPC status code."""

from __future__ import annotations


class EngineError(Exception):
    """Base class. ``str()`` of every subclass is safe to show to a client."""


class InvalidRequestError(EngineError):
    """The request cannot be served as given (maps to INVALID_ARGUMENT).

    Attributes:
        field: the request field at fault, in the contract's naming (``prompt``,
            ``sampling_params.lora_name``, ``messages``, ``token_ids`` ...).
        description: what is wrong, for the client.
    """

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


class UnknownLoraError(EngineError):
    """The named LoRA adapter is not loaded for this model (maps to NOT_FOUND)."""


class EngineUnavailableError(EngineError):
    """The engine is not running (starting, stopped or dead; maps to UNAVAILABLE)."""


class EngineDeadError(EngineUnavailableError):
    """The engine died (its process exited or it errored) and will not serve again in this
    process (maps to UNAVAILABLE without a retry hint: retrying here cannot succeed)."""


class EngineAbortedError(EngineError):
    """The request was aborted (``Engine.abort``) before it produced its result (maps to
    CANCELLED)."""


class EngineFailureError(EngineError):
    """The engine failed the request for a reason that is not the client's (maps to INTERNAL)."""


class PlatformError(EngineError):
    """The requested device cannot be used here, e.g. its vLLM platform plugin is missing."""
