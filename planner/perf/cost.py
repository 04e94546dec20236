"""What an accelerator-hour costs: rental, or ownership (purchase amortized + energy x PUE)."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from planner.catalog.hardware import HardwareProfile
from planner.checks import PositiveFinite
from planner.errors import InputError
from planner.frozen import Frozen
from planner.units import HOUR_S


class CostMode(str, Enum):
    rent = "rent"
    own = "own"


class CostModel(Frozen):
    """``rent``: the profile's $/h (or ``usd_per_h`` overrides), energy included.
    ``own``: ``purchase_usd / lifetime`` + ``power x PUE x usd_per_kwh``."""


    mode: CostMode = CostMode.rent
    usd_per_h: dict[str, PositiveFinite] = Field({}, description="rental $/accelerator-hour per hardware name")
    purchase_usd: dict[str, PositiveFinite] = Field({}, description="purchase $ per accelerator "
                                                    "(incl. its server share)")
    lifetime_years: float = Field(4.0, gt=0)
    usd_per_kwh: float = Field(0.08, ge=0)
    pue: float = Field(1.3, ge=1.0, description="datacenter power usage effectiveness")

    def usd_per_device_hour(self, hw: HardwareProfile, avg_power_w: float = 0.0):
        if self.mode is CostMode.rent:
            if hw.name in self.usd_per_h:
                return self.usd_per_h[hw.name]
            if hw.price.rent is None:
                raise InputError(f"no rental price for {hw.name!r}: set cost.usd_per_h.{hw.name} in the scenario")
            return hw.price.rent.value
        if hw.name not in self.purchase_usd:
            raise InputError(f"cost.mode is 'own' but cost.purchase_usd has no price for {hw.name!r}")
        capex = self.purchase_usd[hw.name] / (self.lifetime_years * 365.25 * 24)
        return capex + avg_power_w * self.pue / 1000.0 * self.usd_per_kwh


def usd_per_million_tokens(usd_per_h, tokens_per_s):
    return usd_per_h / HOUR_S / tokens_per_s * 1e6
