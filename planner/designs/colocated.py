"""Colocated design: one pool of identical instances, each serving prefill and decode with
continuous batching (optionally chunked prefill). Finds the cheapest deployment - hardware,
TP/EP/PP, dtype, instance count - whose analytic steady state meets the SLOs at the offered
rate, and says which constraint binds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import HardwareProfile
from planner.catalog.hardware import hardware as get_hardware
from planner.catalog.model import ModelSpec
from planner.errors import InfeasibleError
from planner.frozen import Frozen
from planner.perf.cost import CostModel
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.search import candidates
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


def evaluate_candidates(model: ModelSpec, hardware: list[str], tp: list[int], ep: list[int], pp: list[int],
                        weight_dtypes: list[DType], kv_dtype: DType | None, engine: Engine, stats: LengthStats,
                        arrival_scv: float, slo: SLO) -> list[_Evaluated]:
    out = []
    for hw, lay, dtypes in candidates(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype, engine.framework):
        curve = serving_curve(model, hw, lay, dtypes, engine, stats, arrival_scv)
        out.append(_Evaluated(hw, dtypes, lay, curve, slo_ok(curve, slo)))
    return out


def plan_colocated(model: ModelSpec, workload: Workload, slo: SLO, engine: Engine, cost: CostModel,
                   hardware: list[str], tp: list[int], ep: list[int], pp: list[int], weight_dtypes: list[DType],
                   kv_dtype: DType | None = None, max_instances: int = 100_000) -> list[Deployment]:
    """Every candidate that meets the SLOs at the workload's rate, cheapest first."""
    stats = length_stats(workload)
    rate = workload.request_rate
    evaluated = evaluate_candidates(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype, engine, stats,
                                    workload.arrival.scv, slo)
    deployments = []
    for ev in evaluated:
        c = ev.curve
        max_ok = np.where(ev.ok, c.rate, -np.inf).max(axis=1)
        for i in np.flatnonzero(max_ok > 0):
            k = int(np.ceil(rate / max_ok[i] * (1 - 1e-9)))
            if k > max_instances:
                continue
            deployments.append(_deployment(ev, i, k, rate, slo, cost, stats, model))
    if not deployments:
        raise InfeasibleError(_why_infeasible(model, evaluated, slo, rate, max_instances))
    return sorted(deployments, key=lambda d: (d.usd_per_h, d.accelerators))


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
    return Deployment(
        hardware=hw.name, tp=int(ev.lay.tp[i]), ep=int(ev.lay.ep[i]), pp=int(ev.lay.pp[i]),
        weight_dtype=ev.dtypes.weight.value, kv_dtype=ev.dtypes.kv.value, instances=k,
        accelerators=accelerators, rate_per_instance=r,
        max_rate_per_instance=float(np.where(ev.ok[i], c.rate[i], -np.inf).max()),
        decode_batch=n, max_num_seqs=int(np.ceil((n + 2.33 * np.sqrt(max(n, 1.0))) / ev.lay.attention_dp[i])) + 1,
        ttft_s=q["ttft"], tpot_s=q["tpot"], e2e_s=q["e2e"],
        slo_attainment=at(attainment(sub, slo)), prefill_utilization=at(sub.rho),
        usd_per_h=usd_h, usd_per_million_output_tokens=usd_h / HOUR_S / out_tps * 1e6,
        usd_per_million_tokens=usd_h / HOUR_S / tot_tps * 1e6, avg_power_w=avg_w,
        peak_power_w=accelerators * at(sub.peak_power_w), provisioned_power_w=accelerators * hw.power.tdp.value,
        output_tokens_per_s=out_tps, output_tokens_per_joule=out_tps / avg_w,
        binding=_binding(c, ev.ok, slo, i),
    )


def _why_infeasible(model: ModelSpec, evaluated: list[_Evaluated], slo: SLO, rate: float, max_instances: int) -> str:
    if not evaluated:
        return f"no valid layout of {model.name} on the candidate hardware (check tp/ep/pp lists and domain sizes)"
    fits = [ev for ev in evaluated if np.isfinite(ev.curve.n[:, 0]).any()]
    if not fits:
        return (f"{model.name} does not fit on any candidate (weights + KV of one sequence exceed device memory); "
                "add larger tp/pp degrees or fp8 weights")
    # the best each metric can do at the lightest load, over all candidates
    best = {}
    for metric in ("ttft", "tpot", "e2e"):
        for p in PERCENTILES:
            vals = [np.nanmin(getattr(ev.curve, metric)[p][:, 0]) for ev in fits]
            best[f"{metric}_s.{p}"] = min(vals)
    unmet = [f"{k} <= {bound:g} (best achievable {best[k]:.4g} s at light load)"
             for metric in ("ttft_s", "tpot_s", "e2e_s") for p, bound in getattr(slo, metric).items()
             for k in [f"{metric}.{p}"] if best[k] > bound]
    if unmet:
        return "SLO unreachable on every candidate: " + "; ".join(unmet) + ". Relax it or add faster hardware."
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
    hw = with_framework(get_hardware(d.hardware), engine.framework)
    dtypes = DTypes(weight=DType(d.weight_dtype), kv=DType(d.kv_dtype))
    lay = Layout.of(d.tp, d.ep, d.pp)
    arrival, inp, out = workload.sample(requests, seed)
    r = simulate(model, hw, lay, dtypes, engine, arrival, inp, out, instances=k, prefix_hit=workload.prefix_hit,
                 seed=seed)
    measured, att, bad = judge(slo, r.ttft_s, r.tpot_s, r.e2e_s, r.output_len)
    return SimCheck(instances=k, requests=requests, seed=seed, ttft_s=measured["ttft_s"], tpot_s=measured["tpot_s"],
                    e2e_s=measured["e2e_s"], slo_attainment=att, requests_per_s=r.requests_per_s,
                    preemptions=r.preemptions, meets_slo=not bad, violations=bad,
                    avg_power_w=r.energy_j / r.makespan_s if r.makespan_s > 0 else float("nan"))
