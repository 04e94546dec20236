"""Fleet and Splitwise pools for the horizon design. Fleet: the heterogeneous fleet MILP solved once per point of a
geometric grid of rates, then scaled to every period.

At a grid rate ``g`` the fleet design gives instances ``x_h(g)`` of each hardware and a routing of
every length bucket; capacity is linear in instances at fixed routing, so a period at rate
``r <= g`` is served by ``ceil(x_h(g) r / g)`` instances of each type (``g`` = the smallest grid
rate at or above ``r``). With 16 grid points the grid spacing costs at most the rounding up; the
serving model is never re-run per period. Device power per instance is interpolated linearly
between idle and TDP by the instance's share of work (the fleet design keeps no load curve).
"""

from __future__ import annotations

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.hardware import hardware as get_hardware
from planner.designs.fleet import plan_fleet
from planner.designs.horizon_pool import Pool
from planner.perf.params import parameter_counts
from planner.serving.demand import DemandSeries

GRID = 16


def fleet_pools(model, fleet_spec, workload, slo, engine, cost, search, series: DemandSeries) -> list[Pool]:
    rate = series.rate
    positive = rate[rate > 0]
    grid = np.unique(np.geomspace(positive.min(), positive.max(), GRID))
    plans = [plan_fleet(model, fleet_spec, workload.with_rate(float(g)), slo, engine, cost, search.hardware, search.tp,
                        search.ep, search.pp, search.weight_dtype, search.kv_dtype, "grid", search.max_instances)
             for g in grid]
    used = [h for h in search.hardware if any(p.instances.get(h, 0) for p in plans)]
    k = np.clip(np.searchsorted(grid, rate * (1 - 1e-12)), 0, len(grid) - 1)   # smallest grid rate >= r
    scale = np.where(rate > 0, rate / grid[k], 0.0)
    params = parameter_counts(model)[0]
    pools = []
    for h in used:
        hw = get_hardware(h)
        x = np.array([p.instances.get(h, 0) for p in plans], dtype=float)
        routed = np.array([sum(s * b["rate"] for s, b in zip(p.routing.get(h, []), p.buckets, strict=False))
                           for p in plans])
        exact = x[k] * scale
        need = np.where(exact > 0, np.maximum(np.ceil(exact * (1 - 1e-9)), 1), 0).astype(np.int64)
        per_instance = np.where(x > 0, routed / np.maximum(x, 1), 0.0)[k]
        layout = next(p.layouts[h] for p in plans if h in p.layouts)
        price = next(p.instance_usd_per_h[h] for p in plans if h in p.instance_usd_per_h)
        devices = int(round(price / cost.usd_per_device_hour(hw, hw.power.tdp.value)))
        load = np.where(need > 0, exact / np.maximum(need, 1), 0.0)
        idle, tdp = hw.power.idle.value, hw.power.tdp.value
        pools.append(Pool(name=h, hardware=h, label=f"{h} {layout}", devices=devices, need=need, capacity=per_instance,
                          power_w=idle + (tdp - idle) * load, batch_capacity=0.0,
                          weight_bytes=float(params * DType(layout.split()[-1]).bytes),
                          load=routed[k] * scale))
    return pools


def splitwise_pools(model, spec, workload, slo, engine, cost, series: DemandSeries) -> list[Pool]:
    """Splitwise (or colocated baseline) clusters listed in ``spec``, each evaluated once at its
    largest SLO-meeting rate ``R``; the cheapest per request/s is scaled to each period's rate
    pool by pool, ``ceil(count r / R)`` machines (the prompt/token ratio kept; queueing economies
    of scale at small counts are not re-evaluated). Device power: the cluster's average at ``R``."""
    from planner.designs.splitwise import plan_splitwise

    result = plan_splitwise(model, spec, workload, slo, engine, cost.usd_per_h, "grid")
    layouts = {b.name: {"": b.pool} for b in spec.baselines}
    layouts |= {d.name: {" prompt": d.prompt, " token": d.token} for d in spec.designs}
    rows = [r for r in result.rows if r.name in layouts and r.max_rate > 0]
    if not rows:
        from planner.errors import InfeasibleError

        raise InfeasibleError("no listed Splitwise design or baseline meets the SLOs at any rate")
    best = min(rows, key=lambda r: r.usd_per_h / r.max_rate)
    scale = series.rate / best.max_rate
    params = parameter_counts(model)[0]
    watts = best.avg_power_w / best.accelerators if np.isfinite(best.avg_power_w) else None
    pools = []
    for role, pool in layouts[best.name].items():
        hw = get_hardware(pool.hardware)
        exact = pool.count * scale
        need = np.where(exact > 0, np.maximum(np.ceil(exact * (1 - 1e-9)), 1), 0).astype(np.int64)
        pools.append(Pool(name=f"{hw.name}{role}", hardware=hw.name,
                          label=f"{best.name}{role}: {hw.name} {pool.label}",
                          devices=pool.devices, need=need, capacity=np.full(len(need), best.max_rate / pool.count),
                          power_w=np.full(len(need), watts if watts else hw.power.tdp.value * pool.power_cap),
                          batch_capacity=0.0, weight_bytes=float(params * spec.weight_dtype.bytes),
                          load=series.rate))
    return pools
