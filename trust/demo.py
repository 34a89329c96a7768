"""A local demo signing key for the embedded default, so the verification path runs by default.

On first run the server creates ``<state_dir>/demo-signing/`` with an unencrypted demo private key
(mode 0600) and a trust store that trusts only its public key, and signs each built-in model
directory that has **no** signature yet. A directory that already carries a signature is never
re-signed: it is verified like any other model, so tampering with a built-in model after its first
signing is still caught. The demo key is for development; production trust stores hold release keys.
"""

from __future__ import annotations

import os
from pathlib import Path

from trust.model_signing import SIGNATURE_FILENAME, sign_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import TrustStore, add_trusted_key

DEMO_DIRNAME = "demo-signing"
DEMO_KEY_NAME = "xinserve-local-demo"


def ensure_demo_key(state_dir: str | os.PathLike[str]) -> tuple[Sm2PrivateKey, Path]:
    """(demo private key, trust store directory), creating both on first call."""
    root = Path(state_dir) / DEMO_DIRNAME
    key_path = root / "demo-key.pem"
    store_dir = root / "trust-store"
    if key_path.exists():
        key = Sm2PrivateKey.from_pem(key_path.read_bytes())
        if not (store_dir / "trust-store.json").exists():
            add_trusted_key(store_dir, key.public_key(), DEMO_KEY_NAME)
        return key, store_dir
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Sm2PrivateKey.generate()
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.to_pem())
    add_trusted_key(store_dir, key.public_key(), DEMO_KEY_NAME)
    return key, store_dir


def sign_if_unsigned(model_dir: str | os.PathLike[str], key: Sm2PrivateKey, model_name: str) -> bool:
    """Sign ``model_dir`` only if it has no signature file; True when it signed."""
    if (Path(model_dir) / SIGNATURE_FILENAME).exists():
        return False
    sign_model(model_dir, key, model_name)
    return True


def demo_trust_store(state_dir: str | os.PathLike[str]) -> TrustStore:
    """The loaded demo trust store (creating the key on first call)."""
    _key, store_dir = ensure_demo_key(state_dir)
    return TrustStore.load(store_dir)
