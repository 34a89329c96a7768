"""The exit codes of the ``xinserve`` commands of ``service`` (``serve``, ``devices``, ``token``),
one list (README, *Exit codes*; ``xinserve serve --help``).

``python -m service.healthcheck`` imports nothing of ``service`` and keeps its own two codes
(0 SERVING, 1 otherwise); ``trust.cli`` and ``audit.cli`` (keys, sign, verify, audit) keep
theirs: 0 ok, 1 failed, 2 usage, 3 environment.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """A process exit status (``int`` values, as ``sys.exit`` takes them)."""

    OK = 0
    """Stopped cleanly; ``devices``: every device read and healthy."""
    DEGRADED = 1
    """``devices``: a device is degraded, warning or critical."""
    CONFIG = 2
    """Invalid configuration or usage (the message names each bad option)."""
    ENVIRONMENT = 3
    """Environment error: device plugin missing, port in use, bad trust store or token file,
    unusable TLS certificate or key, data_dir not writable, engine not installed."""
    NO_MODEL = 4
    """No model could be served."""
    REFUSED = 5
    """A fail-closed check refused the start (the running image's signature did not verify)."""
    AUDIT = 6
    """The audit log cannot be opened or its stored log does not verify."""
    ENGINE_DIED = 7
    """A model's engine died while serving (``service.runtime.engine_watch``)."""
    INTERRUPTED = 130
    """Interrupted by SIGINT (Ctrl-C) outside ``serve``'s own handling (128 + SIGINT)."""
