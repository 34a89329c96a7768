from __future__ import annotations

from pathlib import Path

import pytest
from trust_testutil import make_model

from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore


@pytest.fixture(scope="session")
def key() -> Sm2PrivateKey:
    return Sm2PrivateKey.generate()


@pytest.fixture(scope="session")
def other_key() -> Sm2PrivateKey:
    return Sm2PrivateKey.generate()


@pytest.fixture(scope="session")
def store(key: Sm2PrivateKey) -> TrustStore:
    return TrustStore.from_keys([key.public_key()])


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return make_model(tmp_path / "model")
