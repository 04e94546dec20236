"""Horizon design: capacity over a demand curve, the purchase mix, and autoscaling.

1. For each candidate hardware, the inner design (colocated) picks its deployment at the demand's
   peak rate; its per-instance SLO capacity ``c`` then gives the instances every period needs,
   ``n_t = ceil(lambda_t / c)`` - the serving model is evaluated once per hardware (once per point
   of a small grid of length scales when the demand file gives per-period token means, then
   interpolated), never per period.
2. :mod:`planner.designs.purchase` chooses reserved / on-demand / spot instances per period (MILP)
   with energy per running instance-hour for options that pay their own power (the device power
   at the period's load from the same serving curve, x PUE x the hour's $/kWh), and deferrable
   batch work filling spare capacity.
3. The cheapest hardware's plan is replayed under a reactive autoscaler
   (:mod:`planner.designs.autoscale`) to report hourly SLO attainment, over-provisioned GPU-hours
   and the smallest always-on (reserved) floor that keeps every hour within its target.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from planner.catalog.dtypes import DType
from planner.catalog.hardware import hardware as get_hardware
from planner.catalog.model import ModelSpec
from planner.designs.autoscale import safe_floor, safe_target_utilization, simulate, step_demand
from planner.designs.colocated import Deployment, plan_colocated
from planner.designs.horizon_pool import Pool
from planner.designs.horizon_spec import HorizonSpec, gpu_hour_price
from planner.designs.purchase import PurchasePlan, PurchaseProblem, Reserved, Spot, solve_purchase
from planner.errors import InfeasibleError, InputError
from planner.perf.cost import CostModel
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.perf.params import parameter_counts
from planner.serving.batching import Engine
from planner.serving.demand import HOURS_PER_MONTH, DemandSeries, minute_factors
from planner.serving.queueing import at_rates, serving_curve, slo_ok
from planner.serving.slo import SLO
from planner.serving.workload import Workload, length_stats, length_stats_of


class HorizonResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: str = "horizon"
    model: str
    hardware: str
    deployment: str                    # layout of one instance
    devices_per_instance: int
    capacity_per_instance: float       # req/s meeting the SLOs (at the workload's mean lengths)
    hours: float
    peak_rate: float
    reserved: dict[str, int]
    totals: dict[str, float]           # reserved, on_demand, spot, energy, total ($ over the horizon)
    comparisons: dict[str, float]      # static peak fleet on demand; on demand following demand
    committed_beyond_horizon_usd: float
    candidates: list[dict]             # per hardware: deployment, totals, reserved counts
    periods: dict[str, list[float]]    # per-period table (start_h, hours, rate, need, ...)
    monthly: list[dict]
    batch: dict | None = None
    autoscale: dict | None = None
    autoscale_pools: dict[str, dict] = {}   # the replay per pool of a fleet or Splitwise plan
    notes: list[str] = []


def _layout_curve(model, d: Deployment, engine: Engine, stats, scv: float):
    """The serving curve of ``d``'s layout at lengths ``stats``, on its device as the search ran
    it (the engine's entry, memory setting and KV-pool cap applied: ``Engine.profile_on``)."""
    hw = engine.profile_on(d.hardware)
    dtypes = DTypes(weight=DType(d.weight_dtype), kv=DType(d.kv_dtype))
    return serving_curve(model, hw, Layout.of(d.tp, d.ep, d.pp), dtypes, engine, stats, scv)


def _max_ok(curve, slo: SLO) -> float:
    ok = slo_ok(curve, slo)
    return float(np.where(ok, curve.rate, -np.inf).max()) if ok.any() else 0.0


def _capacity(model, d: Deployment, workload: Workload, slo: SLO, engine: Engine, series: DemandSeries, base):
    """Per-period SLO capacity of one instance: constant, or on a 3 x 3 grid of input/output length
    scales (geometric, spanning the file's per-period means) interpolated bilinearly in log scale;
    ``base``: the workload's length statistics."""
    i, o, p = workload.joint_support()
    scv = workload.arrival.scv
    if series.mean_input is None and series.mean_output is None:
        return np.full(len(series), d.max_rate_per_instance), _layout_curve(model, d, engine, base, scv)
    si = (series.mean_input / base.mean_input) if series.mean_input is not None else np.ones(len(series))
    so = (series.mean_output / base.mean_output) if series.mean_output is not None else np.ones(len(series))
    gi = np.geomspace(si.min(), si.max() * (1 + 1e-9), 3)
    go = np.geomspace(so.min(), so.max() * (1 + 1e-9), 3)
    cap = np.array([[_max_ok(_layout_curve(model, d, engine, length_stats_of(
        np.maximum(np.round(i * a), 1), np.maximum(np.round(o * b), 1), p, workload.prefix_hit), scv), slo)
        for b in go] for a in gi])
    if (cap <= 0).any():
        raise InfeasibleError(f"{d.hardware} cannot meet the SLOs at some of the demand file's mean lengths")
    out = np.empty(len(series))
    for k, (x, y) in enumerate(zip(np.log(si), np.log(so), strict=True)):
        ai = np.clip(np.searchsorted(np.log(gi), x) - 1, 0, 1)
        bi = np.clip(np.searchsorted(np.log(go), y) - 1, 0, 1)
        fx = (x - np.log(gi[ai])) / (np.log(gi[ai + 1]) - np.log(gi[ai]) or 1.0)
        fy = (y - np.log(go[bi])) / (np.log(go[bi + 1]) - np.log(go[bi]) or 1.0)
        c = cap[ai:ai + 2, bi:bi + 2]
        out[k] = (c[0, 0] * (1 - fx) * (1 - fy) + c[1, 0] * fx * (1 - fy) + c[0, 1] * (1 - fx) * fy
                  + c[1, 1] * fx * fy)
    return out, _layout_curve(model, d, engine, base, scv)


def _candidate(model, d: Deployment, series: DemandSeries, workload, slo, engine, base) -> Pool:
    """The pool of deployment ``d`` (chosen at the peak rate) over every period."""
    hw_name = d.hardware
    cap, curve = _capacity(model, d, workload, slo, engine, series, base)
    need = np.where(series.rate > 0, np.ceil(series.rate / cap * (1 - 1e-9)), 0).astype(np.int64)
    stable = np.isfinite(curve.rate) & (curve.rho < 1)
    batch_cap = float(np.where(stable, curve.rate, 0).max())
    per_instance = np.where(need > 0, series.rate / np.maximum(need, 1), 0.0)
    power = at_rates(curve, curve.power_w, np.minimum(per_instance, d.max_rate_per_instance))
    idle = get_hardware(hw_name).power.idle.value
    power = np.where(need > 0, np.nan_to_num(power, nan=idle), idle)
    weights = parameter_counts(model)[0] * DType(d.weight_dtype).bytes
    return Pool(name=d.hardware, hardware=d.hardware, label=_describe(d), devices=d.accelerators // d.instances,
                need=need, capacity=cap, power_w=power, batch_capacity=batch_cap, weight_bytes=float(weights),
                load=series.rate)


def _on_demand_usd(spec: HorizonSpec, hw_name: str, cost: CostModel) -> float:
    """$/GPU-hour on demand: the option's own price, else the scenario's rental price for ``hw``."""
    hw = get_hardware(hw_name)
    rent = cost.usd_per_h.get(hw.name) if cost.mode.value == "rent" else None
    return gpu_hour_price(hw, spec.purchase.on_demand, default_usd=rent)


def _starts(every_months: float | None, end_h: float) -> list[float]:
    """Purchase times of a commitment: hour 0, and every ``every_months`` before the horizon ends."""
    if every_months is None:
        return [0.0]
    return list(np.arange(0.0, end_h, every_months * HOURS_PER_MONTH))


def _problem(spec: HorizonSpec, c: Pool, series: DemandSeries, cost: CostModel) -> PurchaseProblem:
    hw = get_hardware(c.hardware)
    dev = c.devices
    pur = spec.purchase
    od = _on_demand_usd(spec, hw.name, cost)
    end = float(series.start_h[-1] + series.duration_h[-1])
    reserved = [Reserved(r.name if start == 0 else f"{r.name}@month{start / HOURS_PER_MONTH + 1:g}",
                         dev * gpu_hour_price(hw, r, od), r.term_months * HOURS_PER_MONTH, r.min_instances,
                         r.pays_energy, start)
                for r in pur.reserved for start in _starts(r.buy_every_months, end)]
    spot = None
    if pur.spot is not None:
        s = pur.spot
        restart_h = (spec.autoscale.delay_s(c.weight_bytes) if spec.autoscale else 0.0) / 3600
        spot = Spot(dev * gpu_hour_price(hw, s, od), s.availability, s.preemptions_per_h, restart_h, s.max_share,
                    s.pays_energy)
    energy = None
    if spec.energy is not None:
        e = spec.energy
        energy = dev * c.power_w * e.pue / 1000 * e.usd_per_kwh_at(series.start_h + series.clock_h0)
    window = work = None
    if spec.batch is not None and c.batch_capacity > 0:
        b = spec.batch
        window = (series.start_h // b.window_h).astype(int)
        per_window = b.requests_per_day * b.window_h / 24
        work = np.full(int(window.max()) + 1, per_window / (c.batch_capacity * 3600))
    return PurchaseProblem(need=c.need, hours=series.duration_h, start_h=series.start_h,
                           on_demand_usd_per_instance_h=dev * od, reserved=reserved, spot=spot,
                           energy_usd_per_instance_h=energy, on_demand_pays_energy=pur.on_demand.pays_energy,
                           batch_window=window, batch_instance_h=work, max_instances=spec.max_instances)


_COST_KEYS = ("usd_reserved", "usd_on_demand", "usd_spot", "usd_energy")


def _totals(plans: list[PurchasePlan]) -> dict[str, float]:
    t = {k: float(sum(x.sum() for p in plans for x in [getattr(p, "cost_" + k)]))
         for k in ("reserved", "on_demand", "spot", "energy")}
    return t | {"total": float(sum(t.values()))}


def _reserved(pools: list[Pool], plans: list[PurchasePlan]) -> dict[str, int]:
    if len(pools) == 1:
        return dict(plans[0].reserved)
    return {f"{pool.name} {k}": n for pool, p in zip(pools, plans, strict=True) for k, n in p.reserved.items()}


def _candidates(model, spec, workload, slo, engine, cost, search, series) -> tuple[list, list[str]]:
    """(pools, plans) per candidate: one pool per hardware (colocated), or one fleet of pools."""
    if spec.inner != "colocated":
        from planner.designs.horizon_inner import fleet_pools, splitwise_pools

        if spec.batch is not None:
            raise InputError(f"design.batch needs inner: colocated ({spec.inner} pools carry no batch work yet)")
        if spec.inner == "fleet":
            pools = fleet_pools(model, spec.fleet, workload, slo, engine, cost, search, series)
        else:
            pools = splitwise_pools(model, spec.splitwise, workload, slo, engine, cost, series)
        return [(pools, [solve_purchase(_problem(spec, p, series, cost)) for p in pools])], []
    peak = float(series.rate.max())
    every = plan_colocated(model, workload.with_rate(peak), slo, engine, cost, search.hardware, search.tp, search.ep,
                           search.pp, search.weight_dtype, search.kv_dtype, search.max_instances)
    best = {}
    for d in every:                      # cheapest first: the first of each hardware is its pick
        best.setdefault(d.hardware, d)
    base = length_stats(workload)
    results, errors = [], []
    names = [get_hardware(h).name for h in search.hardware]
    errors = [f"{h}: no layout meets the SLOs at the peak rate" for h in names if h not in best]
    for d in best.values():
        try:
            pool = _candidate(model, d, series, workload, slo, engine, base)
            results.append(([pool], [solve_purchase(_problem(spec, pool, series, cost))]))
        except InfeasibleError as e:
            errors.append(f"{d.hardware}: {e}")
    return results, errors


def plan_horizon(model: ModelSpec, spec: HorizonSpec, workload: Workload, slo: SLO, engine: Engine, cost: CostModel,
                 search, name: str) -> HorizonResult:
    """Cheapest hardware and purchase mix over the workload's demand curve (module docstring)."""
    if workload.demand is None:
        raise InputError("the horizon design needs workload.demand (a CSV or a parametric profile)")
    series = workload.demand.series()
    if not (series.rate > 0).any():
        raise InputError("workload.demand has no period with a positive rate")
    results, errors = _candidates(model, spec, workload, slo, engine, cost, search, series)
    if not results:
        raise InfeasibleError("no candidate hardware serves the demand: " + "; ".join(errors))
    pools, plans = min(results, key=lambda x: _totals(x[1])["total"])
    return _result(model, spec, workload, cost, series, pools, plans, results, name, errors)


def _periods(series: DemandSeries, pools: list[Pool], plans: list[PurchasePlan]) -> dict[str, np.ndarray]:
    """The per-period table, summed over pools (instances and dollars)."""
    def total(f):
        return sum(f(pool, p) for pool, p in zip(pools, plans, strict=True))

    out = {"start_h": series.start_h, "hours": series.duration_h, "rate": series.rate,
           "need": total(lambda c, p: c.need), "reserved_used": total(lambda c, p: p.used_reserved),
           "on_demand": total(lambda c, p: p.on_demand), "spot": total(lambda c, p: p.spot),
           "batch_instances": total(lambda c, p: p.batch)}
    for k in _COST_KEYS:
        out[k] = total(lambda c, p, k=k: getattr(p, "cost_" + k[4:]))
    if len(pools) > 1:
        out |= {f"need_{c.name}": c.need for c in pools}
    return out


def _monthly(series: DemandSeries, periods: dict[str, np.ndarray]) -> list[dict]:
    month = (series.start_h // HOURS_PER_MONTH).astype(int)
    rows = []
    for m in np.unique(month):
        sel = month == m
        row = {"month": int(m) + 1, "peak_rate": float(series.rate[sel].max()),
               "peak_need": int(periods["need"][sel].max())}
        row |= {k: float(np.asarray(periods[k])[sel].sum()) for k in _COST_KEYS}
        rows.append(row | {"usd_total": sum(row[k] for k in _COST_KEYS)})
    return rows


def _result(model, spec, workload, cost, series, pools, plans, results, name, errors) -> HorizonResult:
    periods = _periods(series, pools, plans)
    candidates = [{"hardware": " + ".join(c.hardware for c in ps), "deployment": " + ".join(c.label for c in ps),
                   "capacity_per_instance": float(np.median(ps[0].capacity)) if len(ps) == 1 else 0.0,
                   "peak_instances": int(sum(c.need for c in ps).max()), "reserved": _reserved(ps, pl),
                   **{f"usd_{k}": v for k, v in _totals(pl).items()}} for ps, pl in results]
    notes = [f"{e} (skipped)" for e in errors]
    batch = _batch_summary(spec, series, pools[0], plans[0]) if spec.batch is not None else None
    cmp_ = [_comparisons(c.need, p.batch, series.duration_h, c.devices * _on_demand_usd(spec, c.hardware, cost))
            for c, p in zip(pools, plans, strict=True)]
    auto, auto_pools = None, {}
    if spec.autoscale is not None:
        replays = {c.name: _autoscale(spec, workload, series, c, p) for c, p in zip(pools, plans, strict=True)}
        if len(pools) == 1:
            auto = next(iter(replays.values()))
        else:                            # each pool scales on its own share of the traffic
            auto_pools = replays
    return HorizonResult(
        scenario=name, model=model.name, hardware=" + ".join(c.hardware for c in pools),
        deployment=" + ".join(c.label for c in pools), devices_per_instance=max(c.devices for c in pools),
        capacity_per_instance=candidates[0]["capacity_per_instance"] if len(pools) == 1 else 0.0,
        hours=float(series.duration_h.sum()), peak_rate=float(series.rate.max()), reserved=_reserved(pools, plans),
        totals=_totals(plans), comparisons={k: sum(c[k] for c in cmp_) for k in cmp_[0]},
        committed_beyond_horizon_usd=sum(p.committed_beyond_horizon_usd for p in plans), candidates=candidates,
        periods={k: np.asarray(v, dtype=float).tolist() for k, v in periods.items()},
        monthly=_monthly(series, periods), batch=batch, autoscale=auto, autoscale_pools=auto_pools, notes=notes)


def _batch_summary(spec: HorizonSpec, series: DemandSeries, c: Pool, plan: PurchasePlan) -> dict:
    spare = np.maximum(plan.used_reserved - c.need, 0)
    on_res = np.minimum(plan.batch, spare)
    work = float((plan.batch * series.duration_h).sum())
    return {"requests_per_day": spec.batch.requests_per_day, "capacity_per_instance": c.batch_capacity,
            "instance_hours": work, "on_reserved_share": float((on_res * series.duration_h).sum() / max(work, 1e-12))}


def _comparisons(need: np.ndarray, batch: np.ndarray, hours: np.ndarray, od: float) -> dict[str, float]:
    """Baselines, all on demand: a fleet sized for the peak all the time (batch work in its idle
    hours, more if they do not suffice), and a fleet following the hourly need (batch billed by the
    second)."""
    work = float((need * hours).sum() + (batch * hours).sum())
    return {"static_peak_on_demand": max(float(need.max() * hours.sum()), work) * od,
            "follow_demand_on_demand": work * od}


def _describe(d: Deployment) -> str:
    ep = f" ep{d.ep}" if d.ep > 1 else ""
    pp = f" pp{d.pp}" if d.pp > 1 else ""
    return f"{d.hardware} tp{d.tp}{ep}{pp} {d.weight_dtype}"


def _autoscale(spec: HorizonSpec, workload: Workload, series: DemandSeries, c: Pool, plan: PurchasePlan) -> dict:
    a = spec.autoscale
    assert a is not None
    trace = workload.demand.burst_trace if workload.demand is not None else None
    factors = minute_factors(trace) if trace else np.ones(1)
    ref = float(np.median(c.capacity))
    load = c.load * ref / np.where(c.capacity > 0, c.capacity, ref)   # in requests of the reference mix
    sd = step_demand(load, series.duration_h, factors, a.step_s, a.seed)
    delay = a.delay_s(c.weight_bytes)
    reserved = sum(plan.reserved.values())
    run = simulate(sd, ref, a, delay, floor=reserved, periods=len(series))
    floor = safe_floor(sd, ref, a, delay, len(series))
    step_h = sd.step_s / 3600
    return {"scale_up_delay_s": delay, "weight_bytes": c.weight_bytes, "step_s": sd.step_s,
            "floor_used": reserved, "hourly_attainment": run.hourly_attainment.tolist(),
            "hours_meeting_target": int((run.hourly_attainment >= a.hourly_target - 1e-12).sum()),
            "periods": len(series), "min_hourly_attainment": float(run.hourly_attainment.min()),
            "gpu_hours_paid": float(run.paid.sum() * c.devices * step_h),
            "gpu_hours_over_provisioned": float(np.maximum(run.paid - run.needed, 0).sum() * c.devices * step_h),
            "safe_floor": floor, "within_hour_cv": float(factors.std()),
            "safe_target_utilization": safe_target_utilization(sd, ref, a, delay, len(series), reserved)}
