"""Dated accelerator prices by provider and purchase model (``hardware_profiles/prices.yaml``).

Prices are kept apart from the hardware profiles: a spec sheet does not change, a price list
changes monthly. Each rent row is US$ per accelerator-hour for one provider and purchase model
(on-demand, spot, 1- or 3-year reservation, capacity block) with the date it was seen and its
source; each ``own`` row is a purchase price per accelerator (with its share of the server or
rack) that the cost model amortises and adds energy to. A row's ``source`` is a key of the file's
own ``sources:`` block or of the shared ``_sources.yaml``.

Lookups never invent a price: a missing one is an ``InputError`` that lists what the table has
and says how to give one in a scenario.
"""

from __future__ import annotations

import datetime as _dt
from enum import Enum
from functools import cache
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator

from planner.catalog.hardware import bundled_profiles_dir
from planner.errors import InputError
from planner.frozen import Frozen
from planner.yamlio import load_yaml, validation_error

PRICES_FILE = "prices.yaml"


class Purchase(str, Enum):
    """How accelerator-hours are bought."""

    on_demand = "on_demand"
    spot = "spot"
    reserved_1y = "reserved_1y"
    reserved_3y = "reserved_3y"
    capacity_block = "capacity_block"
    own = "own"                    # bought: purchase price amortised + energy (TCO)


def _date_text(v: object) -> object:
    return v.isoformat() if isinstance(v, _dt.date) else (str(v) if v is not None else v)


class RentRow(Frozen):
    """One listed rate: US$ per accelerator-hour."""

    provider: str = Field(min_length=1)
    purchase: Purchase
    usd_per_h: float = Field(gt=0)
    date: str = Field(min_length=4, description="when the price was seen (YYYY, YYYY-MM or YYYY-MM-DD)")
    source: str = Field(min_length=1)
    note: str | None = None

    _date = field_validator("date", mode="before")(_date_text)

    @model_validator(mode="after")
    def _not_own(self) -> RentRow:
        if self.purchase is Purchase.own:
            raise ValueError("an owned accelerator is priced in the 'own' section, not as a rent row")
        return self


class OwnRow(Frozen):
    """Purchase price of one accelerator including its share of the server or rack."""

    purchase_usd: float = Field(gt=0)
    date: str = Field(min_length=4)
    source: str = Field(min_length=1)
    note: str | None = None

    _date = field_validator("date", mode="before")(_date_text)


class PriceTable(Frozen):
    rent: dict[str, list[RentRow]] = {}
    own: dict[str, OwnRow] = {}
    sources: dict[str, str] = {}

    @model_validator(mode="after")
    def _sources_known(self) -> PriceTable:
        rows = [(f"rent.{h}.{i}", r.source) for h, rs in self.rent.items() for i, r in enumerate(rs)]
        rows += [(f"own.{h}", r.source) for h, r in self.own.items()]
        for where, key in rows:
            if key not in self.sources:
                raise ValueError(f"{where}.source {key!r} is not a known citation key")
        return self

    # -- look-ups -------------------------------------------------------------------------------
    def rent_row(self, hardware: str, purchase: Purchase, provider: str | None = None) -> RentRow:
        """The row for ``hardware`` bought as ``purchase``: from ``provider`` the most recently
        seen one; with no provider the cheapest listed offer (latest date per provider)."""
        rows = [r for r in self.rent.get(hardware, []) if r.purchase is purchase
                and (provider is None or r.provider == provider)]
        if not rows:
            raise _missing(hardware, purchase, provider, self.rent.get(hardware, []))
        latest: dict[str, RentRow] = {}
        for r in rows:
            if r.provider not in latest or r.date > latest[r.provider].date:
                latest[r.provider] = r
        return min(latest.values(), key=lambda r: r.usd_per_h)

    def own_row(self, hardware: str) -> OwnRow:
        if hardware not in self.own:
            raise InputError(
                f"no purchase price for {hardware!r} in hardware_profiles/{PRICES_FILE} (owned: "
                f"{', '.join(sorted(self.own)) or 'none'}); give one in the scenario as "
                f"cost.purchase_usd: {{{hardware}: <US$ per accelerator incl. its server share>}}")
        return self.own[hardware]

    def rent_range(self, hardware: str) -> tuple[float, float] | None:
        """(lowest, highest) listed $/accelerator-hour over every provider and purchase model."""
        rates = [r.usd_per_h for r in self.rent.get(hardware, [])]
        return (min(rates), max(rates)) if rates else None


def _missing(hardware: str, purchase: Purchase, provider: str | None, listed: list[RentRow]) -> InputError:
    offers = ", ".join(sorted({f"{r.provider} {r.purchase.value}" for r in listed})) or "none"
    who = f"from provider {provider!r}" if provider else "from any provider"
    return InputError(
        f"no {purchase.value} price for {hardware!r} {who} in hardware_profiles/{PRICES_FILE} "
        f"(listed for it: {offers}); give one in the scenario as cost.prices: "
        f"{{{hardware}: <US$ per accelerator-hour>}}, or add a dated, sourced row to the table")


def load_price_table(path: str | Path) -> PriceTable:
    """Read a price table; errors say ``file:line field: problem``. Citation keys resolve against
    the file's ``sources:`` and the shared ``_sources.yaml`` next to the bundled profiles."""
    path = Path(path)
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}:1: a price table is a mapping with 'rent', 'own' and 'sources'")
    shared, _ = load_yaml(bundled_profiles_dir() / "_sources.yaml")
    data = {**data, "sources": {**(shared or {}), **(data.get("sources") or {})}}
    try:
        return PriceTable.model_validate(data)
    except ValidationError as e:
        raise validation_error(path, e, lines, PriceTable) from None


@cache
def price_table() -> PriceTable:
    """The bundled price table (parsed once)."""
    return load_price_table(bundled_profiles_dir() / PRICES_FILE)
