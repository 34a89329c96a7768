"""Hostile envelopes: whatever the bytes, verification fails closed with a VerificationError."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trust_testutil import make_model

from trust.errors import VerificationError
from trust.model_signing import SIGNATURE_FILENAME, sign_model, verify_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore

_KEY = Sm2PrivateKey.generate()
_STORE = TrustStore.from_keys([_KEY.public_key()])


@pytest.fixture(scope="module")
def signed_model():
    tmp = Path(tempfile.mkdtemp())
    d = make_model(tmp / "m")
    sign_model(d, _KEY, "m")
    yield d
    shutil.rmtree(tmp, ignore_errors=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_envelopes_never_verify_and_never_crash(signed_model: Path, data) -> None:
    sig_file = signed_model / SIGNATURE_FILENAME
    original = sig_file.read_bytes()
    blob = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(blob) - 1))
        op = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        if op == "flip":
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "delete":
            del blob[i]
        else:
            blob.insert(i, data.draw(st.integers(0, 255)))
    try:
        sig_file.write_bytes(bytes(blob))
        if bytes(blob) == original:
            return
        try:
            verify_model(signed_model, _STORE, "m")
        except VerificationError:
            return
        # A mutation may survive only where JSON ignores it (whitespace between tokens): then the
        # parsed envelope is unchanged, and so is what was verified.
        import json

        assert json.loads(bytes(blob)) == json.loads(original)
    finally:
        sig_file.write_bytes(original)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
            max_leaves=12,
        ).map(lambda v: __import__("json").dumps(v).encode()),
    )
)
def test_arbitrary_envelope_bytes_fail_closed(signed_model: Path, blob: bytes) -> None:
    sig_file = signed_model / SIGNATURE_FILENAME
    original = sig_file.read_bytes()
    try:
        sig_file.write_bytes(blob)
        with pytest.raises(VerificationError):
            verify_model(signed_model, _STORE, "m")
    finally:
        sig_file.write_bytes(original)
