"""Colocated design: one pool of identical instances, each serving prefill and decode with
continuous batching (optionally chunked prefill). Finds the cheapest deployment - hardware,
TP/EP/PP, dtype, instance count - whose analytic steady state meets the SLOs at the offered
rate, and says which constraint binds.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import as_run, engine_name
from planner.catalog.hardware import HardwareProfile
from planner.catalog.hardware import hardware as get_hardware
from planner.catalog.model import ModelSpec
from planner.errors import InfeasibleError
from planner.frozen import Frozen
from planner.perf.cost import CostModel
from planner.perf.memory import pool_allocated_tokens
from planner.perf.ops import DTypes, states_format
from planner.perf.parallel import Layout, dp_ranks
from planner.search import BLOCK, blocks, candidates, map_blocks, steady_heap
from planner.serving.batching import Engine
from planner.serving.queueing import PREFILL_CAPACITY, Curve, attainment, interpolate, serving_curve, slo_ok
from planner.serving.slo import PERCENTILES, SLO
from planner.serving.workload import LengthStats, Workload, length_stats
from planner.units import HOUR_S


class ColocatedSpec(Frozen):
    """``design: {type: colocated}``: prefill and decode share every instance."""

    type: Literal["colocated"] = "colocated"


class Deployment(BaseModel):
    """One evaluated deployment at the offered load (all figures for the whole deployment)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    hardware: str
    tp: int
    ep: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    state_dtype: str | None = None    # linear-attention recurrent states (None: the model keeps none)
    engine: str | None = None         # the framework entry it runs (engine.framework, or its vendor's default)
    instances: int
    accelerators: int
    rate_per_instance: float
    max_rate_per_instance: float      # highest per-instance rate meeting the SLOs
    decode_batch: float               # mean sequences decoding per instance
    max_num_seqs: int                 # engine setting (per attention replica) admitting the P99 decode batch
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    e2e_s: dict[str, float]
    slo_attainment: float
    prefill_utilization: float
    usd_per_h: float
    usd_per_million_output_tokens: float
    usd_per_million_tokens: float     # input + output
    avg_power_w: float
    peak_power_w: float
    provisioned_power_w: float        # accelerators x TDP
    output_tokens_per_s: float
    output_tokens_per_joule: float
    binding: str                      # the constraint that stops fewer instances from sufficing


@dataclass(frozen=True)
class _Evaluated:
    hw: HardwareProfile
    dtypes: DTypes
    lay: Layout
    curve: Curve
    ok: np.ndarray


def _binding(curve: Curve, ok: np.ndarray, slo: SLO, row: int) -> str:
    """Name the first constraint that fails just beyond the highest SLO-meeting load."""
    good = np.flatnonzero(ok[row])
    if good.size == 0:
        return "no load meets the SLOs"
    j = good[-1] + 1
    if j >= ok.shape[1] or not np.isfinite(curve.rate[row, j]):
        return str(curve.limit[row])
    if curve.rho[row, j] >= 1:
        return PREFILL_CAPACITY
    for metric, values in (("ttft_s", curve.ttft), ("tpot_s", curve.tpot), ("e2e_s", curve.e2e)):
        for p, bound in getattr(slo, metric).items():
            if values[p][row, j] > bound:
                return f"{metric}.{p} <= {bound:g}"
    return "slo_attainment"


def _block_jobs(model: ModelSpec, hardware: list[str], tp: list[int], ep: list[int], pp: list[int],
                weight_dtypes: list[DType], kv_dtype: DType | None, engine: Engine, block: int) -> Iterator[tuple]:
    """``(group, candidate indices, hardware, layouts, dtypes)`` of every block, in search order
    (group: the rank of the hardware and dtype in the search)."""
    for group, (hw, lay, dtypes) in enumerate(candidates(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype,
                                                           engine.framework, engine.memory_fraction,
                                                           engine.kv_pool_tokens)):
        for index, sub in blocks(lay, block):
            yield group, index, hw, sub, dtypes


def _reduce_block(job, model, engine, stats, arrival_scv, slo, power, rate, cost, max_instances,
                  top) -> tuple[int, _LightLoad, list[tuple]]:
    """One block evaluated (``power=False``: powers left NaN) and reduced at once to what the
    answer needs: its light-load figures and its ``top`` cheapest distinct candidates (one task:
    picklable for a process pool; merging blocks' rows gives what one pass over all keeps)."""
    group, index, hw, sub, dtypes = job
    steady_heap()                    # once per process: pool workers too
    # without powers the survivors' curves are computed again in full (``_with_power``): a block's
    # curve needs only the percentiles the SLO bounds (each is the same number computed alone)
    curve = serving_curve(model, hw, sub, dtypes, engine, stats, arrival_scv, power=power,
                          percentiles=PERCENTILES if power else slo.bound_percentiles())
    ev = _Evaluated(hw, dtypes, sub, curve, slo_ok(curve, slo))
    light, keep = _LightLoad(), _Cheapest(top)
    light.add(curve)
    max_ok = np.where(ev.ok, curve.rate, -np.inf).max(axis=1)
    i = np.flatnonzero(max_ok > 0)
    need = np.ceil(rate / max_ok[i] * (1 - 1e-9))            # filtered as floats: a huge rate must not
    i, k = i[need <= max_instances], need[need <= max_instances].astype(np.int64)   # wrap to a negative count
    if i.size:
        acc = k * curve.devices[i]
        dev_power = interpolate(curve.rows(i), curve.power_w[i], rate / k) if cost.owned else np.zeros(i.size)
        usd = acc * _usd_per_device_hour(cost, hw, dev_power)
        keep.add(ev, i, k, usd, acc, (np.int64(group) << 40) + index[i])
    return index.size, light, keep.rows


@dataclass(frozen=True)
class ColocatedSearch:
    deployments: list[Deployment]     # cheapest first
    candidates: int                   # candidates evaluated (hardware x layout x dtype)


def plan_colocated(model: ModelSpec, workload: Workload, slo: SLO, engine: Engine, cost: CostModel,
                   hardware: list[str], tp: list[int], ep: list[int], pp: list[int], weight_dtypes: list[DType],
                   kv_dtype: DType | None = None, max_instances: int = 100_000) -> list[Deployment]:
    """Every candidate that meets the SLOs at the workload's rate, cheapest first."""
    return search_colocated(model, workload, slo, engine, cost, hardware, tp, ep, pp, weight_dtypes, kv_dtype,
                            max_instances).deployments


def search_colocated(model: ModelSpec, workload: Workload, slo: SLO, engine: Engine, cost: CostModel,
                     hardware: list[str], tp: list[int], ep: list[int], pp: list[int], weight_dtypes: list[DType],
                     kv_dtype: DType | None = None, max_instances: int = 100_000, top: int | None = None,
                     block: int = BLOCK, workers: int = 1) -> ColocatedSearch:
    """The ``top`` cheapest deployments of distinct (hardware, layout, dtype) (all if None) that
    meet the SLOs at the workload's rate, streaming: each block of candidates is ranked by cost
    as arrays and only the survivors become ``Deployment`` objects, so with ``top`` memory is
    O(block + top). Ties (equal $/h and accelerators) keep the search order. ``workers`` > 1
    evaluates blocks on that many local processes, merged in search order (the same answer)."""
    steady_heap()
    stats = length_stats(workload)
    rate = workload.request_rate
    keep = _Cheapest(top)
    light = _LightLoad()
    count = 0
    # a rented device's price does not depend on its power: then only the survivors need powers,
    # recomputed for them at the end (row by row the same numbers), and the blocks skip them
    power = cost.owned or top is None
    jobs = _block_jobs(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype, engine, block)
    task = functools.partial(_reduce_block, model=model, engine=engine, stats=stats,
                             arrival_scv=workload.arrival.scv, slo=slo, power=power, rate=rate, cost=cost,
                             max_instances=max_instances, top=top)
    for n, part_light, rows in map_blocks(task, jobs, workers):
        count += n
        light.merge(part_light)
        keep.merge(rows)
    if not keep.rows:
        if (not light.fits and engine.kv_pool_tokens is not None and stats.mean_full_len <= engine.kv_pool_tokens
                and _allocates_cap(engine, hardware)):
            # an engine that allocates the capped pool as given (vLLM) does not start where the cap
            # exceeds memory: said as such where the candidates fit without it
            free = engine.model_copy(update={"kv_pool_tokens": None})
            uncapped = _LightLoad()
            for _, part_light, _ in map_blocks(functools.partial(task, engine=free),
                                               _block_jobs(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype,
                                                           free, block), workers):
                uncapped.merge(part_light)
            if uncapped.fits:
                engines = "/".join(sorted({engine_name(engine.framework, get_hardware(h)) for h in hardware}))
                raise InfeasibleError(
                    f"{engines} allocates the KV pool the launch caps as given "
                    f"(engine.kv_pool_tokens {engine.kv_pool_tokens:,}; vLLM --num-gpu-blocks-override), more tokens "
                    "than memory holds on every candidate that fits without the cap, so none would start; lower the "
                    "cap (whatif --kv-pool-tokens on a candidate says the most its memory holds) or drop it")
        raise InfeasibleError(_why_infeasible(model, light, slo, rate, max_instances, count,
                                              _engine_floor(engine, hardware, slo), engine, stats))
    survivors = [(ev, k) if power else (_with_power(ev, model, engine, stats, workload.arrival.scv, slo), k)
                 for *_, ev, k in keep.result()]
    deployments = [_deployment(ev, 0, k, rate, slo, cost, stats, model) for ev, k in survivors]
    return ColocatedSearch(deployments, count)


def _with_power(ev: _Evaluated, model: ModelSpec, engine: Engine, stats: LengthStats, arrival_scv: float,
                slo: SLO) -> _Evaluated:
    """A kept one-row candidate's curve again, powers included (every figure of a curve is its own
    row's: the same numbers as in its block; measured-table queries are not counted twice)."""
    from planner.perf.measured import uncounted

    with uncounted():
        curve = serving_curve(model, ev.hw, ev.lay, ev.dtypes, engine, stats, arrival_scv)
    return _Evaluated(ev.hw, ev.dtypes, ev.lay, curve, slo_ok(curve, slo))


def _usd_per_device_hour(cost: CostModel, hw: HardwareProfile, dev_power_w: np.ndarray) -> np.ndarray:
    """``cost.usd_per_device_hour`` at each average device power (a rental price is one number;
    ownership adds the energy bill, priced one quote at a time)."""
    if not cost.owned:
        return np.full(np.shape(dev_power_w), cost.usd_per_device_hour(hw))
    return np.array([cost.usd_per_device_hour(hw, float(w)) for w in dev_power_w])


class _Cheapest:
    """The ``top`` cheapest candidates (by $/h, then accelerators, then search order) of distinct
    (hardware, layout, dtype), or all of them if ``top`` is None, each kept as a one-row curve."""

    def __init__(self, top: int | None) -> None:
        self.top = top
        self.rows: list[tuple] = []     # (usd, accelerators, seq, key, one-row _Evaluated, instances)

    def add(self, ev: _Evaluated, i, k, usd, acc, seq) -> None:
        # cheapest first; after top + len(rows) distinct keys of this block, no later row can be
        # among the top (at most len(rows) of those keys are already held)
        new, keys = [], set()
        for o in np.lexsort((seq, acc, usd)):
            key = self._key(ev, int(i[o]))
            if self.top is not None:
                if len(new) >= self.top + len(self.rows):
                    break
                if key in keys:          # a repeated candidate (lists with duplicates): the cheaper stays
                    continue
                keys.add(key)
            new.append((float(usd[o]), int(acc[o]), int(seq[o]), key, self._one(ev, int(i[o])), int(k[o])))
        self.rows += new
        if self.top is not None:
            self.rows = self._distinct(sorted(self.rows, key=lambda r: r[:3]))[:self.top]

    def merge(self, rows: list[tuple]) -> None:
        """Another block's kept rows (its ``top`` cheapest distinct ones)."""
        self.rows += rows
        if self.top is not None:
            self.rows = self._distinct(sorted(self.rows, key=lambda r: r[:3]))[:self.top]

    @staticmethod
    def _distinct(rows: list[tuple]) -> list[tuple]:
        seen, out = set(), []
        for r in rows:
            if r[3] not in seen:
                seen.add(r[3])
                out.append(r)
        return out

    def result(self) -> list[tuple]:
        return sorted(self.rows, key=lambda r: r[:3])

    @staticmethod
    def _key(ev: _Evaluated, i: int) -> tuple:
        return ev.hw.name, int(ev.lay.tp[i]), int(ev.lay.ep[i]), int(ev.lay.pp[i]), ev.dtypes.weight.value

    @staticmethod
    def _one(ev: _Evaluated, i: int) -> _Evaluated:
        # copies (indexing by a list), not views: a kept row must not hold its whole block's arrays
        lay = Layout.of(ev.lay.tp[[i]], ev.lay.ep[[i]], ev.lay.pp[[i]])
        return _Evaluated(ev.hw, ev.dtypes, lay, ev.curve.rows([i]), ev.ok[[i]])


class _LightLoad:
    """What the infeasibility message needs from every block: whether any layout was valid or
    fits, and the best each latency metric achieves at the lightest load."""

    def __init__(self) -> None:
        self.fits = False
        self.best: dict[str, float] = {}

    def add(self, curve: Curve) -> None:
        if not np.isfinite(curve.n[:, 0]).any():
            return
        self.fits = True
        for metric in ("ttft", "tpot", "e2e"):
            for p in (p for p in PERCENTILES if p in getattr(curve, metric)):   # those the curve computed
                v = np.nanmin(getattr(curve, metric)[p][:, 0])
                key = f"{metric}_s.{p}"
                self.best[key] = min(self.best.get(key, v), v)

    def merge(self, other: _LightLoad) -> None:
        self.fits = self.fits or other.fits
        for key, v in other.best.items():
            self.best[key] = min(self.best.get(key, v), v)


def _deployment(ev: _Evaluated, i: int, k: int, rate: float, slo: SLO, cost: CostModel, stats: LengthStats,
                model: ModelSpec) -> Deployment:
    c, hw = ev.curve, ev.hw
    sub = c.row(i)
    r = rate / k

    def at(values) -> float:
        return float(interpolate(sub, values, r)[0])

    devices = int(c.devices[i])
    n = at(sub.n)
    dev_power = at(sub.power_w)          # the curve already idles part-time below one sequence
    accelerators = k * devices
    usd_h = accelerators * cost.usd_per_device_hour(hw, dev_power)
    out_tps = rate * stats.mean_output
    tot_tps = rate * (stats.mean_input + stats.mean_output)
    avg_w = accelerators * dev_power
    q = {m: {p: at(getattr(sub, m)[p]) for p in (*PERCENTILES, "mean")} for m in ("ttft", "tpot", "e2e")}
    # engine replicas (attention DP ranks) as the engine counts them: one per die of a package
    replicas = dp_ranks(hw, Layout.of(ev.lay.tp[i], ev.lay.ep[i], ev.lay.pp[i]))
    return Deployment(
        hardware=hw.name, tp=int(ev.lay.tp[i]), ep=int(ev.lay.ep[i]), pp=int(ev.lay.pp[i]),
        weight_dtype=ev.dtypes.weight.value, kv_dtype=ev.dtypes.kv.value, engine=hw.framework,
        state_dtype=getattr(states_format(model, hw.efficiency), "value", None), instances=k,
        accelerators=accelerators, rate_per_instance=r,
        max_rate_per_instance=float(np.where(ev.ok[i], c.rate[i], -np.inf).max()),
        decode_batch=n, max_num_seqs=int(np.ceil((n + 2.33 * np.sqrt(max(n, 1.0))) / replicas)) + 1,
        ttft_s=q["ttft"], tpot_s=q["tpot"], e2e_s=q["e2e"],
        slo_attainment=at(attainment(sub, slo)), prefill_utilization=at(sub.rho),
        usd_per_h=usd_h, usd_per_million_output_tokens=usd_h / HOUR_S / out_tps * 1e6,
        usd_per_million_tokens=usd_h / HOUR_S / tot_tps * 1e6, avg_power_w=avg_w,
        peak_power_w=accelerators * at(sub.peak_power_w), provisioned_power_w=accelerators * hw.power.tdp.value,
        output_tokens_per_s=out_tps, output_tokens_per_joule=out_tps / avg_w,
        binding=_binding(c, ev.ok, slo, i),
    )


def _allocates_cap(engine: Engine, hardware: list[str]) -> bool:
    """The engine allocates its launch's KV-pool cap as given on every candidate device
    (``MemoryPolicy.pool_tokens_exact``: vLLM)."""
    return all(pool_allocated_tokens(as_run(h, engine.framework, kv_pool_tokens=engine.kv_pool_tokens)) > 0
               for h in hardware)


def _engine_floor(engine: Engine, hardware: list[str], slo: SLO) -> str | None:
    """The engine's own reason no candidate can meet ``slo`` (its host time per step or request
    over a bound, on every candidate device), or None."""
    from planner.serving.load_point import engine_floor

    floors = [engine_floor(as_run(h, engine.framework), slo) for h in hardware]
    return floors[0] if floors and all(floors) else None


def _why_infeasible(model: ModelSpec, light: _LightLoad, slo: SLO, rate: float, max_instances: int,
                    count: int, floor: str | None = None, engine: Engine | None = None,
                    stats: LengthStats | None = None) -> str:
    if count == 0:
        return f"no valid layout of {model.name} on the candidate hardware (check tp/ep/pp lists and domain sizes)"
    cap = engine.kv_pool_tokens if engine is not None else None
    if not light.fits and cap is not None and stats is not None and stats.mean_full_len > cap:
        return (f"the engine's KV pool is capped at {cap:,} tokens (engine.kv_pool_tokens), fewer than one "
                f"request of the workload holds (~{stats.mean_full_len:,.0f} tokens); raise or drop the cap")
    if not light.fits:
        return (f"{model.name} does not fit on any candidate (weights + KV of one sequence exceed device memory); "
                "add larger tp/pp degrees or fp8 weights")
    best = light.best       # the best each metric can do at the lightest load, over all candidates
    unmet = [f"{k} <= {bound:g} (best achievable {best[k]:.4g} s at light load)"
             for metric in ("ttft_s", "tpot_s", "e2e_s") for p, bound in getattr(slo, metric).items()
             for k in [f"{metric}.{p}"] if best[k] > bound]
    if unmet:
        return ("SLO unreachable on every candidate: " + "; ".join(unmet)
                + (f"; {floor}" if floor else ". Relax it or add faster hardware."))
    if slo.attainment is not None:
        return f"SLO attainment {slo.attainment} unreachable on every candidate; relax it or the latency bounds"
    return (f"meeting the SLOs at {rate:g} req/s needs more than max_instances={max_instances} instances; "
            "raise it or relax the SLOs")


def rescaled(d: Deployment, k: int) -> Deployment:
    """``d`` with ``k`` instances at the same per-instance operating point scaled (cost, power)."""
    f = k / d.instances
    return d.model_copy(update=dict(
        instances=k, accelerators=d.accelerators * k // d.instances, rate_per_instance=d.rate_per_instance / f,
        usd_per_h=d.usd_per_h * f, usd_per_million_output_tokens=d.usd_per_million_output_tokens * f,
        usd_per_million_tokens=d.usd_per_million_tokens * f, avg_power_w=d.avg_power_w * f,
        peak_power_w=d.peak_power_w * f, provisioned_power_w=d.provisioned_power_w * f,
        output_tokens_per_joule=d.output_tokens_per_joule / f))


class SimCheck(BaseModel):
    """The simulator's verdict on a deployment (percentiles from simulated requests)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    instances: int
    requests: int
    seed: int
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    e2e_s: dict[str, float]
    slo_attainment: float
    requests_per_s: float
    preemptions: int
    meets_slo: bool
    violations: list[str]
    avg_power_w: float


def verify_by_simulation(model: ModelSpec, d: Deployment, workload: Workload, slo: SLO, engine: Engine,
                         requests: int, seed: int, instances: int | None = None) -> SimCheck:
    """Run the discrete-event simulator on deployment ``d`` (optionally with another instance count)."""
    from planner.serving.simulate import simulate
    from planner.serving.slo import judge

    k = instances or d.instances
    hw = engine.profile_on(d.hardware)
    dtypes = DTypes(weight=DType(d.weight_dtype), kv=DType(d.kv_dtype))
    lay = Layout.of(d.tp, d.ep, d.pp)
    arrival, inp, out = workload.sample(requests, seed)
    hits, load = workload.sample_cache(requests, seed)      # per turn for sessions: cold turns stay cold
    r = simulate(model, hw, lay, dtypes, engine, arrival, inp, out, instances=k, prefix_hit=hits, seed=seed,
                 load_s=load)
    measured, att, bad = judge(slo, r.ttft_s, r.tpot_s, r.e2e_s, r.output_len)
    return SimCheck(instances=k, requests=requests, seed=seed, ttft_s=measured["ttft_s"], tpot_s=measured["tpot_s"],
                    e2e_s=measured["e2e_s"], slo_attainment=att, requests_per_s=r.requests_per_s,
                    preemptions=r.preemptions, meets_slo=not bad, violations=bad,
                    avg_power_w=r.energy_j / r.makespan_s if r.makespan_s > 0 else float("nan"))
