"""Credentials and trust store at start and on reload (SIGHUP), each change audited.

``authenticator_for`` builds the authenticator of ``auth.*`` (token file permissions, syntax,
roles against the policy). ``Reloader.reload`` re-reads the token file and the trust store
directory and swaps them in only when both load; every reload is one audit event per source
naming what changed (principals added/removed/with new roles or a new token; key ids
trusted/untrusted/revoked/unrevoked), never a token or its digest. A reload that fails keeps
the old state and is recorded with outcome ``FAILED_PRECONDITION`` and a reason.
``changed_config_fields`` lists the dotted names of configuration fields that differ from
their defaults (names only, never values), recorded with ``config_loaded`` at start.

Every such record also carries the state now in force (``token_state``, ``trust_state``: SM3
digests, principals with their roles, trusted and revoked key ids), and ``record_start_state``
writes the same two records at start with the difference from the state the last run recorded,
so a change made while the server was stopped is in the log too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from audit import EventType, QueryFilter, decode_record
from audit.errors import AuditError
from service.access.auth import Authenticator, TokenFileError, _TokenEntry, load_token_file
from service.access.policy import AccessPolicy, PolicyError
from service.core.audit_trail import AuditTrail
from service.core.logs import get_logger
from service.pipeline.call_core import CallCore
from service.settings.config import Settings
from trust.errors import TrustError
from trust.key_files import InsecureFileError, check_private_file
from trust.sm3 import sm3_hex
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


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _time(t: Any) -> str | None:
    return t.isoformat() if t is not None else None


def token_state(entries: list[_TokenEntry]) -> dict[str, str]:
    """The token file's state for the audit log: ``token_file_sm3``, SM3 (hex) of its entries
    in canonical form (principal, token SHA-256, roles, ``not_after``; comments and order do not
    count), and ``principal_roles``, a JSON object of each principal's sorted roles. No token."""
    rows = sorted([e.principal, e.digest.hex(), sorted(e.roles), _time(e.not_after)] for e in entries)
    roles: dict[str, set[str]] = {}
    for e in entries:
        roles.setdefault(e.principal, set()).update(e.roles)
    return {
        "token_file_sm3": sm3_hex(_canonical(rows).encode("utf-8")),
        "principal_roles": _canonical({p: sorted(r) for p, r in roles.items()}),
    }


def trust_state(store: TrustStore | None) -> dict[str, str]:
    """The trust store's state for the audit log: ``trust_store_sm3``, SM3 (hex) of its keys
    (id, name, validity) and revocations (id, reason, time) in canonical form, and the
    comma-separated ``keys_in_force`` (trusted key ids) and ``keys_revoked_in_force``."""
    keys = store.keys if store else {}
    revoked = store.revoked if store else {}
    doc = {
        "keys": {k: [t.name, _time(t.not_before), _time(t.not_after)] for k, t in keys.items()},
        "revoked": {k: [r.reason, _time(r.revoked_at)] for k, r in revoked.items()},
    }
    return {
        "trust_store_sm3": sm3_hex(_canonical(doc).encode("utf-8")),
        "keys_in_force": _names(set(keys)),
        "keys_revoked_in_force": _names(set(revoked)),
    }


def _split(names: Any) -> set[str]:
    return {n for n in str(names).split(",") if n} if names else set()


def token_state_changes(before: Mapping[str, Any], after: dict[str, str]) -> dict[str, str]:
    """What changed between two recorded ``token_state``s: ``principals_added``,
    ``principals_removed``, ``roles_changed`` (principal names) and ``token_file_changed``
    (``"true"`` when the digest differs, e.g. a token replaced)."""
    old = json.loads(str(before["principal_roles"]))
    new = json.loads(after["principal_roles"])
    changes = {
        "principals_added": _names(new.keys() - old.keys()),
        "principals_removed": _names(old.keys() - new.keys()),
        "roles_changed": _names({p for p in old.keys() & new.keys() if old[p] != new[p]}),
        "token_file_changed": "true" if before.get("token_file_sm3") != after["token_file_sm3"] else "",
    }
    return {k: v for k, v in changes.items() if v}


def trust_state_changes(before: Mapping[str, Any], after: dict[str, str]) -> dict[str, str]:
    """What changed between two recorded ``trust_state``s, in ``trust_changes``' terms
    (``keys_trusted``, ``keys_untrusted``, ``keys_revoked``, ``keys_unrevoked``), plus
    ``trust_store_changed`` (``"true"`` when the digest differs, e.g. a validity window)."""
    ok, nk = _split(before.get("keys_in_force")), _split(after["keys_in_force"])
    orv, nrv = _split(before.get("keys_revoked_in_force")), _split(after["keys_revoked_in_force"])
    changes = {
        "keys_trusted": _names(nk - ok),
        "keys_untrusted": _names(ok - nk),
        "keys_revoked": _names(nrv - orv),
        "keys_unrevoked": _names(orv - nrv),
        "trust_store_changed": "true" if before.get("trust_store_sm3") != after["trust_store_sm3"] else "",
    }
    return {k: v for k, v in changes.items() if v}


async def _last_state(audit: AuditTrail, chain: str, event: EventType, key: str) -> Mapping[str, Any] | None:
    """The detail of this chain's last ``OK`` ``event`` that carries ``key``, or ``None``."""
    rows = await audit.log.query(QueryFilter(chain=chain, event=event.value, outcome="OK", descending=True, limit=1))
    for row in rows:
        detail = decode_record(row.body)[2].detail
        if key in detail:
            return detail
    return None


async def record_start_state(
    settings: Settings, audit: AuditTrail, tokens: list[_TokenEntry], store: TrustStore | None
) -> None:
    """Record at start the token file's and (with ``trust.trust_store_dir``) the trust store's
    state, as a SIGHUP reload does (``credentials_reloaded``, ``trust_store_reloaded``) with
    ``trigger`` ``start``: the state in force, and its difference from the state this chain
    recorded last. ``previous`` says what the difference is against: ``recorded``, ``none``
    (a first start, or only records without a state) or ``unreadable`` (the query failed).
    Never raises (``AuditTrail.event``)."""
    chain = settings.audit.node_id
    sources: list[tuple[EventType, str, dict[str, str], Callable[..., dict[str, str]], str]] = [
        (EventType.CREDENTIALS_RELOADED, "token_file", token_state(tokens), token_state_changes, "principal_roles")
    ]
    if settings.trust.trust_store_dir is not None:
        sources.append(
            (EventType.TRUST_STORE_RELOADED, "trust_store", trust_state(store), trust_state_changes, "keys_in_force")
        )
    for event, source, state, diff, key in sources:
        previous = "none"
        changes: dict[str, str] = {}
        try:
            last = await _last_state(audit, chain, event, key)
        except (AuditError, ValueError) as exc:
            log.error("previous_trust_state_unreadable", audit_event=event.value, error=type(exc).__name__)
            previous, last = "unreadable", None
        if last is not None:
            previous = "recorded"
            changes = diff(last, state)
        if changes:
            log.warning("trust_changed_while_stopped", source=source, **changes)
        await audit.event(event, "OK", source=source, trigger="start", previous=previous, **changes, **state)


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
        await self._event(
            EventType.CREDENTIALS_RELOADED,
            "OK",
            source="token_file",
            trigger="sighup",
            **tokens,
            **token_state(authenticator.tokens),
        )
        if store_dir:
            await self._event(
                EventType.TRUST_STORE_RELOADED,
                "OK",
                source="trust_store",
                trigger="sighup",
                **keys,
                **trust_state(store),
            )
        return True

    async def _event(self, event: EventType, outcome: str, **detail: str) -> None:
        if self.audit is not None:
            await self.audit.event(event, outcome, **detail)
