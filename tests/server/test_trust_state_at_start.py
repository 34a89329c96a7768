"""Trust changes made while the server was stopped are in the audit log: every start records the
token file's and the trust store's state (SM3 digests, principals and roles, trusted and revoked
key ids) in the records a SIGHUP reload writes, with the difference from the state the last run
recorded. Real server starts (in process, no engine) on one SQLite audit log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit import QueryFilter, decode_record
from service.access.auth import hash_token
from tests.server.in_process import started_server
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import INDEX_FILENAME, add_trusted_key, revoke_key

ASYNC = pytest.mark.asyncio(loop_scope="session")
ALICE, BOB, CAROL = "alice-token-0123456789", "bob-token-0123456789", "carol-token-0123456789"


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


async def _start_and_stop(tmp_path: Path) -> dict[str, list]:
    """Start the server (token file, trust store, one model), stop it; every record's
    ``(event, detail)`` of the two trust events, oldest first."""
    async with started_server(
        tmp_path,
        auth={"token_file": str(tmp_path / "tokens.txt")},
        trust={"trust_store_dir": str(tmp_path / "trust")},
    ) as server:
        assert server.runtime.audit is not None
        out: dict[str, list] = {}
        for event in ("credentials_reloaded", "trust_store_reloaded"):
            rows = await server.runtime.audit.log.query(QueryFilter(event=event))
            out[event] = [decode_record(r.body)[2] for r in rows]
    return out


@ASYNC
async def test_changes_while_stopped_are_recorded_at_the_next_start(tmp_path: Path) -> None:
    tokens, trust = tmp_path / "tokens.txt", tmp_path / "trust"
    _write(tokens, f"alice {hash_token(ALICE)} user\nbob {hash_token(BOB)} user\n")
    signer, revoked, rogue = (Sm2PrivateKey.generate().public_key() for _ in range(3))
    add_trusted_key(trust, signer, "signer")
    add_trusted_key(trust, revoked, "old")
    revoke_key(trust, revoked.key_id, "laptop stolen")

    first = await _start_and_stop(tmp_path)
    [tokens_1] = first["credentials_reloaded"]
    [trust_1] = first["trust_store_reloaded"]
    assert tokens_1.detail["trigger"] == "start" and tokens_1.detail["previous"] == "none"
    assert json.loads(tokens_1.detail["principal_roles"]) == {"alice": ["user"], "bob": ["user"]}
    assert len(tokens_1.detail["token_file_sm3"]) == 64
    assert all(hash_token(t) not in json.dumps(tokens_1.detail) for t in (ALICE, BOB))
    assert trust_1.detail["keys_in_force"] == ",".join(sorted([signer.key_id, revoked.key_id]))
    assert trust_1.detail["keys_revoked_in_force"] == revoked.key_id

    # Unchanged: the next start records the state and no difference.
    second = await _start_and_stop(tmp_path)
    tokens_2, trust_2 = second["credentials_reloaded"][-1], second["trust_store_reloaded"][-1]
    assert tokens_2.detail["previous"] == "recorded" and trust_2.detail["previous"] == "recorded"
    assert tokens_2.detail["token_file_sm3"] == tokens_1.detail["token_file_sm3"]
    changed = {"principals_added", "principals_removed", "roles_changed", "token_file_changed"}
    assert not changed & set(tokens_2.detail)
    assert not {"keys_trusted", "keys_untrusted", "keys_revoked", "keys_unrevoked"} & set(trust_2.detail)

    # While stopped: bob made auditor, carol added, the revocation removed, a rogue key trusted.
    _write(tokens, f"alice {hash_token(ALICE)} user\nbob {hash_token(BOB)} auditor\ncarol {hash_token(CAROL)}\n")
    index = json.loads((trust / INDEX_FILENAME).read_text())
    index["revoked"] = []
    (trust / INDEX_FILENAME).write_text(json.dumps(index))
    add_trusted_key(trust, rogue, "rogue")

    third = await _start_and_stop(tmp_path)
    tokens_3, trust_3 = third["credentials_reloaded"][-1], third["trust_store_reloaded"][-1]
    assert tokens_3.outcome == "OK" and tokens_3.detail["source"] == "token_file"
    assert tokens_3.detail["trigger"] == "start" and tokens_3.detail["previous"] == "recorded"
    assert tokens_3.detail["principals_added"] == "carol"
    assert tokens_3.detail["roles_changed"] == "bob"
    assert "principals_removed" not in tokens_3.detail
    assert tokens_3.detail["token_file_changed"] == "true"
    assert trust_3.detail["source"] == "trust_store"
    assert trust_3.detail["keys_trusted"] == rogue.key_id
    assert trust_3.detail["keys_unrevoked"] == revoked.key_id
    assert "keys_untrusted" not in trust_3.detail and "keys_revoked" not in trust_3.detail
    assert trust_3.detail["trust_store_changed"] == "true"
    assert trust_3.detail["keys_revoked_in_force"] == ""

    # A token replaced for the same principal and roles: the digest says the file changed.
    _write(tokens, f"alice {hash_token('new-alice-token-0123')} user\nbob {hash_token(BOB)} auditor\n")
    tokens_4 = (await _start_and_stop(tmp_path))["credentials_reloaded"][-1]
    assert tokens_4.detail["principals_removed"] == "carol"
    assert tokens_4.detail["token_file_changed"] == "true" and "roles_changed" not in tokens_4.detail
