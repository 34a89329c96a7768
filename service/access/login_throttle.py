"""Failed-login throttling, in three budgets, each a sliding window of
``auth.failed_login_window_s``:

* per source address (``peer:<host>``): ``auth.max_failed_logins`` failures lock the address
  out for ``auth.lockout_s``;
* per principal (``auth.max_failed_logins_per_principal``, locked out for ``auth.lockout_s``):
  the principal a refused credential names (``principal:<name>``, an expired token), the
  presented token itself (``token:<first 16 hex digits of its SHA-256>``, one wrong token
  replayed from many addresses) and the client certificate beside a refused token
  (``certificate:<subject>``, its ``sha256:<fingerprint>`` when the subject is empty);
* global (``global``): ``auth.max_failed_logins_global`` failures from all sources together
  lock every token login out for ``auth.global_lockout_s``.

While a key is locked out, every call that presents a bearer token under it (from that peer,
with that token or certificate, or, for ``global``, any token) is refused with
RESOURCE_EXHAUSTED (reason ``LOGIN_THROTTLED``, RetryInfo: the time left), and each refusal
is audited like any call; a principal's lockout also refuses that principal's calls once it
is identified. Calls without a token (client-certificate or anonymous) are not guesses at a
token and are not refused by a peer's, a certificate's or the global lockout, so one client
behind a shared address (NAT, proxy) cannot lock certificate users out. A successful login
clears the peer's failures. A lockout's start is reported once (``failed`` returns it; the
call core audits it as ``login_lockout``); refused calls during it are not failures and start
nothing, so every lockout costs its budget of failed logins.

Counters live in memory (per process), for at most ``MAX_TRACKED_KEYS`` keys of each kind
(failures, lockouts): beyond that the oldest go first. All methods run on the event loop.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from service.core.reasons import Reason
from service.core.status import RpcError
from xinserve_client.addresses import target_host

GLOBAL = "global"
"""The key of the global failure budget."""

MAX_TRACKED_KEYS = 65_536
"""Keys with failures (and keys locked out) kept at most; the oldest are dropped first."""

_PRINCIPAL_KINDS = frozenset({"principal", "token", "certificate"})


@dataclass(frozen=True)
class Lockout:
    """A lockout that just started.

    Attributes:
        key: the locked key (``peer:<host>``, ``principal:<name>``, ``token:<hex>``,
            ``certificate:<name>``, ``global``).
        failures: failed logins within the window that started it.
        window_s: the window, seconds.
        lockout_s: how long it lasts, seconds.
    """

    key: str
    failures: int
    window_s: float
    lockout_s: float

    @property
    def scope(self) -> str:
        """``peer``, ``principal``, ``token``, ``certificate`` or ``global``."""
        return self.key.partition(":")[0]


class LoginThrottle:
    """Sliding-window failure counts and lockouts, keyed as in the module docstring.

    Args:
        max_failures: failures of one peer within the window that lock it out.
        window_s: the window, seconds (for every budget).
        lockout_s: how long a peer's or a principal's lockout lasts, seconds.
        clock: monotonic seconds (tests may pass their own).
        max_principal_failures: failures of one principal, token or certificate that lock it
            out (default: ``max_failures``).
        max_global_failures: failures of all sources together that lock every token login
            out (default: no global budget).
        global_lockout_s: how long the global lockout lasts, seconds (default: ``lockout_s``).
    """

    def __init__(
        self,
        max_failures: int,
        window_s: float,
        lockout_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_principal_failures: int | None = None,
        max_global_failures: int | None = None,
        global_lockout_s: float | None = None,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.lockout_s = lockout_s
        self.max_principal_failures = max_principal_failures or max_failures
        self.max_global_failures = max_global_failures
        self.global_lockout_s = lockout_s if global_lockout_s is None else global_lockout_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}

    def _budget(self, key: str) -> tuple[int | None, float]:
        """(failures that lock ``key`` out, or None for no budget; its lockout in seconds)."""
        if key == GLOBAL:
            return self.max_global_failures, self.global_lockout_s
        if key.partition(":")[0] in _PRINCIPAL_KINDS:
            return self.max_principal_failures, self.lockout_s
        return self.max_failures, self.lockout_s

    def check(self, *keys: str) -> None:
        """Refuse a locked-out key.

        Raises:
            RpcError: RESOURCE_EXHAUSTED, reason LOGIN_THROTTLED, with the time left as RetryInfo.
        """
        now = self._clock()
        for key in keys:
            until = self._locked_until.get(key)
            if until is None:
                continue
            if until <= now:
                del self._locked_until[key]
                continue
            raise RpcError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "too many failed logins; try again later",
                Reason.LOGIN_THROTTLED,
                retry_after_s=until - now,
            )

    def failed(self, *keys: str) -> list[Lockout]:
        """Count a failed login for each key; lock a key out once it reaches its budget.

        Returns:
            The lockouts this failure started (none for a key already locked out).
        """
        now = self._clock()
        started: list[Lockout] = []
        for key in keys:
            limit, lockout_s = self._budget(key)
            if limit is None:
                continue
            times = self._failures.get(key)
            if times is None:
                self._make_room(self._failures, now)
                times = self._failures[key] = deque()
            times.append(now)
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if len(times) >= limit:
                del self._failures[key]
                until = self._locked_until.get(key)
                if until is not None and until > now:
                    continue
                self._make_room(self._locked_until, now)
                self._locked_until[key] = now + lockout_s
                started.append(Lockout(key, len(times), self.window_s, lockout_s))
        return started

    def succeeded(self, *keys: str) -> None:
        for key in keys:
            self._failures.pop(key, None)

    def _make_room(self, table: dict, now: float) -> None:
        """Keep ``table`` under ``MAX_TRACKED_KEYS``: drop what has expired, then the oldest."""
        if len(table) < MAX_TRACKED_KEYS:
            return
        if table is self._locked_until:
            for key in [k for k, until in table.items() if until <= now]:
                del table[key]
        else:
            for key in [k for k, times in table.items() if not times or times[-1] <= now - self.window_s]:
                del table[key]
        while len(table) >= MAX_TRACKED_KEYS:
            del table[next(iter(table))]


def token_key(authorization: str) -> str | None:
    """The per-token key of an ``Authorization`` value (``Bearer <token>``): ``token:`` and
    the first 16 hex digits of the token's SHA-256; None when it is not a bearer token."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return "token:" + hashlib.sha256(token.strip().encode("utf-8")).hexdigest()[:16]


def certificate_key(fingerprint: str | None, subject: str | None) -> str | None:
    """The per-certificate key of a client certificate: ``certificate:<subject>``, or
    ``certificate:sha256:<fingerprint>`` when the subject is empty; None without one."""
    if subject:
        return f"certificate:{subject}"
    return f"certificate:sha256:{fingerprint}" if fingerprint else None


def peer_host(peer: str) -> str:
    """The host part of a transport peer, without brackets or port
    (``xinserve_client.addresses.target_host``): ``ipv4:127.0.0.1:5000`` → ``127.0.0.1``,
    ``ipv6:[::1]:5000`` and ``ipv6:%5B::1%5D:5000`` → ``::1``; ``unix`` for a unix-socket peer."""
    return target_host(peer) or "unix"
