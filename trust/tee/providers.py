"""Build the configured :class:`~trust.tee.evidence.EvidenceProvider`."""

from __future__ import annotations

from trust.tee.config import TeeSettings
from trust.tee.configfs_tsm import ConfigfsTsmProvider
from trust.tee.csv_guest import CsvGuestProvider
from trust.tee.evidence import EvidenceProvider
from trust.tee.none_provider import NoTeeProvider
from trust.tee.recorded import RecordedProvider


def provider_from_settings(settings: TeeSettings) -> EvidenceProvider:
    """The provider ``settings.provider`` names.

    Raises EvidenceError(recorded_not_allowed) for ``recorded`` without ``allow_recorded``.
    """
    if settings.provider == "configfs-tsm":
        return ConfigfsTsmProvider(settings.configfs_root, settings.configfs_provider)
    if settings.provider == "csv":
        return CsvGuestProvider(str(settings.csv_device))
    if settings.provider == "recorded":
        assert settings.recorded_evidence_file is not None
        return RecordedProvider(settings.recorded_evidence_file, settings.allow_recorded)
    return NoTeeProvider()
