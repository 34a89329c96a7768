"""Provider ``recorded``: replays a stored evidence file. For demos and tests only.

Replayed evidence proves nothing about this machine. The provider refuses to exist unless
``allow`` is given (``tee.allow_recorded``), marks every piece of evidence ``recorded``, and logs,
audits and reports it as such (GetServerInfo). Its evidence is Trustee's ``sample`` TEE shape, so a
test KBS can check the report data binding: the JSON object
``{"svn": "1", "report_data": "<base64 of the 64 bytes>", "recorded": true, "source": "<file name>",
"recorded_evidence": "<base64 of the stored file>"}``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from trust.tee.errors import EvidenceError, TeeReason
from trust.tee.evidence import TEE_SAMPLE, Evidence, padded_report_data

MAX_RECORDED = 1 << 20


class RecordedProvider:
    """Replays ``path``; raises EvidenceError(recorded_not_allowed) when ``allow`` is False."""

    tee = TEE_SAMPLE
    recorded = True

    def __init__(self, path: Path, allow: bool) -> None:
        if not allow:
            raise EvidenceError(
                TeeReason.RECORDED_NOT_ALLOWED,
                "recorded evidence is for demos and tests only; set tee.allow_recorded to use it",
            )
        self.path = Path(path)

    def collect(self, report_data: bytes) -> Evidence:
        """The stored evidence wrapped with ``report_data`` (zero-padded to 64 bytes).

        Raises EvidenceError: ``report_data_size``, ``provider_missing`` (file unreadable or larger
        than 1 MiB).
        """
        data = padded_report_data(report_data)
        try:
            stored = self.path.read_bytes()
        except OSError as exc:
            raise EvidenceError(
                TeeReason.PROVIDER_MISSING, f"recorded evidence file unreadable: {exc.strerror}"
            ) from None
        if len(stored) > MAX_RECORDED:
            raise EvidenceError(TeeReason.PROVIDER_MISSING, "recorded evidence file is larger than 1 MiB")
        doc = {
            "svn": "1",
            "report_data": base64.b64encode(data).decode(),
            "recorded": True,
            "source": self.path.name,
            "recorded_evidence": base64.b64encode(stored).decode(),
        }
        return Evidence(
            tee=TEE_SAMPLE,
            raw=json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(),
            report_data=data,
            provider="recorded",
            recorded=True,
        )
