"""Exceptions of the trust layer.

Every failure the trust layer reports is a :class:`TrustError`. Verification failures carry a
machine-readable ``reason`` code (see :class:`Reason`) that the server shows in ``GetModel`` and the
CLI prints; ``detail`` is a short human sentence that never contains key material.
"""

from __future__ import annotations

from trust.compat import StrEnum


class TrustError(Exception):
    """Base class of every error raised by ``trust``."""


class InvalidSignature(TrustError):
    """A signature did not verify (or could not even be parsed). Always fail closed on it."""


class KeyFormatError(TrustError):
    """A key could not be parsed: not PEM/DER, wrong OID, off-curve point, bad password, ..."""


class DecryptionError(TrustError):
    """SM4-GCM authentication failed: wrong key, wrong associated data, or altered ciphertext."""


class TrustStoreError(TrustError):
    """The trust store directory is missing, unreadable or malformed."""


class SigningError(TrustError):
    """Signing could not proceed (nothing to sign, unreadable file, path escape at sign time)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Reason(StrEnum):
    """Machine-readable reason codes of :class:`VerificationError`."""

    UNSIGNED = "unsigned"  # no signature envelope
    MALFORMED_ENVELOPE = "malformed_envelope"  # envelope not valid JSON / DSSE / base64
    WRONG_PAYLOAD_TYPE = "wrong_payload_type"  # DSSE payloadType is not in-toto
    MALFORMED_SIGNATURE = "malformed_signature"  # signature not strict DER (truncated, padded, ...)
    BAD_SIGNATURE = "bad_signature"  # well-formed signature that does not verify
    UNTRUSTED_KEY = "untrusted_key"  # signed by a key the trust store does not hold
    REVOKED_KEY = "revoked_key"  # signed by a key on the revocation list
    KEY_NOT_YET_VALID = "key_not_yet_valid"  # before the key's validity window
    KEY_EXPIRED = "key_expired"  # after the key's validity window
    MALFORMED_STATEMENT = "malformed_statement"  # payload is not the expected in-toto statement
    WRONG_PREDICATE_TYPE = "wrong_predicate_type"  # e.g. an image signature used for a model
    SUBJECT_MISMATCH = "subject_mismatch"  # model name / image digest differs from the expected
    MANIFEST_DIGEST_MISMATCH = "manifest_digest_mismatch"  # subject digest != SM3(manifest)
    EMPTY_MANIFEST = "empty_manifest"  # the signed manifest lists no file
    PATH_ESCAPE = "path_escape"  # '..', absolute path, or symlink leaving the directory
    INVALID_PATH = "invalid_path"  # non-canonical path in the manifest (empty part, '.', '\\', NUL)
    DUPLICATE_ENTRY = "duplicate_entry"  # same path twice in the manifest
    CASE_COLLISION = "case_collision"  # two paths equal when case-folded
    UNSUPPORTED_FILE = "unsupported_file"  # FIFO, socket, device ... in the directory
    FILE_MISSING = "file_missing"  # listed in the manifest, absent on disk
    FILE_ADDED = "file_added"  # on disk, not in the manifest
    FILE_RENAMED = "file_renamed"  # one missing + one added with the same content
    CASE_MISMATCH = "case_mismatch"  # on-disk name differs from the manifest only by case
    FILE_SIZE_CHANGED = "file_size_changed"  # truncated or grown
    FILE_MODIFIED = "file_modified"  # same size, different SM3
    IO_ERROR = "io_error"  # a file could not be read
    MALFORMED_IMAGE = "malformed_image"  # OCI index/manifest/descriptor not as the image spec says
    UNSUPPORTED_DIGEST = "unsupported_digest"  # OCI digest algorithm other than sha256/sha512


class VerificationError(TrustError):
    """Verification failed. ``reason`` is a :class:`Reason` value; ``detail`` is for humans."""

    def __init__(self, reason: Reason | str, detail: str) -> None:
        self.reason = Reason(reason)
        self.detail = detail
        super().__init__(f"{self.reason.value}: {detail}")
