"""The embedded default's demo key: created once, signs unsigned built-ins, never re-signs."""

from __future__ import annotations

from pathlib import Path

import pytest
from trust_testutil import make_model

from trust.demo import demo_trust_store, ensure_demo_key, sign_if_unsigned
from trust.errors import Reason, VerificationError
from trust.model_signing import verify_model


def test_demo_key_signs_once_and_tampering_is_still_caught(tmp_path: Path) -> None:
    state = tmp_path / "state"
    key, _store_dir = ensure_demo_key(state)
    assert (state / "demo-signing" / "demo-key.pem").stat().st_mode & 0o777 == 0o600
    key2, _ = ensure_demo_key(state)
    assert key2.public_key() == key.public_key()  # stable across restarts
    model = make_model(tmp_path / "builtin")
    assert sign_if_unsigned(model, key, "builtin-tiny") is True
    store = demo_trust_store(state)
    assert verify_model(model, store, "builtin-tiny").key_name == "xinserve-local-demo"
    (model / "config.json").write_text("{}")
    assert sign_if_unsigned(model, key, "builtin-tiny") is False  # never papers over a change
    with pytest.raises(VerificationError) as ei:
        verify_model(model, store, "builtin-tiny")
    assert ei.value.reason == Reason.FILE_SIZE_CHANGED
