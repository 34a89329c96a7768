"""The base of every configuration section model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SettingsModel(BaseModel):
    """A configuration section: unknown keys are refused (pydantic ``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid")
