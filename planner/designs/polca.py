"""POLCA design (Patel et al., "Characterizing Power Management Opportunities for LLMs in the
Cloud", ASPLOS 2024 / arXiv 2308.12908): deploy more inference servers in a power-limited row than
its provisioned power allows at nameplate, and keep the row under budget by frequency-capping
servers when row power crosses thresholds.

Model:
* server power = host (non-GPU: CPUs, fans, switches) power + GPU power, the host drawing as much
  as the GPUs under load (POLCA: GPUs are ~50% of server power); GPU power at a request rate comes from the
  serving model (prefill iterations near TDP, decode much lower) and, under a clock cap ``f``,
  from the same model on the capped profile (busy power ~ f^3, compute-bound work 1/f slower,
  memory-bound decode barely slower: ``perf.power.apply_clock``);
* load over time: a diurnal curve with a trough, common to all servers (the row's load balancer
  spreads traffic), plus each second's prompt bursts per server (Poisson), aggregated over the
  row; the curve's amplitude is calibrated so that the row at nameplate provisioning peaks at the
  production trace's stated utilisation (POLCA: inference peaks at 79% of provisioned power);
* policy (POLCA Algorithm 1): above T1 = 80% of the budget cap low-priority servers to T1's clock,
  above T2 = 89% cap low-priority deeper and high-priority lightly; lift caps below the thresholds
  minus a hysteresis; every action lands ``actuation_delay_s`` later (out-of-band, up to 40 s);
  above 100% the power brake halts all GPUs for ``brake_s``;
* answer: the largest oversubscription with no power-brake event, high-priority P50 latency
  impact below 1% and low-priority throughput loss at most 2%.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import hardware as get_hardware
from planner.catalog.model import ModelSpec
from planner.errors import InputError
from planner.frozen import Frozen
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout, check_layout
from planner.perf.power import apply_clock
from planner.serving.batching import Engine
from planner.serving.queueing import at_rates, serving_curve
from planner.serving.workload import Workload, length_stats


class PolcaSpec(Frozen):
    type: Literal["polca"] = "polca"
    hardware: str = "a100-80g"
    tp: int = Field(8, ge=1, description="GPUs per server (one instance per server)")
    framework: str | None = None
    weight_dtype: DType = DType.fp16
    servers: int = Field(40, ge=1, description="servers the row's power was provisioned for")
    server_power_w: float = Field(6500, gt=0, description="provisioned (nameplate) power per server")
    host_idle_w: float = Field(1500, ge=0, description="non-GPU power of an idle server (SplitwiseSim DGX-A100)")
    gpu_share: float = Field(0.5, gt=0, le=1, description="GPUs' share of a busy server's power (POLCA: ~50%); "
                             "host power = max(host_idle_w, GPU power x (1/share - 1))")
    trace_peak_utilization: float = Field(0.79, gt=0, le=1, description="row peak / provisioned at nameplate")
    diurnal_trough: float = Field(0.4, gt=0, le=1, description="lowest / highest load over a day")
    days: float = Field(2.0, gt=0, le=14)
    step_s: float = Field(1.0, gt=0, le=60)
    low_priority_fraction: float = Field(0.5, ge=0, le=1)
    max_clock_mhz: float = Field(1410, gt=0)
    t1: float = 0.80
    t1_low_mhz: float = 1275
    t2: float = 0.89
    t2_low_mhz: float = 1110
    t2_high_mhz: float = 1305
    hysteresis: float = 0.05
    actuation_delay_s: float = Field(40, ge=0)
    brake_s: float = Field(5, gt=0)
    brake_mhz: float = 288
    oversubscription: list[float] = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5]
    max_hp_p50_impact: float = 0.01
    max_lp_throughput_loss: float = 0.02
    seed: int = 0


class Level(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    oversubscription: float
    servers: int
    peak_power_fraction: float          # uncapped row peak / budget
    capped_peak_fraction: float         # row peak / budget with the policy acting
    brake_events: int
    capping_events: int
    capped_time_fraction: float
    mean_capping_s: float
    seconds_over_budget: int
    hp_p50_impact: float                # relative P50 end-to-end latency increase, high priority
    hp_p99_impact: float
    lp_throughput_loss: float
    meets_criteria: bool


class PolcaResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: Literal["polca"] = "polca"
    model: str
    hardware: str
    budget_w: float
    peak_rate_per_server: float         # calibrated diurnal peak, req/s
    server_capacity_rate: float         # what one server sustains at full clock
    levels: list[Level]
    extra_servers_fraction: float       # the answer (POLCA: 0.30)
    extra_servers: int
    notes: list[str] = []
    power_series: dict[str, list[float]] = {}   # hourly row power at the chosen level, for plots
    certainty: dict | None = None      # sizes at P50 and at the scenario's confidence (planner.confidence)


def _clock_curves(model, hw, lay, dtypes, engine, stats, scv, clocks):
    """Serving curves of one server at each clock fraction."""
    return {f: serving_curve(model, apply_clock(hw, f), lay, dtypes, engine, stats, scv) for f in clocks}


def plan_polca(model: ModelSpec, spec: PolcaSpec, workload: Workload, engine: Engine, name: str) -> PolcaResult:
    hw = with_framework(get_hardware(spec.hardware), spec.framework)
    if not spec.t1 < spec.t2 < 1:
        raise InputError(f"thresholds must satisfy t1 < t2 < 1, got t1={spec.t1}, t2={spec.t2}")
    lay = Layout.of(spec.tp, 1, 1)
    check_layout(model, lay)
    kv = DType.bf16 if spec.weight_dtype.bytes < 2 else spec.weight_dtype
    dtypes = DTypes(weight=spec.weight_dtype, kv=kv)
    stats = length_stats(workload)
    fmax = spec.max_clock_mhz
    clocks = sorted({1.0, spec.t1_low_mhz / fmax, spec.t2_low_mhz / fmax, spec.t2_high_mhz / fmax,
                     spec.brake_mhz / fmax})
    curves = _clock_curves(model, hw, lay, dtypes, engine, stats, workload.arrival.scv, clocks)
    full = curves[1.0]
    stable = full.rho[0] < 1
    capacity = float(np.nanmax(np.where(stable, full.rate[0], np.nan)))
    budget = spec.servers * spec.server_power_w
    rng = np.random.default_rng(spec.seed)
    steps = int(spec.days * 86400 / spec.step_s)
    t = np.arange(steps) * spec.step_s
    shape = spec.diurnal_trough + (1 - spec.diurnal_trough) * 0.5 * (1 + np.cos(2 * np.pi * (t / 86400 - 0.6)))
    z = rng.standard_normal(steps)

    def server_power(rate: np.ndarray, f: float) -> tuple[np.ndarray, np.ndarray]:
        """(mean, per-step std) of one server's power at per-server ``rate`` and clock ``f``."""
        c = curves[f]
        idle = hw.power.idle.value
        per_dev = at_rates(c, c.power_w, rate)
        n1 = float(c.rate[0, 0])
        per_dev = np.where(rate < n1, idle + (c.power_w[0, 0] - idle) * rate / n1, per_dev)
        per_dev = np.where(np.isfinite(per_dev), per_dev, c.peak_power_w[0, -1])
        spike = np.maximum(at_rates(c, c.peak_power_w, rate) - per_dev, 0)
        spike = np.where(np.isfinite(spike), spike, 0.0)
        prefill_s = stats.mean_prefill / np.where(np.isfinite(at_rates(c, c.mu, rate)), at_rates(c, c.mu, rate),
                                                  float(c.mu[0, 0]))
        spread = np.sqrt(stats.second_prefill) / stats.mean_prefill
        std = spec.tp * spike * prefill_s * spread * np.sqrt(np.maximum(rate * spec.step_s, 0)) / spec.step_s
        gpu = spec.tp * per_dev
        host = np.maximum(spec.host_idle_w, gpu * (1 / spec.gpu_share - 1))
        return host + gpu, std / spec.gpu_share

    def row_peak(peak_rate: float, n: int) -> float:
        mean, std = server_power(peak_rate * shape, 1.0)
        return float(np.max(n * mean + np.sqrt(n) * std * z))

    # calibrate the diurnal peak rate on the production trace's peak utilisation (bisection)
    lo, hi = 0.0, capacity
    target = spec.trace_peak_utilization * budget
    notes = []
    if row_peak(hi, spec.servers) < target:
        notes.append(f"even at full load ({capacity:.3g} req/s per server) the row peaks at "
                     f"{row_peak(hi, spec.servers) / budget:.1%} of its budget, below the trace's "
                     f"{spec.trace_peak_utilization:.0%}: the servers' power model cannot reach it")
        peak_rate = capacity
    else:
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if row_peak(mid, spec.servers) < target else (lo, mid)
        peak_rate = (lo + hi) / 2
    rate = peak_rate * shape
    f_t1_low, f_t2_low, f_t2_high, f_brake = (spec.t1_low_mhz / fmax, spec.t2_low_mhz / fmax,
                                              spec.t2_high_mhz / fmax, spec.brake_mhz / fmax)
    power = {f: server_power(rate, f) for f in clocks}
    e2e = {f: (at_rates(curves[f], curves[f].e2e["p50"], rate), at_rates(curves[f], curves[f].e2e["p99"], rate))
           for f in clocks}
    cap = {f: float(np.nanmax(np.where(curves[f].rho[0] < 1, curves[f].rate[0], np.nan))) for f in clocks}
    levels, series = [], {}
    for x in spec.oversubscription:
        lv, hourly = _simulate_row(spec, x, budget, rate, z, power, e2e, cap,
                                   (1.0, f_t1_low, f_t2_low, f_t2_high, f_brake))
        levels.append(lv)
        series[f"{x:.2f}"] = hourly
    ok = [lv for lv in levels if lv.meets_criteria]
    best = max(ok, key=lambda lv: lv.oversubscription) if ok else None
    chosen = f"{best.oversubscription:.2f}" if best else f"{levels[0].oversubscription:.2f}"
    return PolcaResult(scenario=name, model=model.name, hardware=hw.name, budget_w=budget,
                       peak_rate_per_server=peak_rate, server_capacity_rate=capacity, levels=levels,
                       extra_servers_fraction=best.oversubscription if best else 0.0,
                       extra_servers=(best.servers - spec.servers) if best else 0, notes=notes,
                       power_series={"hour": list(np.arange(len(series[chosen])) * 1.0), "row_power_w": series[chosen],
                                     "budget_w": [budget] * len(series[chosen])})


def _simulate_row(spec: PolcaSpec, x: float, budget: float, rate, z, power, e2e, cap, clocks) -> tuple[Level, list]:
    """Step the threshold policy over the load curve for a row of ``servers x (1 + x)`` servers."""
    f1, f_t1_low, f_t2_low, f_t2_high, f_brake = clocks
    n = int(round(spec.servers * (1 + x)))
    n_low = int(round(n * spec.low_priority_fraction))
    n_high = n - n_low
    settings = {0: (f1, f1), 1: (f_t1_low, f1), 2: (f_t2_low, f_t2_high)}   # level -> (low, high) clocks

    def row(level_clocks):
        (ml, sl), (mh, sh) = power[level_clocks[0]], power[level_clocks[1]]
        std = np.sqrt(n_low * sl**2 + n_high * sh**2)
        return n_low * ml + n_high * mh + std * z

    rows = {lvl: row(c) for lvl, c in settings.items()}
    brake_row = row((f_brake, f_brake))
    steps, dt = len(rate), spec.step_s
    delay = int(round(spec.actuation_delay_s / dt))
    brake_len = max(1, int(round(spec.brake_s / dt)))
    t1, t2, h = spec.t1 * budget, spec.t2 * budget, spec.hysteresis * budget
    level, target, due = 0, 0, -1
    brake_left, brakes, events, over, capped = 0, 0, 0, 0, 0
    peak_capped = 0.0
    level_at = np.zeros(steps, dtype=np.int8)
    run, runs = 0, []
    power_now = np.empty(steps)
    r0, r1, r2 = rows[0], rows[1], rows[2]
    for i in range(steps):
        p = brake_row[i] if brake_left else (r0[i] if level == 0 else r1[i] if level == 1 else r2[i])
        power_now[i] = p
        peak_capped = max(peak_capped, p)
        if brake_left:
            brake_left -= 1
        elif p > budget:
            over += 1
            brakes += 1
            brake_left = brake_len
        # the controller sees this step's row power and schedules a change (not while braking):
        # escalate above a threshold, relax only below it minus the hysteresis
        if not brake_left:
            want = target
            if p > t2:
                want = 2
            elif p > t1:
                want = max(want, 1)
            if want == 2 and p < t2 - h:
                want = 1
            if want >= 1 and p < t1 - h:
                want = 0
            if want != target:
                target, due = want, i + delay
        if due == i:
            if target > level:
                events += 1
            level = target
        level_at[i] = level
        if level:
            capped += 1
            run += 1
        elif run:
            runs.append(run)
            run = 0
    if run:
        runs.append(run)
    # performance cost: high-priority latency at its clock, low-priority load beyond its capacity
    hp_clock = np.where(level_at == 2, f_t2_high, f1)
    lp_clock = np.choose(level_at, [f1, f_t1_low, f_t2_low])
    base50, base99 = e2e[f1]
    hp50 = np.where(hp_clock == f1, base50, e2e[f_t2_high][0])
    hp99 = np.where(hp_clock == f1, base99, e2e[f_t2_high][1])
    w = rate / rate.sum()
    ok50, ok99 = np.isfinite(hp50) & np.isfinite(base50), np.isfinite(hp99) & np.isfinite(base99)
    impact50 = float(np.sum(w[ok50] * (hp50[ok50] / base50[ok50] - 1)) / max(w[ok50].sum(), 1e-12))
    impact99 = float(np.sum(w[ok99] * (hp99[ok99] / base99[ok99] - 1)) / max(w[ok99].sum(), 1e-12))
    lp_cap = np.select([lp_clock == f1, lp_clock == f_t1_low], [cap[f1], cap[f_t1_low]], cap[f_t2_low])
    lost = float(np.maximum(rate - lp_cap, 0).sum() / rate.sum())
    hourly = power_now[: (steps // int(3600 / dt)) * int(3600 / dt)].reshape(-1, int(3600 / dt)).max(axis=1)
    uncapped_peak = float(np.max(r0)) / budget
    meets = brakes == 0 and impact50 < spec.max_hp_p50_impact and lost <= spec.max_lp_throughput_loss
    return Level(oversubscription=x, servers=n, peak_power_fraction=uncapped_peak,
                 capped_peak_fraction=peak_capped / budget, brake_events=brakes, capping_events=events,
                 capped_time_fraction=capped / steps, mean_capping_s=float(np.mean(runs) * dt) if runs else 0.0,
                 seconds_over_budget=int(over * dt), hp_p50_impact=impact50, hp_p99_impact=impact99,
                 lp_throughput_loss=lost, meets_criteria=bool(meets)), hourly.tolist()
