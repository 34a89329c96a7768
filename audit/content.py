"""Prompt/output capture: SM3 digests always, SM4-GCM-sealed content when opted in."""

from __future__ import annotations

import json
from typing import Any

from audit.config import AuditSettings
from audit.errors import AuditEncodingError
from trust import sm4
from trust.sm3 import sm3

_AAD = b"xinserve-audit-content|"


def _bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


class ContentCapture:
    """Builds the content fields of an :class:`~audit.records.AuditRecord`.

    CPU-bound (hashing, encryption): the server calls :meth:`fields` in a worker thread.
    """

    def __init__(self, key: bytes | None = None, key_id: str = "content-1") -> None:
        self._key = key
        self.key_id = key_id

    @classmethod
    def from_settings(cls, settings: AuditSettings) -> ContentCapture:
        key = settings.load_content_key() if settings.content_capture else None
        return cls(key, settings.content_key_id)

    @property
    def captures_content(self) -> bool:
        return self._key is not None

    def fields(self, prompt: str | bytes | None, output: str | bytes | None) -> dict[str, Any]:
        """``prompt_sm3``/``output_sm3`` and, when capture is on, ``content``/``content_key_id``."""
        out: dict[str, Any] = {}
        if prompt is not None:
            out["prompt_sm3"] = sm3(_bytes(prompt)).hex()
        if output is not None:
            out["output_sm3"] = sm3(_bytes(output)).hex()
        if self._key is not None and (prompt is not None or output is not None):
            doc: dict[str, str] = {}
            for name, value in (("prompt", prompt), ("output", output)):
                if value is not None:
                    doc[name] = value if isinstance(value, str) else value.decode("utf-8", "replace")
            plain = json.dumps(doc, sort_keys=True, ensure_ascii=False).encode("utf-8")
            out["content"] = sm4.seal(self._key, plain, _AAD + self.key_id.encode())
            out["content_key_id"] = self.key_id
        return out

    def open(self, sealed: bytes, key_id: str | None = None) -> dict[str, str]:
        """Decrypt captured content (auditor tooling); raises ``trust.errors.DecryptionError``."""
        if self._key is None:
            raise AuditEncodingError("no content key configured")
        plain = sm4.open_(self._key, sealed, _AAD + (key_id or self.key_id).encode())
        result: dict[str, str] = json.loads(plain)
        return result
