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
"""

from __future__ import annotations

from typing import Literal

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
from planner.serving.workload import LengthStats, Workload, length_stats_of


class FleetSpec(Frozen):
    type: Literal["fleet"] = "fleet"
    buckets: int = Field(4, ge=1, le=32, description="request-length buckets (quantiles of input length)")
    available: dict[str, int] = Field({}, description="most instances of each hardware (default: unlimited)")


class FleetResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: Literal["fleet"] = "fleet"
    model: str
    buckets: list[dict]                  # input range, rate, mean lengths
    instances: dict[str, int]            # per hardware (with its layout)
    layouts: dict[str, str]
    routing: dict[str, list[float]]      # hardware -> share of each bucket
    usd_per_h: float
    capacity: dict[str, list[float]]     # per-instance SLO-meeting rate for each bucket, req/s
    instance_usd_per_h: dict[str, float]
    best_single: dict[str, float]        # $/h of serving everything on one hardware type (within availability)
    saving_vs_best_single: float
    certainty: dict | None = None      # sizes at P50 and at the scenario's confidence (planner.confidence)


def _buckets(workload: Workload, k: int) -> list[tuple[LengthStats, float, dict]]:
    """Split the request mix by input length into ``k`` equal-probability buckets."""
    i, o, w = workload.joint_support()
    order = np.argsort(i, kind="stable")
    i, o, w = i[order], o[order], w[order] / w.sum()
    edges = np.searchsorted(np.cumsum(w), np.linspace(0, 1, k + 1)[1:-1])
    out = []
    for part in np.split(np.arange(len(i)), edges):
        if part.size == 0:
            continue
        share = float(w[part].sum())
        out.append((length_stats_of(i[part], o[part], w[part], workload.prefix_hit), share,
                    {"input_min": float(i[part].min()), "input_max": float(i[part].max()),
                     "mean_input": float(w[part] @ i[part] / share), "mean_output": float(w[part] @ o[part] / share)}))
    return out


def plan_fleet(model: ModelSpec, spec: FleetSpec, workload: Workload, slo: SLO, engine: Engine, cost: CostModel,
               hardware: list[str], tp: list[int], ep: list[int], pp: list[int], weight_dtypes: list[DType],
               kv_dtype: DType | None, name: str) -> FleetResult:
    from scipy.optimize import Bounds, LinearConstraint, milp

    buckets = _buckets(workload, spec.buckets)
    lam = workload.request_rate * np.array([s for _, s, _ in buckets])
    H, B = len(hardware), len(buckets)
    cap = np.zeros((H, B))           # best per-instance SLO rate, per (hardware, bucket)
    price = np.full(H, np.inf)
    chosen = {}
    best_cost = np.full(H, np.inf)
    row = {get_hardware(n).name: i for i, n in enumerate(hardware)}
    for hw, lay, dtypes in candidates(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype, engine.framework):
        h = row[hw.name]
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
    # variables: x_h (H), y_hb (H*B)
    nv = H + H * B
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
        elif hw_name in spec.available:
            upper[h] = spec.available[hw_name]
        for b in range(B):
            if cap[h, b] <= 0:
                upper[H + h * B + b] = 0.0
    res = milp(c_obj, integrality=np.concatenate([np.ones(H), np.zeros(H * B)]),
               bounds=Bounds(np.zeros(nv), upper),
               constraints=[LinearConstraint(A_route, 1.0, 1.0), LinearConstraint(A_cap, -np.inf, 0.0)])
    if not res.success:
        raise InfeasibleError(f"no fleet within the availability limits serves every bucket within the SLOs "
                              f"({res.message})")
    x = np.round(res.x[:H]).astype(int)
    y = res.x[H:].reshape(H, B)
    single = {}   # every bucket on one hardware type, within its availability
    for h, hw_name in enumerate(hardware):
        if usable[h] and np.all(cap[h] > 0):
            need = np.ceil(np.sum(lam / cap[h]) - 1e-9)
            if need <= spec.available.get(hw_name, np.inf):
                single[hw_name] = float(price[h] * need)
    best_single = min(single.values()) if single else float("nan")
    total = float(price[usable] @ x[usable])
    return FleetResult(
        scenario=name, model=model.name,
        buckets=[{**info, "rate": float(r)} for (_, _, info), r in zip(buckets, lam, strict=True)],
        instances={hw: int(x[h]) for h, hw in enumerate(hardware) if x[h] > 0},
        layouts={hw: chosen.get(get_hardware(hw).name, "-") for h, hw in enumerate(hardware) if x[h] > 0},
        # the solver returns shares like -1e-12; clip, and + 0.0 turns -0.0 into 0.0
        routing={hw: [round(max(float(v), 0.0), 4) + 0.0 for v in y[h]] for h, hw in enumerate(hardware) if x[h] > 0},
        usd_per_h=total, best_single=single,
        capacity={hw: cap[h].tolist() for h, hw in enumerate(hardware) if usable[h]},
        instance_usd_per_h={hw: float(price[h]) for h, hw in enumerate(hardware) if usable[h]},
        saving_vs_best_single=1 - total / best_single if single else float("nan"))
