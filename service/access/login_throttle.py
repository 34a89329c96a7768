"""Failed-login throttling: after ``auth.max_failed_logins`` failed authentications within
``auth.failed_login_window_s`` from one peer host (or for one principal, e.g. with an
expired token), that peer or principal is locked out for ``auth.lockout_s``: every call that
presents a bearer token from that peer (or as that principal) is refused with
RESOURCE_EXHAUSTED (reason ``LOGIN_THROTTLED``, RetryInfo: the time left), and each refusal
is audited like any call. Calls without a token (client-certificate or anonymous) are not
guesses at a token and are not refused by a peer's lockout, so one client behind a shared
address (NAT, proxy) cannot lock certificate users out. A successful login clears the
peer's failures.

Counters live in memory (per process); all methods run on the event loop.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import grpc

from service.core.status import RpcError
from xinserve_client.addresses import target_host


class LoginThrottle:
    """Sliding-window failure counts and lockouts, keyed by ``peer:<host>`` or ``principal:<name>``.

    Args:
        max_failures: failures within the window that trigger a lockout.
        window_s: the window, seconds.
        lockout_s: how long a lockout lasts, seconds.
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(
        self, max_failures: int, window_s: float, lockout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.lockout_s = lockout_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}

    def check(self, *keys: str) -> None:
        """Refuse a locked-out peer or principal.

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
                "LOGIN_THROTTLED",
                retry_after_s=until - now,
            )

    def failed(self, *keys: str) -> None:
        """Count a failed login for each key; lock a key out once it reaches the limit."""
        now = self._clock()
        for key in keys:
            times = self._failures.setdefault(key, deque())
            times.append(now)
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if len(times) >= self.max_failures:
                self._locked_until[key] = now + self.lockout_s
                del self._failures[key]

    def succeeded(self, *keys: str) -> None:
        for key in keys:
            self._failures.pop(key, None)


def peer_host(peer: str) -> str:
    """The host part of a transport peer, without brackets or port
    (``xinserve_client.addresses.target_host``): ``ipv4:127.0.0.1:5000`` → ``127.0.0.1``,
    ``ipv6:[::1]:5000`` and ``ipv6:%5B::1%5D:5000`` → ``::1``; ``unix`` for a unix-socket peer."""
    return target_host(peer) or "unix"
