"""Hardware as it performs at a chosen quantile of the error bands (confidence-aware plans).

Inside ``performance_at(confidence)``, every profile ``catalog.hardware.hardware`` resolves by
name or path is *derated*: each device's time scales by the band's slowdown at that quantile
relative to the band's median, ``s_c / s_0.5`` (``catalog/bands.py``; see ``slowdowns``). The
bands used are those of serving throughput - what a plan sizes - in the vendor's (and framework's)
compute-bound and memory-bound regimes: compute work takes the first factor, everything else -
HBM traffic, links, kernel and step overheads - the second; peak FLOP/s are divided by the first,
bandwidths divided and latencies multiplied by the second. (TTFT bands are not used: under
overload they measure the queueing model's miss, not how fast the hardware computes.) The roofline is
homogeneous in these, so a step limited by one resource takes exactly that factor longer. A plan
sized inside the context therefore holds when the hardware performs at the ``confidence``
quantile of how far real runs landed from the model in that regime, counted from the median run.
Profiles passed as objects are returned untouched (they were resolved, and derated, already).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.catalog.hardware import HardwareProfile


@dataclass
class Quantile:
    confidence: float
    framework: str | dict[str, str] | None     # the scenario's engine (a mapping: by device name or vendor)
    factors: dict[str, dict[str, float]] = field(default_factory=dict)    # profile -> {compute, other}
    _cache: dict[str, HardwareProfile] = field(default_factory=dict)


_ACTIVE: ContextVar[Quantile | None] = ContextVar("planner_performance_quantile", default=None)


@contextmanager
def performance_at(confidence: float, framework: str | dict[str, str] | None = None) -> Iterator[Quantile]:
    """Resolve hardware at the ``confidence`` quantile of the bands; yields the record of the
    factors applied to each profile."""
    q = Quantile(confidence, framework)
    token = _ACTIVE.set(q)
    try:
        yield q
    finally:
        _ACTIVE.reset(token)


def slowdowns(vendor: str, framework: str | None, confidence: float) -> dict[str, float]:
    """``{compute, other}``: the compute- and memory-bound serving bands' slowdown at ``confidence``
    relative to their median, ``s_c / s_0.5`` (1.0 where no band exists). The model itself is the median
    plan: its bias in a regime is what the framework entries calibrate, and a plan at 0.5 must not
    move each time the bands are regenerated; the band's spread above (below) its median is the
    margin a more (less) certain plan buys."""
    from planner.catalog.bands import load_bands, lookup

    table = load_bands()
    out = {}
    for key, bound in (("compute", "compute"), ("other", "memory")):
        band = lookup(vendor, framework, bound, "serving", table) if table else None
        out[key] = table.slowdown(band, confidence) / table.slowdown(band, 0.5) if band and table else 1.0
    return out


def derate(hw: HardwareProfile, compute: float, other: float) -> HardwareProfile:
    """``hw`` with compute time x ``compute`` and memory/link/overhead time x ``other``."""
    def scaled(fig, f):
        return fig.model_copy(update={"value": fig.value * f}) if fig is not None else None

    def link(lk):
        return lk.model_copy(update={"bandwidth_per_direction": scaled(lk.bandwidth_per_direction, 1 / other),
                                     "latency": scaled(lk.latency, other),
                                     "ring_hop_latency": scaled(lk.ring_hop_latency, other)})

    eff = hw.efficiency.model_copy(update={
        name: scaled(getattr(hw.efficiency, name), other)
        for name in ("kernel_latency", "step_overhead", "sequence_overhead", "request_overhead",
                     "eager_prefill_dispatch")})
    return hw.model_copy(update={
        "peak_flops": {k: scaled(v, 1 / compute) for k, v in hw.peak_flops.items()},
        "memory": hw.memory.model_copy(update={"bandwidth": scaled(hw.memory.bandwidth, 1 / other)}),
        "scale_up": link(hw.scale_up), "scale_out": link(hw.scale_out), "efficiency": eff})


def active(hw: HardwareProfile) -> HardwareProfile:
    """``hw`` derated if a ``performance_at`` context is open, else ``hw``."""
    q = _ACTIVE.get()
    if q is None:
        return hw
    if hw.name not in q._cache:
        from planner.catalog.frameworks import framework_for

        f = slowdowns(hw.vendor, framework_for(q.framework, hw), q.confidence)
        q.factors[hw.name] = f
        q._cache[hw.name] = hw if f["compute"] == f["other"] == 1.0 else derate(hw, f["compute"], f["other"])
    return q._cache[hw.name]
