"""Release an encrypted model's key from a KBS and decrypt the model, in one step inside ``trust``.

The key never leaves this module: callers get what was released (resource, KBS, TEE, evidence
digest) and the decrypted directory, never the key bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trust.tee.errors import TeeError
from trust.tee.kbs_client import KbsClient
from trust.tee.model_encryption import decrypt_model, read_manifest


@dataclass(frozen=True)
class KeyRelease:
    """A key release, without the key: what the audit log records."""

    resource: str
    kbs_url: str
    tee: str
    recorded: bool
    evidence_sm3: str


class DecryptionFailed(TeeError):
    """The KBS released a key but the model did not decrypt with it. ``release`` says which."""

    def __init__(self, error: TeeError, release: KeyRelease) -> None:
        super().__init__(error.reason, error.detail)
        self.release = release


def resource_of(encrypted_dir: str | os.PathLike[str]) -> str:
    """The KBS resource id named by an encrypted model's manifest (TeeError if it is malformed)."""
    return read_manifest(encrypted_dir).key_id


def release_and_decrypt(
    client: KbsClient, encrypted_dir: str | os.PathLike[str], target: str | os.PathLike[str]
) -> KeyRelease:
    """Release the model's key from the KBS and decrypt ``encrypted_dir`` into ``target``.

    Blocking. Raises KeyReleaseError / EvidenceError (no key released), DecryptionFailed (a key
    was released but does not decrypt the model), TeeError (malformed manifest).
    """
    resource = resource_of(encrypted_dir)
    released = client.get_resource(resource)
    release = KeyRelease(resource, released.kbs_url, released.tee, released.recorded, released.evidence_sm3)
    try:
        decrypt_model(encrypted_dir, released.value, Path(target))
    except TeeError as exc:
        raise DecryptionFailed(exc, release) from None
    finally:
        del released
    return release
