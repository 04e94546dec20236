"""Reactive autoscaling over a demand curve, step by step (one minute by default).

Policy (the shape of Kubernetes' HPA and of cloud autoscaling groups): each step the controller
reads the step's request rate ``lambda`` and wants ``ceil(lambda / (target_utilization x c))``
replicas, clipped to ``[max(min_replicas, floor), max_replicas]``, where ``c`` is one replica's
largest request rate meeting the SLOs (the analytic serving model's steady state: capacity is
taken as fixed per replica, queueing transients inside a step are not simulated).

* scale up: missing replicas are requested at once and serve after ``scale_up_delay_s`` =
  provisioning + weight load (model weight bytes / load bandwidth); they are paid while booting;
* start: as many replicas as the first step wants (a running service, not a cold start);
* scale down: replicas above the wish are released once the wish has stayed lower for
  ``scale_down_delay_s``; never below the floor.

Within each hour the rate follows the per-minute fluctuation of a bundled Azure trace (replayed
from a seeded offset), so a replica count sized for the hour's mean still sees minute bursts.
Requests beyond the ready capacity ``ready x c`` are counted as missing the SLO; the rest meet it
(the deployment was sized so that a replica at ``c`` meets the SLO percentiles). An hour *meets*
the SLO when the fraction of its requests within capacity is at least ``hourly_target``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import Field, field_validator

from planner.frozen import Frozen

MAX_STEPS = 150_000   # longer horizons run at coarser steps (a multiple of a minute)


class AutoscaleSpec(Frozen):
    """``design.autoscale``: a reactive policy and the time a new replica takes to serve."""

    target_utilization: float = Field(0.8, gt=0, le=1, description="replica load the controller aims for")
    provisioning_s: float = Field(120.0, ge=0, description="request to a booted node with drivers and "
                                  "the serving container (assumption; see README)")
    load_bandwidth: float = Field(5e9, ge=1e6, description="bytes/s of weight loading per replica "
                                  "(ServerlessLLM's remote-download example: 5 GB/s); at least 1 MB/s")
    scale_up_delay_s: float | None = Field(None, ge=0, description="override provisioning + weight load")
    scale_down_delay_s: float = Field(600.0, ge=0)
    min_replicas: int = Field(1, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    step_s: float = Field(60.0, gt=0, le=3600)
    hourly_target: float = Field(0.99, gt=0, le=1, description="share of an hour's requests within "
                                 "capacity for the hour to count as meeting the SLO")
    seed: int = Field(0, ge=0, lt=2**32, description="random seed of the within-hour demand draws")

    @field_validator("load_bandwidth", mode="before")
    @classmethod
    def _bandwidth(cls, v):
        from planner.units import parse_quantity

        return parse_quantity(v, "bytes/s")

    def delay_s(self, weight_bytes: float) -> float:
        if self.scale_up_delay_s is not None:
            return self.scale_up_delay_s
        return self.provisioning_s + weight_bytes / self.load_bandwidth


@dataclass(frozen=True)
class StepDemand:
    rate: np.ndarray        # (T,) requests/s in each step
    period: np.ndarray      # (T,) period index of each step
    step_s: float


def step_demand(rate: np.ndarray, hours: np.ndarray, factors: np.ndarray, step_s: float, seed: int) -> StepDemand:
    """Per-step rates: each period's mean rate times the trace's per-minute factors (block means
    for steps longer than a minute), from a random offset per period."""
    total_s = float(hours.sum()) * 3600
    step_s = max(step_s, math.ceil(total_s / MAX_STEPS / 60) * 60)
    steps = np.maximum(np.round(hours * 3600 / step_s).astype(int), 1)
    period = np.repeat(np.arange(len(rate)), steps)
    rng = np.random.default_rng(seed)
    offset = rng.integers(0, len(factors), len(rate))
    k = np.arange(period.size) - np.repeat(np.cumsum(steps) - steps, steps)   # step within its period
    minutes = max(int(round(step_s / 60)), 1)
    idx = (offset[period] + k * minutes)[:, None] + np.arange(minutes)[None, :]
    f = factors[idx % len(factors)].mean(axis=1)
    f = f / np.bincount(period, weights=f)[period] * steps[period]     # each period keeps its mean
    return StepDemand(rate[period] * f, period, step_s)


@dataclass(frozen=True)
class AutoscaleRun:
    hourly_attainment: np.ndarray     # (P,) share of each period's requests within capacity
    replicas: np.ndarray              # (T,) ready replicas per step
    paid: np.ndarray                  # (T,) ready + booting replicas per step
    needed: np.ndarray                # (T,) ceil(rate / capacity) per step
    step_s: float


def _whole(rate: np.ndarray, per_replica: float) -> np.ndarray:
    """Replicas carrying ``rate`` at ``per_replica`` each: the next whole number (exact multiples
    stay), at least one for any positive rate."""
    return np.where(rate > 0, np.maximum(np.ceil(rate / per_replica * (1 - 1e-9)), 1), 0)


def _steps(periods: float, T: int) -> int:
    """Whole steps of a delay, at most ``T + 1``: a replica that boots, or a surplus that waits, longer
    than the run does the same as one that never does (also for delays of 1e19 s or inf)."""
    return T + 1 if periods >= T + 1 else int(math.ceil(periods - 1e-9))


def simulate(sd: StepDemand, capacity: float, spec: AutoscaleSpec, delay_s: float, floor: int = 0,
             periods: int | None = None) -> AutoscaleRun:
    """Run the reactive policy over ``sd`` (see the module docstring)."""
    lam = sd.rate
    T = lam.size
    up = _steps(delay_s / sd.step_s, T)
    down = _steps(spec.scale_down_delay_s / sd.step_s, T)
    lo = max(spec.min_replicas, floor)
    hi = spec.max_replicas if spec.max_replicas is not None else 1 << 40
    hi = max(hi, lo)
    wish = np.clip(_whole(lam, spec.target_utilization * capacity), lo, hi).astype(np.int64).tolist()
    arriving = [0] * (T + up + 1)
    ready, booting, below = (wish[0] if T else lo), 0, 0     # starts warm, sized for the first step
    ready_out = np.empty(T, np.int64)
    paid_out = np.empty(T, np.int64)
    for i in range(T):
        if arriving[i]:
            ready += arriving[i]
            booting -= arriving[i]
        w = wish[i]
        if w > ready + booting:
            extra = w - ready - booting
            if up == 0:
                ready += extra
            else:
                arriving[i + up] += extra
                booting += extra
        if w < ready:
            below += 1
            if below > down:
                ready = max(w, lo)
                below = 0
        else:
            below = 0
        ready_out[i] = ready
        paid_out[i] = ready + booting
    served = np.minimum(lam, ready_out * capacity)
    P = periods if periods is not None else int(sd.period.max()) + 1
    offered = np.bincount(sd.period, weights=lam, minlength=P)
    within = np.bincount(sd.period, weights=served, minlength=P)
    att = np.where(offered > 0, within / np.where(offered > 0, offered, 1.0), 1.0)
    needed = _whole(lam, capacity).astype(np.int64)
    return AutoscaleRun(att, ready_out, paid_out, needed, sd.step_s)


def safe_floor(sd: StepDemand, capacity: float, spec: AutoscaleSpec, delay_s: float, periods: int) -> int | None:
    """Smallest always-on replica floor with which every period meets ``hourly_target`` (bisection:
    a higher floor never lowers attainment); None if even the peak need as a floor does not."""
    hi = int(np.ceil(sd.rate.max() / capacity * (1 - 1e-9))) if sd.rate.size else 0
    if spec.max_replicas is not None:
        hi = min(hi, spec.max_replicas)

    def ok(f: int) -> bool:
        return bool((simulate(sd, capacity, spec, delay_s, f, periods).hourly_attainment
                     >= spec.hourly_target - 1e-12).all())

    if not ok(hi):
        return None
    lo = 0
    if ok(lo):
        return 0
    while hi - lo > 1:              # ok(hi) and not ok(lo)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def safe_target_utilization(sd: StepDemand, capacity: float, spec: AutoscaleSpec, delay_s: float, periods: int,
                            floor: int = 0, iterations: int = 8) -> float | None:
    """Highest target utilisation (to 1/2^iterations) with which every period meets
    ``hourly_target`` on ``floor`` (bisection: a lower target keeps more headroom); None if even
    a target of 1/2^iterations does not."""
    def ok(u: float) -> bool:
        run = simulate(sd, capacity, spec.model_copy(update={"target_utilization": u}), delay_s, floor, periods)
        return bool((run.hourly_attainment >= spec.hourly_target - 1e-12).all())

    lo, hi = 0.0, 1.0
    if ok(hi):
        return 1.0
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo if lo > 0 else None
