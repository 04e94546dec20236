"""Scenario section of the horizon design: purchase options, energy tariff, batch work, autoscaling.

Prices are per GPU-hour, as providers quote them. :func:`gpu_hour_price` is the one place that
turns an option into a number for a hardware profile, so a dated price table can replace it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from planner.catalog.hardware import HardwareProfile
from planner.designs.autoscale import AutoscaleSpec
from planner.designs.fleet import FleetSpec
from planner.designs.splitwise_spec import SplitwiseSpec
from planner.errors import InputError
from planner.frozen import Frozen


class Priced(Frozen):
    """A price per GPU-hour: absolute (one number, or one per hardware name) or a fraction of the
    on-demand price."""

    usd_per_gpu_h: float | dict[str, float] | None = Field(None, description="$/GPU-hour (per hardware name)")
    on_demand_fraction: float | None = Field(None, gt=0, description="price as a fraction of on-demand")
    pays_energy: bool = Field(False, description="the price excludes power (owned / colocated hardware)")


class OnDemand(Priced):
    """Default: the hardware profile's rental price."""

    @model_validator(mode="after")
    def _absolute(self) -> OnDemand:
        if self.on_demand_fraction is not None:
            raise ValueError("on-demand is priced by usd_per_gpu_h (or the profile's rent), not a fraction")
        return self


class _MustPrice(Priced):
    """An option with no default price: exactly one of the two ways to give it."""

    @model_validator(mode="after")
    def _priced(self) -> _MustPrice:
        if (self.usd_per_gpu_h is None) == (self.on_demand_fraction is None):
            raise ValueError("give exactly one of usd_per_gpu_h or on_demand_fraction")
        return self


class ReservedOption(_MustPrice):
    name: str = "1yr"
    term_months: float = Field(12.0, gt=0)
    min_instances: int = Field(0, ge=0, description="smallest commitment if any is bought")
    buy_every_months: float | None = Field(None, gt=0, description="also buy at the start of every N months "
                                           "(growing demand); default: only at hour 0")


class SpotOption(_MustPrice):
    availability: float = Field(0.9, gt=0, le=1, description="share of requested spot capacity running")
    preemptions_per_h: float = Field(0.0, ge=0, description="per instance")
    max_share: float = Field(0.5, ge=0, le=1, description="most of a period's load spot may carry")


class PurchaseSpec(Frozen):
    on_demand: OnDemand = OnDemand()
    reserved: list[ReservedOption] = []
    spot: SpotOption | None = None


class EnergySpec(Frozen):
    """Power bought by the options with ``pays_energy``: $/kWh (optionally one per hour of day,
    time-of-use) and the facility's PUE."""

    usd_per_kwh: float = Field(0.08, ge=0)
    time_of_use: list[float] | None = Field(None, description="24 prices, $/kWh, hour 0..23")
    pue: float = Field(1.3, ge=1.0)

    @model_validator(mode="after")
    def _tou(self) -> EnergySpec:
        if self.time_of_use is not None and (len(self.time_of_use) != 24 or min(self.time_of_use) < 0):
            raise ValueError("time_of_use needs 24 non-negative prices ($/kWh), one per hour of day")
        return self

    def usd_per_kwh_at(self, hour):
        import numpy as np

        if self.time_of_use is None:
            return np.full(np.shape(hour), self.usd_per_kwh)
        return np.asarray(self.time_of_use)[(np.asarray(hour) % 24).astype(int)]


class BatchSpec(Frozen):
    """Deferrable work (offline inference, evaluations) with the workload's lengths: so many
    requests per window, run whenever capacity is free within the window."""

    requests_per_day: float = Field(gt=0)
    window_h: float = Field(24.0, ge=1, description="hours within which a window's requests must run: at least "
                            "the horizon's one-hour step (a shorter window is that hour)")


class HorizonSpec(Frozen):
    """``design: {type: horizon}``: capacity over the workload's demand curve."""

    type: Literal["horizon"] = "horizon"
    inner: Literal["colocated", "fleet", "splitwise"] = Field("colocated", description="design sized at each rate")
    fleet: FleetSpec = Field(FleetSpec(), description="buckets and availability when inner is fleet")
    splitwise: SplitwiseSpec | None = Field(None, description="designs and baselines when inner is splitwise")

    @model_validator(mode="after")
    def _inner(self) -> HorizonSpec:
        if self.inner == "splitwise" and self.splitwise is None:
            raise ValueError("inner: splitwise needs a splitwise section (designs and/or baselines to scale)")
        return self
    purchase: PurchaseSpec = PurchaseSpec()
    energy: EnergySpec | None = None
    batch: BatchSpec | None = None
    autoscale: AutoscaleSpec | None = None
    max_instances: int = Field(100_000, ge=1)


def gpu_hour_price(hw: HardwareProfile, option: Priced, on_demand_usd: float | None = None,
                   default_usd: float | None = None) -> float:
    """$/GPU-hour of ``option`` on ``hw``: its own figure, a fraction of ``on_demand_usd``, or (for
    on-demand) ``default_usd`` (the scenario's cost section) or else the profile's rental price.
    The one adapter to point at a dated price table."""
    p = option.usd_per_gpu_h
    if isinstance(p, dict):
        if hw.name not in p:
            raise InputError(f"no price for {hw.name!r} in usd_per_gpu_h ({', '.join(p)})")
        return p[hw.name]
    if p is not None:
        return p
    if option.on_demand_fraction is not None:
        assert on_demand_usd is not None
        return option.on_demand_fraction * on_demand_usd
    return default_usd if default_usd is not None else hw.rent_usd_per_h
