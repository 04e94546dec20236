"""The base of every input and result model: immutable, and unknown keys are errors (so a typo in
a scenario or profile is reported, never silently ignored)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
