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
* hierarchy: budgets at rack, row and cluster level at once, each with its own cap, thresholds
  and brake (``designs.power_sim``); other workloads (a training job at a constant high draw,
  POLCA: training peaks at 97% of provisioned power) take a given share of each row's slots;
* load: the synthetic diurnal curve, or a measured trace (``serving.power_trace``: requests/s
  offered to the row, or the row's measured power, inverted through the server power model);
* answer: the largest oversubscription with no power-brake event, high-priority P50 latency
  impact below 1% and low-priority throughput loss at most 2%; per level the peak utilisation of
  each budget, the largest power rise within any ``spike_window_s`` window, capping events per day.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import as_run
from planner.catalog.model import ModelSpec
from planner.checks import Degree, FrameworkChoice
from planner.designs import power_sim as ps
from planner.errors import InfeasibleError, InputError, count
from planner.frozen import Frozen
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout, check_layout
from planner.perf.power import apply_clock
from planner.serving.batching import Engine
from planner.serving.power_trace import load_trace
from planner.serving.queueing import at_rates, serving_curve
from planner.serving.workload import Workload, length_stats


class Budget(Frozen):
    """A power budget at one level of the hierarchy, with its own thresholds and power brake."""

    cap_w: float | None = Field(None, gt=0, description="budget (W); default: the nameplate power of the "
                                "server slots it was provisioned for")
    t1: float | None = Field(None, gt=0, lt=1, description="first threshold / cap (default: the design's t1)")
    t2: float | None = Field(None, gt=0, lt=1, description="second threshold / cap (default: the design's t2)")


class OtherWorkload(Frozen):
    """Servers of another workload in the row (e.g. a training job), on racks of their own at the
    end of each row, drawing a constant power; the inference policy does not cap them, the brake
    halts them too."""

    name: str = "training"
    share: float = Field(gt=0, lt=1, description="fraction of the row's nameplate server slots it takes")
    draw: float = Field(0.97, gt=0, le=1.5, description="its power / nameplate server power "
                        "(POLCA: training peaks at 97% of provisioned power)")


# most (step, rack) pairs a POLCA run simulates: its per-rack normals are drawn up front (8 bytes
# each: 400 MB), and a run of 2 days x 10 racks x 2 rows (3.5M) takes seconds
MAX_RACK_STEPS = 50_000_000


class PolcaSpec(Frozen):
    type: Literal["polca"] = "polca"
    hardware: str = "a100-80g"
    tp: Degree = Field(8, description="GPUs per server (one instance per server)")
    framework: FrameworkChoice = Field(None, description="engine entry applied to the servers (e.g. vllm-2023); "
                                       "default: engine.framework")
    weight_dtype: DType = DType.fp16
    servers: int = Field(40, ge=1, le=100_000, description="servers the row's power was provisioned for")
    server_power_w: float = Field(6500, gt=0, description="provisioned (nameplate) power per server")
    host_idle_w: float = Field(1500, ge=0, description="non-GPU power of an idle server (SplitwiseSim DGX-A100)")
    gpu_share: float = Field(0.5, ge=0.05, le=1, description="GPUs' share of a busy server's power (POLCA: ~50%; "
                             "at least 5%, a share no GPU server has below); "
                             "host power = max(host_idle_w, GPU power x (1/share - 1))")
    trace_peak_utilization: float = Field(0.79, gt=0, le=1, description="row peak / provisioned at nameplate")
    diurnal_trough: float = Field(0.4, gt=0, le=1, description="lowest / highest load over a day")
    days: float = Field(2.0, gt=0, le=14, description="simulated days (a replayed trace runs for its own length)")
    step_s: float = Field(1.0, gt=0, le=60)
    low_priority_fraction: float = Field(0.5, ge=0, le=1)
    max_clock_mhz: float = Field(1410, gt=0)
    t1: float = 0.80
    t1_low_mhz: float = 1275
    t2: float = 0.89
    t2_low_mhz: float = 1110
    t2_high_mhz: float = 1305
    hysteresis: float = 0.05
    actuation_delay_s: float = Field(40, ge=0, le=86_400, description="time from a controller's decision to "
                                     "the new clocks (POLCA: out-of-band, up to 40 s); at most a day")
    brake_s: float = Field(5, gt=0, le=86_400, description="how long the power brake holds the GPUs at "
                           "brake_mhz (POLCA: seconds); at most a day")
    brake_mhz: float = 288
    oversubscription: list[float] = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5]
    max_hp_p50_impact: float = 0.01
    max_lp_throughput_loss: float = 0.02
    seed: int = Field(0, ge=0, lt=2**32, description="random seed of the simulated load")
    racks: int = Field(1, ge=1, description="racks per row; the row's nameplate servers are split evenly")
    rack_budget: Budget | None = Field(None, description="a budget per rack (none: racks are not limited)")
    rows: int = Field(1, ge=1, description="identical rows in the cluster (own bursts per rack)")
    cluster_budget: Budget | None = Field(None, description="a budget over all rows (none: not limited)")
    other: list[OtherWorkload] = Field([], description="other workloads sharing each row")
    trace: str | None = Field(None, description="CSV of a measured load (time_s, requests_per_s) or row power "
                              "(time_s, power_w) replayed instead of the diurnal curve")
    trace_calibrate: bool = Field(True, description="requests/s trace: scale it so the nameplate row peaks at "
                                  "trace_peak_utilization (False: use its rates as given)")
    spike_window_s: float = Field(40, gt=0, description="window of the power-spike output (POLCA: 40 s, the "
                                  "out-of-band capping latency; 2 s for training)")

    @model_validator(mode="after")
    def _physical(self) -> PolcaSpec:
        """Powers, thresholds and clocks that describe a server and a policy at all (each a located error)."""
        from planner.checks import located

        if self.days * 86_400 < 600:
            raise located("days", "expected at least ten minutes of simulated load (days >= 600 / 86,400), got "
                          f"{self.days:g} days")
        if self.host_idle_w >= self.server_power_w:
            raise located("host_idle_w", f"an idle host of {self.host_idle_w:g} W does not fit a server provisioned "
                          f"for {self.server_power_w:g} W (server_power_w); expected host_idle_w < server_power_w")
        if not 0 < self.t1 < self.t2 <= 1:
            raise located("t1", "thresholds must satisfy 0 < t1 < t2 <= 1 (fractions of the budget), got "
                          f"t1 {self.t1:g}, t2 {self.t2:g}")
        if not 0 <= self.hysteresis < self.t1:
            raise located("hysteresis", f"expected 0 <= hysteresis < t1 ({self.t1:g}), got {self.hysteresis:g}")
        for name in ("t1_low_mhz", "t2_low_mhz", "t2_high_mhz", "brake_mhz"):
            if not 0 < getattr(self, name) <= self.max_clock_mhz:
                raise located(name, f"a capped clock must lie in (0, max_clock_mhz = {self.max_clock_mhz:g}], got "
                              f"{getattr(self, name):g}")
        if self.brake_mhz > min(self.t1_low_mhz, self.t2_low_mhz):
            raise located("brake_mhz", f"the power brake ({self.brake_mhz:g} MHz) must clock at or below the capping "
                          f"levels (t1_low_mhz {self.t1_low_mhz:g}, t2_low_mhz {self.t2_low_mhz:g})")
        if not self.oversubscription or any(not (0 <= x < 10) for x in self.oversubscription):
            raise located("oversubscription", "expected a non-empty list of extra-server fractions in [0, 10), e.g. "
                          f"[0, 0.1, 0.2], got {self.oversubscription}")
        return self

    @field_validator("trace")
    @classmethod
    def _relative_to_scenario(cls, v: str | None, info: ValidationInfo) -> str | None:
        from pathlib import Path

        base = (info.context or {}).get("base")
        if v and base and not Path(v).is_absolute() and (Path(base) / v).exists():
            return str(Path(base) / v)
        return v


class Level(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    oversubscription: float
    servers: int                        # per row: inference + other workloads
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
    peak_utilization: dict[str, float] = {}     # per level (rack/row/cluster): highest delivered peak / cap
    brake_events_by_level: dict[str, int] = {}
    capping_events_by_level: dict[str, int] = {}
    capping_events_per_day: float = 0.0
    spike_fraction: float = 0.0         # largest rise of row power within spike_window_s / row budget


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
    budgets_w: dict[str, float] = {}    # cap of each level (rack, row, cluster) in use
    load: str = "diurnal"               # or the trace replayed
    spike_window_s: float = 40.0
    other_servers: int = 0              # per row


def _clock_curves(model, hw, lay, dtypes, engine, stats, scv, clocks):
    """Serving curves of one server at each clock fraction."""
    return {f: serving_curve(model, apply_clock(hw, f), lay, dtypes, engine, stats, scv) for f in clocks}


class _ServerModel:
    """One server's power and latency at a per-server request rate and a clock fraction."""

    def __init__(self, spec: PolcaSpec, hw, stats, curves):
        self.spec, self.hw, self.stats, self.curves = spec, hw, stats, curves

    def power(self, rate: np.ndarray, f: float) -> tuple[np.ndarray, np.ndarray]:
        """(mean, per-step std) of one server's power at per-server ``rate`` and clock ``f``."""
        spec, stats, c = self.spec, self.stats, self.curves[f]
        idle = self.hw.power.idle.value
        per_dev = at_rates(c, c.power_w, rate)
        n1 = float(c.rate[0, 0])
        per_dev = np.where(rate < n1, idle + (c.power_w[0, 0] - idle) * rate / n1, per_dev)
        per_dev = np.where(np.isfinite(per_dev), per_dev, c.peak_power_w[0, -1])
        spike = np.maximum(at_rates(c, c.peak_power_w, rate) - per_dev, 0)
        spike = np.where(np.isfinite(spike), spike, 0.0)
        mu = at_rates(c, c.mu, rate)
        prefill_s = stats.mean_prefill / np.where(np.isfinite(mu), mu, float(c.mu[0, 0]))
        spread = np.sqrt(stats.second_prefill) / stats.mean_prefill
        std = spec.tp * spike * prefill_s * spread * np.sqrt(np.maximum(rate * spec.step_s, 0)) / spec.step_s
        gpu = spec.tp * per_dev
        host = np.maximum(spec.host_idle_w, gpu * (1 / spec.gpu_share - 1))
        return host + gpu, std / spec.gpu_share

    def ceiling_w(self, f: float) -> float:
        """The most one server draws at clock ``f``: every GPU at its (clock-capped) TDP, the host
        in proportion (GPUs are ``gpu_share`` of a busy server)."""
        idle, tdp = self.hw.power.idle.value, self.hw.power.tdp.value
        gpu = self.spec.tp * (idle + (tdp - idle) * f**3)
        return gpu + max(self.spec.host_idle_w, gpu * (1 / self.spec.gpu_share - 1))

    def braked_w(self, f_brake: float) -> float:
        """A server's power with its GPUs braked: host idle plus GPUs at the brake clock, no work."""
        idle, tdp = self.hw.power.idle.value, self.hw.power.tdp.value
        return self.spec.host_idle_w + self.spec.tp * (idle + (tdp - idle) * f_brake**3)


def _check_size(spec: PolcaSpec, steps: int) -> None:
    """Refuse a run whose (steps, racks) normals, drawn up front, exceed MAX_RACK_STEPS, before any
    per-step array is made (a step_s of 1e-300 asked numpy for 1e305 elements)."""
    if steps * spec.racks * spec.rows > MAX_RACK_STEPS:
        raise InputError(f"design: {count(steps)} steps x {spec.racks * spec.rows:,} racks is more rack-seconds "
                         f"than the simulator holds ({MAX_RACK_STEPS:,}): lower days, raise step_s, or give fewer "
                         "racks or rows")


def _load(spec: PolcaSpec, server: _ServerModel, capacity: float, steps_default: int):
    """Per-server load shape (peak 1) and, for a power trace, the per-server rate it implies."""
    if spec.trace is None:
        _check_size(spec, steps_default)
        t = np.arange(steps_default) * spec.step_s
        shape = spec.diurnal_trough + (1 - spec.diurnal_trough) * 0.5 * (1 + np.cos(2 * np.pi * (t / 86400 - 0.6)))
        return shape, None, "diurnal"
    tr = load_trace(spec.trace)
    _check_size(spec, int(tr.duration_s // spec.step_s) + 1)     # before the resampled trace is made
    v = tr.resample(spec.step_s)
    if tr.kind == "power_w":          # invert the full-clock power curve: row W -> per-server req/s
        grid = np.linspace(0, capacity, 512)
        mean = np.maximum.accumulate(server.power(grid, 1.0)[0])
        return None, np.interp(v / spec.servers, mean, grid), f"{tr.path} (row power)"
    if v.max() <= 0:
        raise InputError(f"{tr.path}: the trace's requests_per_s are all zero")
    if spec.trace_calibrate:
        return v / v.max(), None, f"{tr.path} (requests/s, scaled)"
    return None, v / spec.servers, f"{tr.path} (requests/s)"


def plan_polca(model: ModelSpec, spec: PolcaSpec, workload: Workload, engine: Engine, name: str) -> PolcaResult:
    from planner.designs.pool_physics import engine_named

    spec = engine_named(spec, engine)
    hw = as_run(spec.hardware, spec.framework, None, engine.memory_fraction, engine.kv_pool_tokens)
    if not spec.t1 + spec.hysteresis < spec.t2 < 1:
        raise InputError(f"thresholds must satisfy t1 + hysteresis < t2 < 1, got t1={spec.t1}, "
                         f"hysteresis={spec.hysteresis}, t2={spec.t2}")
    if spec.servers % spec.racks:
        raise InputError(f"racks: {spec.racks} racks do not split {spec.servers} servers evenly")
    lay = Layout.of(spec.tp, 1, 1)
    check_layout(model, lay, hw)
    kv = DType.bf16 if spec.weight_dtype.bytes < 2 else spec.weight_dtype
    dtypes = DTypes(weight=spec.weight_dtype, kv=kv)
    stats = length_stats(workload)
    fmax = spec.max_clock_mhz
    fr = (1.0, spec.t1_low_mhz / fmax, spec.t2_low_mhz / fmax, spec.t2_high_mhz / fmax, spec.brake_mhz / fmax)
    clocks = sorted(set(fr))
    curves = _clock_curves(model, hw, lay, dtypes, engine, stats, workload.arrival.scv, clocks)
    full = curves[1.0]
    capacity = float(np.nanmax(np.where(full.rho[0] < 1, full.rate[0], np.nan)))
    server = _ServerModel(spec, hw, stats, curves)
    budget = spec.servers * spec.server_power_w
    shape, given_rate, load_name = _load(spec, server, capacity, int(spec.days * 86400 / spec.step_s))
    steps = len(shape if given_rate is None else given_rate)
    per = spec.servers // spec.racks
    rng = np.random.default_rng(spec.seed)
    z = rng.standard_normal((steps, spec.racks * spec.rows))
    if spec.trace is not None and given_rate is not None and load_name.endswith("(row power)"):
        z[:] = 0.0                    # a measured power trace already carries its bursts
    z_row = z[:, :spec.racks].sum(axis=1) * np.sqrt(per) / np.sqrt(spec.servers)   # the nameplate row's noise
    notes = []

    def row_peak(peak_rate: float) -> float:
        mean, std = server.power(peak_rate * shape, 1.0)
        return float(np.max(spec.servers * mean + np.sqrt(spec.servers) * std * z_row))

    if given_rate is not None:
        rate, peak_rate = given_rate, float(given_rate.max())
    else:
        peak_rate = _calibrate(row_peak, capacity, spec.trace_peak_utilization * budget, budget, notes)
        rate = peak_rate * shape
    if rate.max() > capacity:
        notes.append(f"the load peaks at {rate.max():.3g} req/s per server, above one server's capacity "
                     f"({capacity:.3g}): the excess is counted as lost")
    power = {f: server.power(rate, f) for f in clocks}
    mean = np.stack([power[f][0] for f in fr])
    std = np.stack([power[f][1] for f in fr])
    std[ps.BRAKE] = 0.0
    braked = np.full(steps, server.braked_w(fr[ps.BRAKE]))
    e2e = np.stack([[at_rates(curves[f], curves[f].e2e[q], rate) for f in fr] for q in ("p50", "p99")])
    cap_rate = np.array([float(np.nanmax(np.where(curves[f].rho[0] < 1, curves[f].rate[0], np.nan))) for f in fr])
    ctx = _Context(spec, budget, rate, mean, std, braked, z, e2e, cap_rate, server)
    ctx.ceiling = np.array([server.ceiling_w(f) for f in fr])
    ctx.simulator = engine.simulator
    levels, series = [], {}
    for x in spec.oversubscription:
        lv, hourly = _run_level(ctx, x)
        levels.append(lv)
        series[f"{x:.2f}"] = hourly
    ok = [lv for lv in levels if lv.meets_criteria]
    best = max(ok, key=lambda lv: lv.oversubscription) if ok else None
    chosen = f"{best.oversubscription:.2f}" if best else f"{levels[0].oversubscription:.2f}"
    tree0 = _tree(ctx, 0.0)
    names = {0: "rack", 1: "row", 2: "cluster"}
    caps = {names[int(k)]: float(tree0.cap_w[tree0.level_of_node() == k].min())
            for k in (0, 1, 2) if np.isfinite(tree0.cap_w[tree0.level_of_node() == k]).all()}
    return PolcaResult(scenario=name, model=model.name, hardware=hw.name, budget_w=budget,
                       peak_rate_per_server=peak_rate, server_capacity_rate=capacity, levels=levels,
                       extra_servers_fraction=best.oversubscription if best else 0.0,
                       extra_servers=(best.servers - spec.servers) if best else 0, notes=notes,
                       power_series={"hour": list(np.arange(len(series[chosen])) * 1.0), "row_power_w": series[chosen],
                                     "budget_w": [budget] * len(series[chosen])},
                       budgets_w=caps, load=load_name, spike_window_s=spec.spike_window_s,
                       other_servers=int(_others_per_rack(spec).sum()))


def _calibrate(row_peak, capacity: float, target: float, budget: float, notes: list[str]) -> float:
    """The peak per-server rate at which the nameplate row peaks at ``target`` W (bisection)."""
    if row_peak(capacity) < target:
        notes.append(f"even at full load ({capacity:.3g} req/s per server) the row peaks at "
                     f"{row_peak(capacity) / budget:.1%} of its budget, below the trace's "
                     f"{target / budget:.0%}: the servers' power model cannot reach it")
        return capacity
    lo, hi = 0.0, capacity
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if row_peak(mid) < target else (lo, mid)
    return (lo + hi) / 2


class _Context:
    """Everything a sweep level needs, computed once."""

    simulator = "python"                # Engine.simulator of the controllers' loop

    def __init__(self, spec, budget, rate, mean, std, braked, z, e2e, cap_rate, server):
        self.spec, self.budget, self.rate, self.mean, self.std = spec, budget, rate, mean, std
        self.braked, self.z, self.e2e, self.cap_rate, self.server = braked, z, e2e, cap_rate, server


def _others_per_rack(spec: PolcaSpec) -> np.ndarray:
    """Other workloads' servers in each rack of a row, on whole racks filled from the row's end."""
    per = spec.servers // spec.racks
    n = sum(int(round(o.share * spec.servers)) for o in spec.other)
    out = np.zeros(spec.racks, int)
    for r in range(spec.racks - 1, -1, -1):
        out[r] = min(per, n)
        n -= out[r]
    if out.sum() >= spec.servers:
        raise InputError("other: the other workloads take every server slot of the row; lower their share")
    return out


def _tree(ctx: _Context, x: float) -> ps.Tree:
    """Racks, rows and cluster of a row with ``x`` more servers than it was provisioned for."""
    spec = ctx.spec
    per = spec.servers // spec.racks
    other = _others_per_rack(spec)
    free = per - other                                   # inference slots per rack at nameplate
    n_inf = int(round(spec.servers * (1 + x))) - int(other.sum())
    share = n_inf * free / free.sum()
    n = np.floor(share).astype(int)
    n[np.argsort(-(share - n), kind="stable")[: n_inf - n.sum()]] += 1   # largest remainders
    n_low = np.round(n * spec.low_priority_fraction).astype(int)
    draw = sum(o.draw * round(o.share * spec.servers) for o in spec.other) / max(other.sum(), 1)
    other_w = other * draw * spec.server_power_w
    other_brake = other * ctx.server.braked_w(spec.brake_mhz / spec.max_clock_mhz)
    R, W = spec.racks, spec.rows
    rack, cl = spec.rack_budget, spec.cluster_budget
    rack_cap = (rack.cap_w or per * spec.server_power_w) if rack else np.inf
    cluster_cap = (cl.cap_w or W * ctx.budget) if cl else np.inf
    cap = np.concatenate([np.full(R * W, rack_cap), np.full(W, ctx.budget), [cluster_cap]])
    def thresholds(name: str) -> np.ndarray:
        own = getattr(spec, name)
        return np.concatenate([np.full(R * W, (rack and getattr(rack, name)) or own), np.full(W, own),
                               [(cl and getattr(cl, name)) or own]])

    t1, t2 = thresholds("t1"), thresholds("t2")
    if np.any(t1 + spec.hysteresis >= t2):
        raise InputError("rack_budget/cluster_budget: thresholds must satisfy t1 + hysteresis < t2")
    return ps.Tree(row_of=np.repeat(np.arange(W), R), n_low=np.tile(n_low, W), n_high=np.tile(n - n_low, W),
                   other_w=np.tile(other_w, W), other_brake_w=np.tile(other_brake, W), cap_w=cap, t1=t1, t2=t2,
                   hysteresis=spec.hysteresis)


def _check_brakeable(ctx: _Context, tree: ps.Tree) -> None:
    """A budget the braked servers under it still exceed cannot be held: say so (infeasible)."""
    halted = (tree.n_low + tree.n_high) * ctx.braked.max() + tree.other_brake_w
    node = halted @ tree.membership()
    bad = np.flatnonzero(node > tree.cap_w)
    if bad.size:
        k = int(bad[0])
        raise InfeasibleError(f"a budget of {tree.cap_w[k]:.0f} W is below the {node[k]:.0f} W its servers draw even "
                              f"with the power brake on: raise the cap or put fewer servers under it")


def _run_level(ctx: _Context, x: float) -> tuple[Level, list]:
    """Simulate the hierarchy with ``x`` more servers and summarise it as a ``Level``."""
    spec = ctx.spec
    tree = _tree(ctx, x)
    _check_brakeable(ctx, tree)
    dt = spec.step_s
    out = ps.simulate(tree, ctx.mean, ctx.std, ctx.braked, ctx.z, int(round(spec.actuation_delay_s / dt)),
                      int(round(spec.brake_s / dt)), ctx.ceiling, ctx.simulator)
    A, lvl = tree.membership(), tree.level_of_node()
    node_w = out.rack_w @ A
    demand = ps.uncapped_row_power(tree, ctx.mean, ctx.std, ctx.z, ctx.ceiling, row=0)
    row0 = tree.racks                                      # the first row's node
    names = ("rack", "row", "cluster")
    util = {names[k]: float(np.max(node_w[:, lvl == k].max(axis=0) / tree.cap_w[lvl == k]))
            for k in range(3) if np.isfinite(tree.cap_w[lvl == k]).all()}
    brakes = {names[k]: int(out.brakes[lvl == k].sum()) for k in range(3)}
    caps = {names[k]: int(out.escalations[lvl == k].sum()) for k in range(3)}
    steps = len(ctx.rate)
    days = steps * dt / 86400
    capped = (out.level > 0) | out.braked                   # (T, R)
    n_srv = tree.n_low + tree.n_high
    row_capped = capped[:, tree.row_of == 0].any(axis=1)
    runs = _run_lengths(row_capped)
    impact50, impact99, lost = _performance(ctx, tree, out)
    n_brakes = int(out.brakes.sum())
    per_hour = int(round(3600 / dt))
    row_w = node_w[:, row0]
    hourly = row_w[: (steps // per_hour) * per_hour].reshape(-1, per_hour).max(axis=1) if steps >= per_hour \
        else np.array([row_w.max()])
    meets = n_brakes == 0 and impact50 < spec.max_hp_p50_impact and lost <= spec.max_lp_throughput_loss
    return Level(oversubscription=x, servers=int(round(spec.servers * (1 + x))),
                 peak_power_fraction=float(demand.max()) / ctx.budget,
                 capped_peak_fraction=float(row_w.max()) / ctx.budget, brake_events=n_brakes,
                 capping_events=int(out.escalations.sum()),
                 capped_time_fraction=float((capped * n_srv).sum() / (steps * n_srv.sum())),
                 mean_capping_s=float(np.mean(runs) * dt) if runs.size else 0.0,
                 seconds_over_budget=int(n_brakes * dt), hp_p50_impact=impact50, hp_p99_impact=impact99,
                 lp_throughput_loss=lost, meets_criteria=bool(meets), peak_utilization=util,
                 brake_events_by_level=brakes, capping_events_by_level=caps,
                 capping_events_per_day=float(out.escalations.sum() / days),
                 spike_fraction=window_rise(row_w, int(round(spec.spike_window_s / dt))) / ctx.budget), hourly.tolist()


def _run_lengths(flag: np.ndarray) -> np.ndarray:
    """Lengths of the runs of True in a boolean series."""
    edges = np.diff(np.concatenate([[0], flag.astype(np.int8), [0]]))
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


def window_rise(power_w: np.ndarray, window: int) -> float:
    """The largest rise of ``power_w`` within any ``window`` steps: max over j of
    ``P[j] - min(P[j - window .. j])`` (POLCA's "max. power spike in 40 s")."""
    if window < 1 or power_w.size < 2:
        return 0.0
    w = min(window, power_w.size - 1)
    padded = np.concatenate([np.full(w, power_w[0]), power_w])      # the first steps look back to the start
    lows = np.lib.stride_tricks.sliding_window_view(padded, w + 1).min(axis=1)
    return float(np.max(power_w - lows))


def _performance(ctx: _Context, tree: ps.Tree, out: ps.Outcome) -> tuple[float, float, float]:
    """High-priority P50/P99 latency impact and low-priority throughput loss, weighted by load.
    Few (T, R) arrays, worked in place: a 10-row hierarchy has 8.6M (step, rack) pairs a level."""
    t = np.arange(len(ctx.rate))[:, None]
    clock = np.where(out.braked, np.int8(ps.BRAKE), ps.HIGH_CLOCK.astype(np.int8)[out.level])   # high priority's
    w = ctx.rate[:, None] * tree.n_high                     # (T, R) high-priority load
    impacts = []
    with np.errstate(divide="ignore", invalid="ignore"):   # pairs outside ``ok`` are not summed
        for q in (0, 1):
            base, cur = ctx.e2e[q, ps.FULL][:, None], ctx.e2e[q][clock, t]
            ok = np.isfinite(base) & np.isfinite(cur) & (w > 0)
            np.divide(cur, base, out=cur)
            cur -= 1
            cur *= w                                        # w (cur / base - 1)
            impacts.append(float(np.sum(cur[ok]) / max(w[ok].sum(), 1e-12)))
    clock = np.where(out.braked, np.int8(ps.BRAKE), ps.LOW_CLOCK.astype(np.int8)[out.level])    # low priority's
    lost = ctx.cap_rate[clock]
    np.subtract(ctx.rate[:, None], lost, out=lost)
    np.maximum(lost, 0, out=lost)
    lost *= tree.n_low                                      # (T, R) low-priority requests/s beyond capacity
    offered = np.multiply(ctx.rate[:, None], tree.n_low, out=w)
    return impacts[0], impacts[1], float(lost.sum() / max(offered.sum(), 1e-12))
