"""What an accelerator-hour costs: rental, or ownership (purchase amortized + energy x PUE).

Where a price comes from, in order:

1. the scenario names it: ``cost.prices`` (or its older name ``cost.usd_per_h``) for rent,
   ``cost.purchase_usd`` for ownership;
2. a purchase model is chosen (``cost.purchase: on_demand | spot | reserved_1y | reserved_3y |
   capacity_block | own``, optionally ``cost.provider``): the dated row of
   ``hardware_profiles/prices.yaml`` (the provider's latest, or the cheapest listed offer);
3. no purchase model: the profile's default rate (``price.rent``), as before the price table.

A missing price is an ``InputError`` that says how to give one, never a zero. Every price used
is returned as a ``PriceQuote`` (rate, provider, purchase model, date, source) so a plan can
state it.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from planner.catalog.hardware import HardwareProfile, hardware
from planner.catalog.prices import Purchase, price_table
from planner.checks import PositiveFinite
from planner.errors import InputError
from planner.frozen import Frozen
from planner.units import HOUR_S

HOURS_PER_YEAR = 365.25 * 24


class CostMode(str, Enum):
    rent = "rent"
    own = "own"


class PriceQuote(Frozen):
    """The price one plan used for one accelerator type."""

    hardware: str
    usd_per_h: float
    purchase: str            # purchase model, 'named' (given by the user) or 'profile default'
    provider: str | None = None
    date: str | None = None
    source: str
    note: str | None = None

    def text(self) -> str:
        if self.purchase == "named":
            return f"{self.hardware} ${self.usd_per_h:.3f}/h (named in cost.prices)"
        who = f"{self.provider} " if self.provider else ""
        when = f", seen {self.date}" if self.date else ""
        return f"{self.hardware} ${self.usd_per_h:.3f}/h ({who}{self.purchase}{when}; {self.source})"


class CostModel(Frozen):
    """``rent``: $/accelerator-hour, energy included. ``own``: ``purchase_usd / lifetime`` +
    ``(power + platform share) x PUE x usd_per_kwh``, where the platform share is the profile's
    ``power.platform`` (host, NICs, fans per device). See the module docstring for where each price
    comes from."""

    mode: CostMode = CostMode.rent
    purchase: Purchase | None = Field(None, description="purchase model priced from hardware_profiles/prices.yaml")
    provider: str | None = Field(None, description="provider in the price table; none: the cheapest listed offer")
    prices: dict[str, PositiveFinite] = Field({}, description="rental $/accelerator-hour per hardware (wins over "
                                              "the table)")
    usd_per_h: dict[str, PositiveFinite] = Field({}, description="older name of 'prices'")
    purchase_usd: dict[str, PositiveFinite] = Field({}, description="purchase $ per accelerator (incl. its server "
                                                    "share)")
    lifetime_years: float = Field(4.0, gt=0)
    usd_per_kwh: float = Field(0.08, ge=0)
    pue: float = Field(1.3, ge=1.0, description="datacenter power usage effectiveness")

    @model_validator(mode="after")
    def _consistent(self) -> CostModel:
        clash = {k for k in self.prices.keys() & self.usd_per_h.keys() if self.prices[k] != self.usd_per_h[k]}
        if clash:
            raise ValueError(f"cost.prices and cost.usd_per_h disagree for {sorted(clash)}: give one")
        if self.mode is CostMode.own and self.purchase not in (None, Purchase.own):
            raise ValueError(f"cost.mode is 'own' but cost.purchase is {self.purchase.value!r}")
        if any(v <= 0 for v in (*self.prices.values(), *self.usd_per_h.values(), *self.purchase_usd.values())):
            raise ValueError("prices must be positive")
        if self.provider is not None:       # a misspelt provider would fall back to other prices unseen
            from planner.catalog.prices import price_table

            known = sorted({r.provider for rows in price_table().rent.values() for r in rows})
            if self.provider not in known:
                from planner.checks import located

                raise located("provider", f"{self.provider!r} is not a provider of hardware_profiles/prices.yaml "
                              f"({', '.join(known)})")
        return self

    @property
    def owned(self) -> bool:
        return self.mode is CostMode.own or self.purchase is Purchase.own

    def quote(self, hw: HardwareProfile, avg_power_w: float = 0.0) -> PriceQuote:
        """The $/device-hour of ``hw`` and where it comes from (ownership: at ``avg_power_w`` of
        device draw, plus the profile's platform share)."""
        return self._own(hw, avg_power_w) if self.owned else self._rent(hw)

    def usd_per_device_hour(self, hw: HardwareProfile, avg_power_w: float = 0.0) -> float:
        return self.quote(hw, avg_power_w).usd_per_h

    def rates(self, names: list[str]) -> dict[str, float]:
        """Rental $/h for each named profile that has a price (a design that prices only some of
        its hardware, e.g. PrfaaS's equal-cost gain, decides itself what a missing one means)."""
        out = {}
        for name in names:
            try:
                out[name] = self.usd_per_device_hour(hardware(name))
            except InputError:
                continue
        return out

    def _rent(self, hw: HardwareProfile) -> PriceQuote:
        given = {**self.usd_per_h, **self.prices}
        if hw.name in given:
            return PriceQuote(hardware=hw.name, usd_per_h=given[hw.name], purchase="named",
                              source="cost.prices (given by the user)")
        if self.purchase is not None:
            r = price_table().rent_row(hw.name, self.purchase, self.provider)
            return PriceQuote(hardware=hw.name, usd_per_h=r.usd_per_h, purchase=r.purchase.value,
                              provider=r.provider, date=r.date, source=r.source, note=r.note)
        if hw.price.rent is None:
            raise InputError(f"no rental price for {hw.name!r}: set cost.prices: {{{hw.name}: <US$ per "
                             "accelerator-hour>} in the scenario, or choose a purchase model priced in "
                             "hardware_profiles/prices.yaml (cost.purchase: on_demand | spot | reserved_1y | ...)")
        r = hw.price.rent
        return PriceQuote(hardware=hw.name, usd_per_h=r.value, purchase="profile default", date=r.date,
                          source=r.source, note=r.note)

    def _own(self, hw: HardwareProfile, avg_power_w: float) -> PriceQuote:
        if hw.name in self.purchase_usd:
            capex, date, source = self.purchase_usd[hw.name], None, "the scenario's cost.purchase_usd"
        else:
            row = price_table().own_row(hw.name)
            capex, date, source = row.purchase_usd, row.date, row.source
        watts = avg_power_w + hw.platform_w
        usd_h = capex / (self.lifetime_years * HOURS_PER_YEAR) + watts * self.pue / 1000.0 * self.usd_per_kwh
        host = f" (device {avg_power_w:.0f} + platform {hw.platform_w:.0f})" if hw.platform_w else ""
        return PriceQuote(hardware=hw.name, usd_per_h=usd_h, purchase="own", date=date, source=source,
                          note=f"${capex:,.0f} over {self.lifetime_years:g} y + {watts:.0f} W{host} x PUE "
                               f"{self.pue:g} at ${self.usd_per_kwh:g}/kWh")


def device_rate(usd_per_h: dict[str, float], name: str, hw: HardwareProfile) -> float:
    """$/h of one ``name`` device from a design's rate table (``CostModel.rates``), else the
    profile's default rent; NaN without either."""
    return usd_per_h.get(name, hw.price.rent.value if hw.price.rent else float("nan"))


def usd_per_million_tokens(usd_per_h, tokens_per_s):
    return usd_per_h / HOUR_S / tokens_per_s * 1e6
