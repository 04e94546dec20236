"""Heterogeneous fleet (Melange, Griggs et al. 2024, and beyond): given hardware types with prices
and availability limits and a workload mix split into request-length buckets, choose how many
instances of each type to run and how to route each bucket, at minimum cost, with every bucket
served within the SLOs.

Per (hardware, bucket) the colocated steady-state model gives the largest per-instance rate that
meets the SLOs, ``cap[h, b]``, at the hardware's cheapest-per-request layout. Then a mixed-integer
program (``scipy.optimize.milp``):

    minimize    sum_h  price_h x_h                       (x_h instances of type h, integer)
    subject to  sum_h  y_hb = 1                         (every bucket fully routed, y_hb in [0, 1])
                sum_b  lambda_b y_hb / cap_hb <= x_h     (instances carry their share)
                x_h <= available_h

Melange's inputs (Griggs et al., "Melange: Cost Efficient LLM Serving by Exploiting GPU
Heterogeneity", arXiv 2404.14527): the request-size distribution may be a blend of datasets
(``mix``: share x independent input/output length distributions, e.g. 80% Arena + 20% PubMed) and
is cut into a 2-D grid of input x output size buckets (``input_edges``/``output_edges``), as
Melange's workload_distribution matrix; ``rate_sweep`` solves the MILP at several total rates
(the per-instance capacities do not depend on the rate) and reports the saving of the mix over
the cheapest single type at each, Melange's "cost reduction vs single GPU type" curves.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.dtypes import DType
from planner.catalog.hardware import hardware as get_hardware
from planner.catalog.model import ModelSpec
from planner.errors import InfeasibleError
from planner.frozen import Frozen
from planner.perf.cost import CostModel
from planner.search import candidates
from planner.serving.batching import Engine
from planner.serving.queueing import serving_curve, slo_ok
from planner.serving.slo import SLO
from planner.serving.workload import Length, LengthStats, Workload, length_stats_of


class MixPart(Frozen):
    """One dataset of a blended request mix: its share of requests and its length distributions."""

    share: float = Field(gt=0, description="fraction of requests (the parts' shares are normalised)")
    input: Length
    output: Length


class FleetSpec(Frozen):
    type: Literal["fleet"] = "fleet"
    buckets: int = Field(4, ge=1, le=32, description="request-length buckets (quantiles of input length)")
    available: dict[str, int] = Field({}, description="most instances of each hardware (default: unlimited)")
    mix: list[MixPart] = Field([], description="request sizes as a blend of datasets (replaces the workload's "
                               "lengths; the workload still gives the rate)")
    input_edges: list[float] = Field([], description="Melange-style size buckets: input-length edges (tokens)")
    output_edges: list[float] = Field([], description="output-length edges; with input_edges, a 2-D grid")
    rate_sweep: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        [], max_length=1000, description="total request rates (req/s) to re-solve at")


class SweepPoint(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    rate: float
    usd_per_h: float
    instances: dict[str, int]
    best_single: str
    best_single_usd_per_h: float
    saving_vs_best_single: float
    saving_vs_worst_single: float        # against the dearest single type that can serve the mix
    single_usd_per_h: dict[str, float] = {}


class FleetResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: Literal["fleet"] = "fleet"
    model: str
    buckets: list[dict]                  # input range, rate, mean lengths
    instances: dict[str, int]            # per hardware (with its layout)
    layouts: dict[str, str]
    engines: dict[str, str] = {}         # per hardware: the framework entry it runs (engine.framework or the default)
    routing: dict[str, list[float]]      # hardware -> share of each bucket
    usd_per_h: float
    capacity: dict[str, list[float]]     # per-instance SLO-meeting rate for each bucket, req/s
    instance_usd_per_h: dict[str, float]
    best_single: dict[str, float]        # $/h of serving everything on one hardware type (within availability)
    saving_vs_best_single: float
    certainty: dict | None = None      # sizes at P50 and at the scenario's confidence (planner.confidence)
    sweep: list[SweepPoint] = []         # the same at each rate of rate_sweep
    max_saving: float | None = None      # largest saving over the best single type across the sweep
    saving_range: list[float] = []       # [least saving vs the best single type, most vs the worst] over
                                         # the sweep: the span Melange's "x-y% vs single-GPU strategies" quotes


def _support(workload: Workload, spec: FleetSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input, output, probability) of the request mix: the blend of ``mix`` or the workload's."""
    if not spec.mix:
        return workload.joint_support()
    total = sum(p.share for p in spec.mix)
    parts = []
    for p in spec.mix:
        iv, ip = p.input.support()
        ov, op = p.output.support()
        parts.append((np.repeat(iv, len(ov)), np.tile(ov, len(iv)), np.outer(ip, op).ravel() * p.share / total))
    return tuple(np.concatenate(c) for c in zip(*parts, strict=True))


def _cells(i: np.ndarray, o: np.ndarray, w: np.ndarray, spec: FleetSpec) -> list[np.ndarray]:
    """Index sets of the buckets: the 2-D size grid if edges are given, else input quantiles."""
    if spec.input_edges or spec.output_edges:
        ci = np.digitize(i, np.sort(spec.input_edges))
        co = np.digitize(o, np.sort(spec.output_edges))
        key = ci * (len(spec.output_edges) + 1) + co
        return [np.flatnonzero(key == k) for k in np.unique(key)]
    order = np.argsort(i, kind="stable")
    edges = np.searchsorted(np.cumsum(w[order]), np.linspace(0, 1, spec.buckets + 1)[1:-1])
    return [order[part] for part in np.split(np.arange(len(i)), edges)]


def _buckets(workload: Workload, spec: FleetSpec) -> list[tuple[LengthStats, float, dict]]:
    """Split the request mix into buckets (equal-probability input quantiles, or the size grid)."""
    i, o, w = _support(workload, spec)
    w = w / w.sum()
    out = []
    for part in _cells(i, o, w, spec):
        if part.size == 0 or w[part].sum() <= 0:
            continue
        share = float(w[part].sum())
        out.append((length_stats_of(i[part], o[part], w[part], workload.prefix_hit), share,
                    {"input_min": float(i[part].min()), "input_max": float(i[part].max()),
                     "output_min": float(o[part].min()), "output_max": float(o[part].max()),
                     "mean_input": float(w[part] @ i[part] / share), "mean_output": float(w[part] @ o[part] / share)}))
    return out


def plan_fleet(model: ModelSpec, spec: FleetSpec, workload: Workload, slo: SLO, engine: Engine, cost: CostModel,
               hardware: list[str], tp: list[int], ep: list[int], pp: list[int], weight_dtypes: list[DType],
               kv_dtype: DType | None, name: str, max_instances: int = 100_000) -> FleetResult:
    """The cheapest mix of hardware types serving every request bucket within the SLOs; each type
    runs at most its ``spec.available`` instances and at most ``max_instances`` (search.max_instances,
    as a colocated plan's deployment does)."""
    buckets = _buckets(workload, spec)
    lam = workload.request_rate * np.array([s for _, s, _ in buckets])
    H, B = len(hardware), len(buckets)
    cap = np.zeros((H, B))           # best per-instance SLO rate, per (hardware, bucket)
    price = np.full(H, np.inf)
    chosen = {}
    best_cost = np.full(H, np.inf)
    row = {get_hardware(n).name: i for i, n in enumerate(hardware)}
    engines = {}
    for hw, lay, dtypes in candidates(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype, engine.framework,
                                      engine.memory_fraction, engine.kv_pool_tokens):
        h = row[hw.name]
        engines[hw.name] = hw.framework
        rates = np.zeros((lay.tp.size, B))
        for b, (stats, _, _) in enumerate(buckets):
            c = serving_curve(model, hw, lay, dtypes, engine, stats, workload.arrival.scv)
            rates[:, b] = np.where(slo_ok(c, slo), c.rate, 0.0).max(axis=1)
        per_instance = lay.devices * cost.usd_per_device_hour(hw, hw.power.tdp.value)
        # the layout serving the most buckets, then the cheapest per request over those buckets
        served = (rates > 0).sum(1)
        load = np.where(rates > 0, lam / np.maximum(rates, 1e-12), 0.0).sum(1)
        score = np.where(served > 0, per_instance * load, np.inf) + (B - served) * 1e12
        k = int(np.argmin(score))
        if score[k] < best_cost[h]:                  # stays unusable if no layout serves any bucket
            best_cost[h] = score[k]
            cap[h], price[h] = rates[k], per_instance[k]
            ep_text = f" ep{lay.ep[k]}" if lay.ep[k] > 1 else ""
            chosen[hw.name] = f"tp{lay.tp[k]}{ep_text} {dtypes.weight.value}"
    usable = np.isfinite(price) & (cap.max(axis=1) > 0)
    if not usable.any():
        raise InfeasibleError("no hardware type meets the SLOs for any request bucket")
    available = {hw: min(spec.available.get(hw, max_instances), max_instances) for hw in hardware}
    x, y = _solve(lam, cap, price, usable, hardware, available)
    single = _singles(lam, cap, price, usable, hardware, available)
    best_single = min(single.values()) if single else float("nan")
    total = float(price[usable] @ x[usable])
    sweep = [_sweep_point(r, lam / workload.request_rate, cap, price, usable, hardware, available)
             for r in spec.rate_sweep]
    savings = [p.saving_vs_best_single for p in sweep if np.isfinite(p.saving_vs_best_single)]
    worst = [p.saving_vs_worst_single for p in sweep if np.isfinite(p.saving_vs_worst_single)]
    return FleetResult(
        scenario=name, model=model.name,
        buckets=[{**info, "rate": float(r)} for (_, _, info), r in zip(buckets, lam, strict=True)],
        instances={hw: int(x[h]) for h, hw in enumerate(hardware) if x[h] > 0},
        layouts={hw: chosen.get(get_hardware(hw).name, "-") for h, hw in enumerate(hardware) if x[h] > 0},
        engines={hw: engines[get_hardware(hw).name] for h, hw in enumerate(hardware) if x[h] > 0},
        # the solver returns shares like -1e-12; clip, and + 0.0 turns -0.0 into 0.0
        routing={hw: [round(max(float(v), 0.0), 4) + 0.0 for v in y[h]] for h, hw in enumerate(hardware) if x[h] > 0},
        usd_per_h=total, best_single=single,
        capacity={hw: cap[h].tolist() for h, hw in enumerate(hardware) if usable[h]},
        instance_usd_per_h={hw: float(price[h]) for h, hw in enumerate(hardware) if usable[h]},
        saving_vs_best_single=_saving(total, best_single),
        sweep=sweep, max_saving=max(savings) if savings else None,
        saving_range=[min(savings), max(worst)] if savings else [])


def _solve(lam, cap, price, usable, hardware, available) -> tuple[np.ndarray, np.ndarray]:
    """The MILP: integer instances ``x`` (H,) and routing shares ``y`` (H, B) at least cost."""
    from scipy.optimize import Bounds, LinearConstraint

    from planner.designs.milp import milp

    H, B = cap.shape
    nv = H + H * B                   # variables: x_h (H), y_hb (H*B)
    c_obj = np.concatenate([np.where(usable, price, 0.0), np.zeros(H * B)])
    A_route = np.zeros((B, nv))
    for b in range(B):
        A_route[b, H + np.arange(H) * B + b] = 1.0
    A_cap = np.zeros((H, nv))
    for h in range(H):
        A_cap[h, h] = -1.0
        for b in range(B):
            A_cap[h, H + h * B + b] = lam[b] / cap[h, b] if cap[h, b] > 0 else 0.0
    upper = np.full(nv, np.inf)
    upper[H:] = 1.0
    for h, hw_name in enumerate(hardware):
        if not usable[h]:
            upper[h] = 0.0
            upper[H + h * B:H + (h + 1) * B] = 0.0
        elif hw_name in available:
            upper[h] = available[hw_name]
        for b in range(B):
            if cap[h, b] <= 0:
                upper[H + h * B + b] = 0.0
    # a type that takes any share of a bucket runs at least one instance (y_hb <= x_h): implied by the
    # capacity rows in exact arithmetic, but a demand below the solver's feasibility tolerance (1e-6
    # of an instance) would otherwise be served by none
    A_link = np.zeros((H * B, nv))
    for h in range(H):
        A_link[h * B:(h + 1) * B, h] = -1.0
        A_link[h * B:(h + 1) * B, H + h * B:H + (h + 1) * B] = np.eye(B)
    res = milp(c_obj, integrality=np.concatenate([np.ones(H), np.zeros(H * B)]),
               bounds=Bounds(np.zeros(nv), upper),
               constraints=[LinearConstraint(A_route, 1.0, 1.0), LinearConstraint(A_cap, -np.inf, 0.0),
                            LinearConstraint(A_link, -np.inf, 0.0)])
    if not res.success:
        raise InfeasibleError("no fleet within the availability limits (design.available, search.max_instances) "
                              "serves every bucket within the SLOs; raise them or lower the rate")
    return np.round(res.x[:H]).astype(int), res.x[H:].reshape(H, B)


def _singles(lam, cap, price, usable, hardware, available) -> dict[str, float]:
    """$/h of every bucket on one hardware type, within its availability."""
    single = {}
    for h, hw_name in enumerate(hardware):
        if usable[h] and np.all(cap[h] > 0):
            need = max(np.ceil(np.sum(lam / cap[h]) - 1e-9), 1.0)   # any demand takes one instance
            if need <= available.get(hw_name, np.inf):
                single[hw_name] = float(price[h] * need)
    return single


def _sweep_point(rate, shares, cap, price, usable, hardware, available) -> SweepPoint:
    lam = rate * shares
    x, _ = _solve(lam, cap, price, usable, hardware, available)
    total = float(price[usable] @ x[usable])
    single = _singles(lam, cap, price, usable, hardware, available)
    name = min(single, key=single.get) if single else "-"
    best = single.get(name, float("nan"))
    worst = max(single.values()) if single else float("nan")
    return SweepPoint(rate=rate, usd_per_h=total, instances={hw: int(x[h]) for h, hw in enumerate(hardware) if x[h]},
                      best_single=name, best_single_usd_per_h=best,
                      saving_vs_best_single=_saving(total, best), saving_vs_worst_single=_saving(total, worst),
                      single_usd_per_h=single)


def _saving(total: float, single: float) -> float:
    """1 - fleet / single-type cost; NaN where no single type serves the mix (or it costs nothing:
    a demand so small that no instance is needed)."""
    return 1 - total / single if single > 0 else float("nan")
