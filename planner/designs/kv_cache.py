"""Session workloads on a KV-cache hierarchy: the prefix hit rate a deployment reaches, fed back
into its sizing.

The hit rate depends on the deployment (HBM left beyond the running batch, the offload tiers of
its platform, and the sessions each instance sees under session-affine routing, ``lambda_s / k``)
while the deployment depends on the hit rate (hits skip prefill compute). ``plan_with_cache``
iterates the two to a fixed point: plan at a hit rate, compute the hit rate of the chosen
deployment (``prefix_cache``, Che's approximation), replan. A shared remote pool sized per
instance behaves identically: ``k`` instances with ``C / k`` each see the same characteristic time
as one cache ``C`` under ``lambda_s``. The report gives the hit rate per tier, the prefill saved,
the mean time to load hits from slower tiers, the cache simulator's check and the capacity a
target hit rate needs.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from planner.catalog.frameworks import as_run
from planner.catalog.hardware import HardwareProfile
from planner.catalog.kv_tiers import TierName
from planner.catalog.model import ModelSpec
from planner.designs.colocated import Deployment, plan_colocated, rescaled
from planner.errors import InfeasibleError
from planner.frozen import Frozen
from planner.perf.estimate import resolve_dtypes
from planner.perf.kv_tiers import Tier, instance_tiers
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving.batching import Engine
from planner.serving.cache_sim import BLOCK_TOKENS, replay
from planner.serving.prefix_cache import (
    ReuseProfile,
    capacity_for,
    characteristic_time,
    hit_rate,
    tier_bounds,
    tier_hit_rates,
)
from planner.serving.sessions import SessionStream, SessionWorkload, TierTime
from planner.serving.workload import length_stats
from planner.units import parse_quantity

MAX_HIT = 0.995           # Workload.prefix_hit must stay below 1
SIM_SESSIONS = 1500       # sessions replayed by the cache simulator check
SIM_SEED = 2024


class KVCacheSpec(Frozen):
    """``kv_cache:`` of a scenario: the tiers a session workload's prefix cache may use."""

    tiers: list[TierName] = Field(["hbm"], min_length=1, description="fastest first; hbm first")
    platform: str | None = Field(None, description="row of planner/catalog/kv_tiers.yaml (default: the hardware)")
    capacity_per_accelerator: dict[TierName, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        {}, description="override an offload tier's size per accelerator, e.g. {host_dram: 256 GB}")
    target_hit: float | None = Field(None, gt=0, lt=1, description="report the capacity this hit rate needs")
    simulate: bool = Field(True, description="check the analytic hit rate with the block-level LRU replay")
    inclusive: bool = Field(False, description="slower tiers also hold what faster ones hold (write-through, "
                            "LMCache / vLLM CPU offload); default: exclusive, victims demoted")

    def reach_tokens(self, tiers: list[Tier]) -> float:
        """How deep in the LRU stack the tiers together reach."""
        return float(tier_bounds([t.tokens for t in tiers], self.inclusive)[-1])

    @field_validator("capacity_per_accelerator", mode="before")
    @classmethod
    def _bytes(cls, v):
        return {k: parse_quantity(x, "bytes") for k, x in v.items()} if isinstance(v, dict) else v

    @field_validator("tiers")
    @classmethod
    def _hbm_first(cls, v: list[str]) -> list[str]:
        if v[0] != "hbm" or len(set(v)) != len(v):
            raise ValueError(f"tiers start with hbm and name each tier once, got {v}")
        return v


class TierReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    tier: str
    capacity_tokens_per_instance: float
    gb_per_accelerator: float
    hit_rate: float
    simulated_hit_rate: float | None
    load_s_per_token: float


class CacheReport(BaseModel):
    """Prefix cache of one instance of the chosen deployment."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    hit_rate: float
    simulated_hit_rate: float | None
    upper_bound: float                    # unbounded capacity: every history and system token
    tiers: list[TierReport]
    sessions_per_s_per_instance: float
    characteristic_time_s: float          # how long an idle session's KV survives (Che)
    prefill_tokens_saved_per_s: float     # whole deployment
    mean_load_s: float                    # mean time to load a turn's hits from slower tiers
    mean_prompt_tokens: float
    target_hit: float | None
    capacity_for_target_gb_per_accelerator: float | None   # all tiers together
    fixed_point_iterations: int


def plan_with_cache(model: ModelSpec, workload: SessionWorkload, spec: KVCacheSpec, plan_args: dict
                    ) -> tuple[list[Deployment], SessionWorkload, CacheReport]:
    """Colocated plan of a session workload at a fixed point of hit rate and instance count, for
    each candidate (hardware, layout, dtype) on its own; the cheapest wins.

    ``k`` instances see ``lambda_s / k`` sessions each, so the hit rate ``h(k)`` rises with ``k``
    while the instances a hit rate needs, ``K(h)``, fall with ``h``: a candidate's answer is the
    smallest ``k >= K(h(k))``, found by doubling then bisection from the plan at the session
    model's upper bound (optimistic)."""
    profile = ReuseProfile.of(workload.stream(), workload.session_rate, _think(workload))
    results, reasons = [], []
    for one in _single_candidates(plan_args):
        try:
            results.append(_fixed_point(model, workload, spec, profile, one))
        except InfeasibleError as e:
            reasons.append(str(e))
    if not results:
        raise InfeasibleError(reasons[0] if len(set(reasons)) == 1 else "; ".join(dict.fromkeys(reasons)))
    results.sort(key=lambda r: (r[0].usd_per_h, r[0].accelerators))
    deployments = [r[0] for r in results]
    best, (hit, times), evals = results[0]
    w = with_hits(workload, hit, times)
    return deployments, w, cache_report(model, best, w, spec, profile, evals, plan_args.get("engine"))


def _single_candidates(plan_args: dict):
    for hw in plan_args["hardware"]:
        for tp in plan_args["tp"]:
            for ep in plan_args["ep"]:
                for pp in plan_args["pp"]:
                    for wd in plan_args["weight_dtypes"]:
                        yield {**plan_args, "hardware": [hw], "tp": [tp], "ep": [ep], "pp": [pp],
                               "weight_dtypes": [wd]}


def _fixed_point(model: ModelSpec, workload: SessionWorkload, spec: KVCacheSpec, profile: ReuseProfile,
                 plan_args: dict) -> tuple[Deployment, float, int]:
    plan = _planner(model, workload, plan_args)
    ref = plan(profile.upper_bound, ())[0]
    cap = plan_args.get("max_instances", 100_000)
    evals: dict[int, tuple[float, tuple[TierTime, ...], Deployment | None]] = {}

    def holds(k: int) -> bool:
        hit, times = _hit(model, ref, workload, spec, profile, k, plan_args.get("engine"))
        try:
            best = plan(hit, times)[0]
        except InfeasibleError:
            best = None
        evals[k] = (hit, times, best)
        return best is not None and best.instances <= k

    lo, hi = ref.instances - 1, ref.instances          # k = lo is below the optimistic count
    while not holds(hi):                                # double until the fixed point holds
        if hi >= cap:
            raise InfeasibleError(f"{ref.hardware} tp={ref.tp}: no instance count up to {cap} reaches the prefix "
                                  f"hit rate its sizing needs (hit {evals[hi][0]:.1%} at {hi} instances); add KV "
                                  "tiers (kv_cache.tiers), raise max_instances or relax the SLOs")
        lo, hi = hi, min(2 * hi, cap)
    while hi - lo > 1:                                  # smallest k that holds
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    hit, times, best = evals[hi]
    return (rescaled(best, hi) if best.instances < hi else best), (hit, times), len(evals)


def _planner(model: ModelSpec, workload: SessionWorkload, plan_args: dict):
    def plan(hit: float, times: tuple[TierTime, ...]) -> list[Deployment]:
        return plan_colocated(model, with_hits(workload, hit, times), **plan_args)
    return plan


def with_hits(w: SessionWorkload, hit: float, times: tuple[TierTime, ...]) -> SessionWorkload:
    """``w`` with the cache's aggregate hit rate and each tier's characteristic time and load
    cost (per-turn hits and loads; none: one figure for every turn)."""
    return w.model_copy(update={"prefix_hit": min(hit, MAX_HIT), "cache_tiers": tuple(times)})


def tier_times(p: ReuseProfile, tiers: list[Tier], inclusive: bool) -> tuple[TierTime, ...]:
    """How long an idle session stays within each tier's reach, with the tier's load cost."""
    ttl = characteristic_time(p, tier_bounds([t.tokens for t in tiers], inclusive))
    return tuple(TierTime(ttl_s=float(x), load_s_per_token=t.load_s_per_token) for x, t in zip(ttl, tiers, strict=True))


def _hit(model: ModelSpec, d: Deployment, w: SessionWorkload, spec: KVCacheSpec, profile: ReuseProfile,
         k: int, engine: Engine | None = None) -> tuple[float, tuple[TierTime, ...]]:
    """Hit rate and tier times of ``d``'s tiers with ``k`` instances."""
    tiers = deployment_tiers(model, d, w, spec, engine=engine)
    p = profile.at_rate(w.session_rate / k)
    return float(hit_rate(p, spec.reach_tokens(tiers))[0]), tier_times(p, tiers, spec.inclusive)


def _think(w: SessionWorkload):
    return w.sessions.think if w.sessions.trace is None else None


def deployment_tiers(model: ModelSpec, d: Deployment, w: SessionWorkload, spec: KVCacheSpec,
                     capacity: dict[str, float] | None = None, engine: Engine | None = None) -> list[Tier]:
    """The KV tiers of one instance of ``d``, its HBM tier what the KV pool holds beyond the running
    sequences on the device as ``engine`` runs it (entry, memory setting and KV-pool cap:
    ``Engine.profile_on``; none: the vendor's default engine), as the search sized it."""
    hw = (engine or Engine()).profile_on(d.hardware)
    dtypes = resolve_dtypes(model, d.weight_dtype, d.kv_dtype)
    running = d.decode_batch * length_stats(w).mean_decode_ctx
    return instance_tiers(model, hw, Layout.of(d.tp, d.ep, d.pp), dtypes, spec.tiers, spec.platform or hw.name,
                          running, {**spec.capacity_per_accelerator, **(capacity or {})})


def cache_report(model: ModelSpec, d: Deployment, w: SessionWorkload, spec: KVCacheSpec, profile: ReuseProfile,
                 iterations: int, engine: Engine | None = None) -> CacheReport:
    return tiers_report(deployment_tiers(model, d, w, spec, engine=engine), w, spec,
                        profile.at_rate(w.session_rate / d.instances), iterations)


def tiers_report(tiers: list[Tier], w: SessionWorkload, spec: KVCacheSpec, p: ReuseProfile, iterations: int = 0,
                 simulate: bool | None = None) -> CacheReport:
    """Hit rate per tier of one instance's ``tiers`` under ``p`` (its session rate), the prefill the
    whole deployment saves, the mean load time of hits, the replay's check (``simulate``, default
    ``spec.simulate``) and the capacity ``spec.target_hit`` needs."""
    rate = p.session_rate
    sizes = [t.tokens for t in tiers]
    per_tier = tier_hit_rates(p, sizes, spec.inclusive)
    sim = simulated(w, rate, tier_bounds(sizes, spec.inclusive)) if (spec.simulate if simulate is None
                                                                     else simulate) else None
    mean_prompt = p.prompt_tokens / p.turns
    target = None
    if spec.target_hit is not None:
        need = capacity_for(p, spec.target_hit)
        per_token = _bytes_per_token(tiers)
        target = need * per_token / 1e9 if np.isfinite(need) and per_token else float("inf")
    return CacheReport(
        hit_rate=float(per_tier.sum()), simulated_hit_rate=None if sim is None else float(sim.sum()),
        upper_bound=p.upper_bound,
        tiers=[TierReport(tier=t.name, capacity_tokens_per_instance=t.tokens, gb_per_accelerator=t.bytes_per_accelerator
                          / 1e9, hit_rate=float(h), simulated_hit_rate=None if sim is None else float(s),
                          load_s_per_token=t.load_s_per_token)
               for t, h, s in zip(tiers, per_tier, sim if sim is not None else [None] * len(tiers), strict=True)],
        sessions_per_s_per_instance=rate,
        characteristic_time_s=float(characteristic_time(p, spec.reach_tokens(tiers))[0]),
        prefill_tokens_saved_per_s=float(per_tier.sum() * mean_prompt * w.request_rate),
        mean_load_s=float(sum(h * mean_prompt * t.load_s_per_token for h, t in zip(per_tier, tiers, strict=True))),
        mean_prompt_tokens=mean_prompt, target_hit=spec.target_hit, capacity_for_target_gb_per_accelerator=target,
        fixed_point_iterations=iterations)


def _bytes_per_token(tiers: list[Tier]) -> float:
    """Bytes one cached token takes on one accelerator (the same in every tier)."""
    return next((t.bytes_per_accelerator / t.tokens for t in tiers if t.tokens > 0), 0.0)


def simulated(w: SessionWorkload, session_rate: float, bounds_tokens) -> np.ndarray:
    """Per-tier hit rates of the block-level LRU replay of a fresh session sample at this rate."""
    return replay(_sim_stream(w, session_rate), BLOCK_TOKENS).tier_hit_rates(bounds_tokens)


def _sim_stream(w: SessionWorkload, session_rate: float):
    """A fresh sample (its own seed) of the session model at this rate; for a trace, the sessions
    one of ``k = lambda_s / rate`` instances gets under session-affine routing (every k-th)."""
    if w.sessions.trace is None:
        return w.sessions.stream(SIM_SESSIONS, session_rate, SIM_SEED)
    s = w.stream()
    k = max(1, round(w.session_rate / session_rate))
    keep = s.session % k == 0
    return SessionStream(**{f: (v[keep] if isinstance(v, np.ndarray) else v) for f, v in vars(s).items()})


class CapacityCurve(BaseModel):
    """Hit rate of one instance of the chosen deployment against its total cache size."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    gb_per_accelerator: list[float]
    analytic_hit_rate: list[float]
    simulated_hit_rate: list[float]
    upper_bound: float
    plan_gb_per_accelerator: float       # the deployment's tiers together
    sessions_per_s_per_instance: float


def capacity_curve(model: ModelSpec, d: Deployment, w: SessionWorkload, spec: KVCacheSpec,
                   points: int = 24, engine: Engine | None = None) -> CapacityCurve:
    """Analytic and simulated hit rates from 1% to 4x the deployment's cache (log grid)."""
    tiers = deployment_tiers(model, d, w, spec, engine=engine)
    tokens = spec.reach_tokens(tiers)
    gb = tokens * _bytes_per_token(tiers) / 1e9
    rate = w.session_rate / d.instances
    p = ReuseProfile.of(w.stream(), w.session_rate, _think(w)).at_rate(rate)
    scale = np.geomspace(0.01, 4.0, points)
    sim = replay(_sim_stream(w, rate), BLOCK_TOKENS).hit_rate(scale * tokens)
    return CapacityCurve(gb_per_accelerator=(scale * gb).tolist(),
                         analytic_hit_rate=hit_rate(p, scale * tokens).tolist(), simulated_hit_rate=sim.tolist(),
                         upper_bound=p.upper_bound, plan_gb_per_accelerator=gb,
                         sessions_per_s_per_instance=rate)


def pool_cache(model: ModelSpec, w: SessionWorkload, spec: KVCacheSpec, hw: HardwareProfile, lay: Layout,
               dtypes: DTypes, instances: int, simulate: bool = False) -> tuple[SessionWorkload, CacheReport]:
    """``w`` with the hit rate and per-tier times of a given pool of ``instances`` machines that
    hold the prefix cache (a PrfaaS site, Splitwise's prompt pool or colocated baseline: designs
    whose pools are given rather than searched), and its report. Sessions stick to one machine of
    the pool (``lambda_s / instances`` each). The running batch is not subtracted from HBM: exact
    for prompt machines (no decode batch), optimistic for pools that also decode."""
    tiers = instance_tiers(model, hw, lay, dtypes, spec.tiers, spec.platform or hw.name, 0.0,
                           spec.capacity_per_accelerator)
    p = ReuseProfile.of(w.stream(), w.session_rate, _think(w)).at_rate(w.session_rate / instances)
    out = with_hits(w, float(hit_rate(p, spec.reach_tokens(tiers))[0]), tier_times(p, tiers, spec.inclusive))
    return out, tiers_report(tiers, out, spec, p, simulate=simulate)


def site_cache(model: ModelSpec, w: SessionWorkload, spec: KVCacheSpec, hardware: str, tp: int, ep: int,
               instances: int, weight_dtype, kv_dtype) -> tuple[SessionWorkload, CacheReport]:
    """``pool_cache`` of a PrfaaS site given by name, TP/EP and dtypes, on the vendor's default
    engine (the one PrfaaS sites run)."""
    hw = as_run(hardware)
    lay = Layout.of(tp, ep if model.moe is not None else 1, 1)
    return pool_cache(model, w, spec, hw, lay, resolve_dtypes(model, weight_dtype, kv_dtype), instances)
