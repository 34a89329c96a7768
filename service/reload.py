"""Credentials and trust store at start and on reload (SIGHUP), each change audited.

``authenticator_for`` builds the authenticator of ``auth.*`` (token file permissions, syntax,
roles against the policy). ``Reloader.reload`` re-reads the token file and the trust store
directory and swaps them in only when both load; every reload is one audit event per source
naming what changed (principals added/removed/with new roles or a new token; key ids
trusted/untrusted/revoked/unrevoked), never a token or its digest. A reload that fails keeps
the old state and is recorded with outcome ``FAILED_PRECONDITION`` and a reason.
``changed_config_fields`` lists the dotted names of configuration fields that differ from
their defaults (names only, never values), recorded with ``config_loaded`` at start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from audit import EventType
from service.audit_trail import AuditTrail
from service.auth import Authenticator, TokenFileError, _TokenEntry, load_token_file
from service.call_core import CallCore
from service.config import Settings
from service.logs import get_logger
from service.policy import AccessPolicy, PolicyError
from trust.errors import TrustError
from trust.key_files import InsecureFileError, check_private_file
from trust.trust_store import TrustStore

log = get_logger("xinserve.reload")


def authenticator_for(settings: Settings) -> Authenticator:
    """The authenticator of ``settings.auth``: token file and mTLS role rules, checked
    against the role policy.

    Raises:
        TokenFileError: the token file is accessible to its group or others (unless
            ``auth.allow_insecure_token_file_permissions``), unreadable, malformed, names an
            unknown role, or gives a principal roles of different administrator duties
            (unless ``auth.allow_conflicting_roles``).
    """
    auth = settings.auth
    policy = AccessPolicy(auth)
    tokens: list[_TokenEntry] = []
    if auth.token_file is not None:
        try:
            check_private_file(
                auth.token_file, "the token file", allow_insecure=auth.allow_insecure_token_file_permissions
            )
            tokens = load_token_file(auth.token_file, policy.role_names)
        except InsecureFileError as exc:
            raise TokenFileError(str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"{auth.token_file}: cannot read the token file ({type(exc).__name__})") from None
    for entry in tokens:
        try:
            policy.check_principal(f"{auth.token_file}: principal {entry.principal}", entry.roles)
        except PolicyError as exc:
            raise TokenFileError(str(exc)) from None
    return Authenticator(tokens, auth.required, auth.anonymous_roles, auth.mtls_roles, auth.mtls_default_roles)


def _names(values: set[str]) -> str:
    return ",".join(sorted(values))


def token_changes(old: list[_TokenEntry], new: list[_TokenEntry]) -> dict[str, str]:
    """What changed between two token files, by principal (comma-separated names; empty
    categories omitted): ``principals_added``, ``principals_removed``, ``roles_changed``,
    ``tokens_changed`` (a principal's token or expiry was replaced)."""

    def by_principal(entries: list[_TokenEntry]) -> dict[str, set[tuple[bytes, frozenset[str], Any]]]:
        out: dict[str, set[tuple[bytes, frozenset[str], Any]]] = {}
        for e in entries:
            out.setdefault(e.principal, set()).add((e.digest, e.roles, e.not_after))
        return out

    before, after = by_principal(old), by_principal(new)
    common = before.keys() & after.keys()
    changes = {
        "principals_added": _names(after.keys() - before.keys()),
        "principals_removed": _names(before.keys() - after.keys()),
        "roles_changed": _names({p for p in common if {r for _, r, _ in before[p]} != {r for _, r, _ in after[p]}}),
        "tokens_changed": _names(
            {p for p in common if {(d, n) for d, _, n in before[p]} != {(d, n) for d, _, n in after[p]}}
        ),
    }
    return {k: v for k, v in changes.items() if v}


def trust_changes(old: TrustStore | None, new: TrustStore | None) -> dict[str, str]:
    """What changed between two trust stores (comma-separated key ids; empty categories
    omitted): ``keys_trusted``, ``keys_untrusted`` (removed from the store), ``keys_revoked``,
    ``keys_unrevoked``."""
    ok, nk = set(old.keys) if old else set(), set(new.keys) if new else set()
    orv, nrv = set(old.revoked) if old else set(), set(new.revoked) if new else set()
    changes = {
        "keys_trusted": _names(nk - ok),
        "keys_untrusted": _names(ok - nk),
        "keys_revoked": _names(nrv - orv),
        "keys_unrevoked": _names(orv - nrv),
    }
    return {k: v for k, v in changes.items() if v}


def changed_config_fields(settings: Settings) -> list[str]:
    """Dotted names of the fields set to a value other than their default (sections recursed;
    a list or mapping counts as one field). Values are never returned."""

    def walk(model: BaseModel, prefix: str) -> list[str]:
        out: list[str] = []
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                out.extend(walk(value, f"{prefix}{name}."))
                continue
            if info.default_factory is not None:
                default = info.default_factory()  # type: ignore[call-arg]
            else:
                default = info.default
            if value != default:
                out.append(prefix + name)
        return out

    return walk(settings, "")


@dataclass
class Reloader:
    """Reloads the token file into ``core`` and the trust store via ``set_trust_store``.

    Args:
        settings: the server's configuration (``auth.*``, ``trust.trust_store_dir``).
        core: the call core whose authenticator is replaced.
        audit: where each reload is recorded.
        trust_store: the trust store in use (``None`` without ``trust.trust_store_dir``).
        set_trust_store: called with the new store after a successful reload.
    """

    settings: Settings
    core: CallCore
    audit: AuditTrail | None
    trust_store: TrustStore | None
    set_trust_store: Callable[[TrustStore | None], None]
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def reload(self) -> bool:
        """Reload both sources; ``True`` if both loaded (and were swapped in), else the old
        state stays and the failure is recorded. Reloads run one at a time. Never raises."""
        async with self._lock:
            return await self._reload()

    async def _reload(self) -> bool:
        store_dir = self.settings.trust.trust_store_dir
        event = EventType.CREDENTIALS_RELOADED
        try:
            authenticator = await asyncio.to_thread(authenticator_for, self.settings)
            event = EventType.TRUST_STORE_RELOADED
            store = await asyncio.to_thread(TrustStore.load, store_dir) if store_dir else None
        except (TokenFileError, TrustError, OSError, ValueError) as exc:
            reason = str(exc) if isinstance(exc, TokenFileError | TrustError) else type(exc).__name__
            log.error("reload_failed", audit_event=event.value, reason=reason)
            await self._event(event, "FAILED_PRECONDITION", reason=reason[:512])
            return False
        tokens = token_changes(self.core.authenticator.tokens, authenticator.tokens)
        keys = trust_changes(self.trust_store, store)
        self.core.authenticator = authenticator
        if store_dir:
            self.trust_store = store
            self.set_trust_store(store)
        log.info("reloaded", **tokens, **keys)
        await self._event(EventType.CREDENTIALS_RELOADED, "OK", source="token_file", **tokens)
        if store_dir:
            await self._event(EventType.TRUST_STORE_RELOADED, "OK", source="trust_store", **keys)
        return True

    async def _event(self, event: EventType, outcome: str, **detail: str) -> None:
        if self.audit is not None:
            await self.audit.event(event, outcome, **detail)
