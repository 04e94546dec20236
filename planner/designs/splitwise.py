"""Splitwise design (Patel et al., ISCA 2024): a prompt pool and a token pool, possibly of different
hardware or power caps; each request is prefilled on a prompt machine, which produces the first
token, and its KV cache is shipped over the scale-out network to a token machine that decodes it.

Analytic model, per design and offered rate lambda (vectorized over a rate grid):

* prompt pool = G/G/c FCFS queue (Splitwise's JSQ over prompt machines), service = the prefill of
  one prompt on a prompt instance (roofline), wait by Allen-Cunneen; TTFT = wait + service;
* KV transfer of ``kv_bytes_per_token x prompt`` over the slower of the two instances' NICs:
  serialized after prefill (below ``serialize_below_tokens``) or layer-wise overlapped with it,
  leaving ``max(0, transfer - prefill) + one layer + transfer_overhead_s`` exposed; it delays the
  second token; each NIC's load must stay below its bandwidth;
* token pool = decode-only continuous batching (no prefill interference) on each token instance,
  the same steady-state curve as the colocated model with no prompt tokens per iteration;
* the design sustains the largest rate at which both pools meet the SLOs.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.catalog.dtypes import DType
from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.designs.kv_cache import CacheReport, KVCacheSpec, pool_cache
from planner.designs.kv_link import link_bytes_per_s, pair_overhead_s
from planner.designs.pool_physics import machine_hw, prompt_service, prompt_ttft
from planner.errors import InfeasibleError, InputError
from planner.frozen import Frozen
from planner.perf.memory import (
    free_kv_bytes_device,
    kv_bytes_per_token_device,
    kv_cache_bytes_per_token,
    state_bytes_per_sequence_device,
)
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout, check_layout
from planner.serving.batching import Engine, iteration
from planner.serving.queueing import at_rates, multi_server_wait, serving_curve
from planner.serving.sessions import SessionWorkload
from planner.serving.slo import PERCENTILES, SLO, Target
from planner.serving.workload import LengthStats, Workload, length_stats


class Pool(Frozen):
    """Machines of one kind: ``count`` instances of ``max(tp, ep) x pp`` devices (``perf.parallel``),
    optionally power-capped."""

    hardware: str
    tp: int = Field(8, ge=1)
    ep: int = Field(1, ge=1, description="MoE models: experts over ep devices; ep > tp runs attention "
                    "data-parallel over ep / tp replicas with all-to-all dispatch (DeepEP-style), an instance "
                    "being max(tp, ep) x pp devices")
    pp: int = Field(1, ge=1)
    count: int = Field(ge=1)
    power_cap: float = Field(1.0, gt=0, le=1, description="fraction of TDP each device may draw")
    cp: int = Field(1, ge=1, description="prompt pools: a machine is cp instances of tp x pp devices that prefill "
                    "each prompt together (context parallelism, ring attention; perf/context_parallel.py)")

    @model_validator(mode="after")
    def _cp_without_dp(self) -> Pool:
        if self.cp > 1 and self.ep > self.tp:
            raise ValueError(f"cp={self.cp} with ep={self.ep} > tp={self.tp}: context-parallel prefill of an "
                             "attention-data-parallel instance is not modelled; give cp 1 or ep <= tp")
        return self

    @property
    def layout(self) -> Layout:
        return Layout.of(self.tp, self.ep, self.pp)

    @property
    def devices(self) -> int:
        """Accelerators of one machine: ``cp`` instances of ``max(tp, ep) x pp``."""
        return max(self.tp, self.ep) * self.pp * self.cp

    @property
    def label(self) -> str:
        """``tp8``, ``tp1 ep8``, ``tp8 pp2``: the degrees a machine runs, for names and messages."""
        return f"tp{self.tp}" + (f" ep{self.ep}" if self.ep > 1 else "") + (f" pp{self.pp}" if self.pp > 1 else "")


class Candidate(Frozen):
    name: str
    prompt: Pool
    token: Pool


class Baseline(Frozen):
    name: str
    pool: Pool


class SlowdownReference(Frozen):
    """Splitwise's SLOs are slowdowns against one request on a reference machine with no
    contention (Table VI); they become absolute bounds at the workload's length quantiles."""

    hardware: str = "a100-80g"
    tp: int = 8
    ttft: tuple[float, float, float] = (2.0, 3.0, 6.0)
    tbt: tuple[float, float, float] = (1.25, 1.5, 5.0)
    e2e: tuple[float, float, float] = (1.25, 1.5, 5.0)


BudgetKind = Literal["cost", "power", "machines"]


class SplitSearch(Frozen):
    """Find the best pool sizes for each (prompt, token) hardware pair under a budget: the cost or
    provisioned power of a named baseline, or a number of machines."""

    pairs: list[tuple[str, str]] = Field(min_length=1)
    token_power_caps: list[float] = [1.0]
    budget: BudgetKind | list[BudgetKind] = Field("cost", description="one budget, or several that must all hold "
                                                  "(a joint budget: e.g. [cost, power, machines])")
    of_baseline: str | None = Field(None, description="take the budget(s) from this baseline")
    limit: float | dict[BudgetKind, float] | None = Field(
        None, description="explicit budget: $/h, W or machines; with several budgets a mapping "
        "{cost: ..., power: ..., machines: ...} (a kind left out is taken from of_baseline)")

    @model_validator(mode="after")
    def _positive(self) -> SplitSearch:
        if isinstance(self.budget, list) and not self.budget:
            raise ValueError("budget: give at least one of cost, power, machines")
        limits = self.limit.values() if isinstance(self.limit, dict) else [self.limit]
        if any(v is not None and v <= 0 for v in limits):
            raise ValueError("limit: budgets must be > 0")
        if isinstance(self.limit, dict) and set(self.limit) - set(self.budgets):
            raise ValueError(f"limit names {sorted(set(self.limit) - set(self.budgets))}, not in budget {self.budgets}")
        return self

    @property
    def budgets(self) -> list[str]:
        """The budget kinds, the first one primary (the one min_budget minimises)."""
        return [self.budget] if isinstance(self.budget, str) else list(dict.fromkeys(self.budget))
    objective: Literal["max_throughput", "min_budget"] = Field(
        "max_throughput", description="most requests/s within the budget, or the least budget (cost, power or "
        "machines) that serves target_rate")
    target_rate: float | None = Field(None, gt=0, description="requests/s to serve (objective min_budget)")
    tp: list[int] = Field([8], min_length=1, description="TP degrees to try for each pool")
    ep: list[int] = Field([1], min_length=1, description="EP degrees to try for each pool (MoE models; with each "
                          "TP degree: ep > tp is attention data parallelism over max(tp, ep) devices)")


class SplitwiseSpec(Frozen):
    type: Literal["splitwise"] = "splitwise"
    framework: str | None = Field(None, description="engine entry applied to every pool (e.g. vllm-2023)")
    weight_dtype: DType = DType.bf16
    kv_transfer: Literal["layerwise", "serialized"] = "layerwise"
    serialize_below_tokens: int = Field(512, ge=0, description="Splitwise serializes short prompts' KV")
    transfer_overhead_s: float | None = Field(None, ge=0, description="exposed cost of layer-wise transfer; "
                                              "default per hardware (Splitwise Sec. 6.1: ~5 ms on H100, ~8 ms "
                                              "on A100; planner/designs/kv_link.py)")
    mixed_pool: bool = Field(False, description="Splitwise's mixed pool: machines are borrowed across pools (a "
                             "prompt machine decodes, a token machine prefills, or either runs both phases with "
                             "prompts first) when the load calls for it; planner/designs/mixed_pool.py")
    link_gbps: float | None = Field(None, gt=0, description="KV-transfer bandwidth per instance (Gb/s); "
                                    "default: the instance's NICs (devices x NIC x scale-out efficiency)")
    slowdown_slo: SlowdownReference | None = None
    baselines: list[Baseline] = []
    designs: list[Candidate] = []
    search: SplitSearch | None = None


# ------------------------------------------------------------------------------------------------
class PoolMetrics(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str
    kind: Literal["splitwise", "colocated"]
    machines: str
    accelerators: int
    max_rate: float                  # req/s meeting the SLOs
    output_tokens_per_s: float
    usd_per_h: float
    provisioned_power_w: float       # accelerators x (capped) TDP
    avg_power_w: float = float("nan")  # accelerators' draw at the max SLO-meeting rate
    output_tokens_per_joule: float = float("nan")
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    e2e_s: dict[str, float]
    binding: str
    cache: CacheReport | None = None   # a session workload's prefix cache on the machines that prefill


def with_pool_cache(model: ModelSpec, workload: Workload, kv_cache: KVCacheSpec | None, pool: Pool,
                    hw: HardwareProfile, dtypes: DTypes) -> tuple[Workload, CacheReport | None]:
    """A session workload with the hit rate of the KV tiers of ``pool``, the machines that prefill
    (they hold the prefix cache; sessions stick to one of them): ``kv_cache.pool_cache``, as for a
    PrfaaS site. Other workloads keep their given ``prefix_hit``."""
    if not isinstance(workload, SessionWorkload):
        return workload, None
    return pool_cache(model, workload, kv_cache or KVCacheSpec(), hw, pool.layout, dtypes, pool.count * pool.cp)


def slowdown_slo(model: ModelSpec, ref: SlowdownReference, stats: LengthStats, dtypes: DTypes,
                 fw: str | None) -> SLO:
    """Absolute bounds from Splitwise's slowdown SLOs at the workload's P50/P90/P99 lengths."""
    hw = machine_hw(ref.hardware, fw)
    lay = Layout.of(ref.tp, 1, 1)
    prompts = np.array(stats.prefill_quantiles)
    t_pre = iteration(model, hw, lay, dtypes, 0.0, 16.0, prompts, prompts).time_s
    t_dec = iteration(model, hw, lay, dtypes, 1.0, prompts, 0.0, prompts).time_s
    outs = np.array(stats.output_quantiles)
    e2e = t_pre + (outs - 1) * t_dec

    def target(factors, base) -> Target:
        return Target(**{p: float(f * b) for p, f, b in zip(PERCENTILES, factors, base, strict=True)})

    return SLO(ttft_s=target(ref.ttft, t_pre), tpot_s=target(ref.tbt, t_dec), e2e_s=target(ref.e2e, e2e))


def _rate_grid(upper: float, points: int = 160) -> np.ndarray:
    return np.geomspace(upper * 1e-3, upper, points)


def _check(slo: SLO, metrics: dict[str, dict[str, np.ndarray]], grid_len: int) -> tuple[np.ndarray, list[str]]:
    ok = np.ones(grid_len, dtype=bool)
    names = []
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for p, bound in getattr(slo, metric).items():
            good = metrics[metric][p] <= bound
            ok &= good
            names.append((f"{metric}.{p} <= {bound:.4g}", good))
    return ok, names


def _max_rate(rates: np.ndarray, ok: np.ndarray, named: list, extra: list) -> tuple[float, int, str]:
    for _, good in extra:
        ok = ok & good
    if not ok[0]:
        bad = [n for n, g in named + extra if not g[0]]
        return 0.0, -1, "unreachable: " + ", ".join(bad)
    last = int(np.flatnonzero(~ok)[0]) - 1 if (~ok).any() else len(ok) - 1
    if last == len(ok) - 1:
        return float(rates[last]), last, "capacity"
    fails = [n for n, g in named + extra if not g[last + 1]]
    return float(rates[last]), last, fails[0] if fails else "capacity"


def evaluate_colocated(model: ModelSpec, b: Baseline, workload: Workload, slo: SLO, engine: Engine,
                       dtypes: DTypes, fw: str | None, usd_per_h: dict[str, float],
                       kv_cache: KVCacheSpec | None = None) -> PoolMetrics:
    hw = machine_hw(b.pool.hardware, fw, b.pool.power_cap)
    lay = b.pool.layout
    _layout_of(model, b.pool, hw, f"baseline {b.name}")
    _no_cp(b.pool, f"baseline {b.name}")
    workload, cache = with_pool_cache(model, workload, kv_cache, b.pool, hw, dtypes)
    stats = length_stats(workload)
    c = serving_curve(model, hw, lay, dtypes, engine, stats, workload.arrival.scv)
    upper = float(np.nanmax(np.where(c.rho < 1, c.rate, np.nan))) * b.pool.count
    rates = _rate_grid(upper)
    per = rates / b.pool.count
    m = {}
    for key, d in (("ttft_s", c.ttft), ("tpot_s", c.tpot), ("e2e_s", c.e2e)):
        m[key] = {p: at_rates(c, d[p], per) for p in (*PERCENTILES, "mean")}
    ok, named = _check(slo, m, len(rates))
    ok &= np.isfinite(m["ttft_s"]["mean"])
    rate, i, binding = _max_rate(rates, ok, named, [])
    watts = b.pool.count * b.pool.devices * float(at_rates(c, c.power_w, rate / b.pool.count)) if i >= 0 else np.nan
    return _metrics(b.name, "colocated", f"{b.pool.count} x {hw.name} {b.pool.label}", b.pool.count * b.pool.devices,
                    rate, stats, m, i, binding, _usd(b.pool, hw, usd_per_h), _power(b.pool, hw), watts
                    ).model_copy(update={"cache": cache})


def _layout_of(model: ModelSpec, pool: Pool, hw: HardwareProfile, role: str) -> None:
    """``check_layout`` of a pool's machine, its error naming the pool."""
    try:
        check_layout(model, pool.layout, hw)
    except InputError as e:
        raise InputError(f"{role}: {e}") from None


def _no_cp(p: Pool, role: str) -> None:
    if p.cp != 1:
        raise InputError(f"cp applies to prompt pools only (context-parallel prefill); the {role} has cp={p.cp}")


def _usd(p: Pool, hw: HardwareProfile, usd_per_h: dict[str, float]) -> float:
    base = p.hardware
    per = usd_per_h.get(base, hw.price.rent.value if hw.price.rent else float("nan"))
    return p.count * p.devices * per


def _power(p: Pool, hw: HardwareProfile) -> float:
    return p.count * p.devices * hw.power.tdp.value


def _metrics(name, kind, machines, accelerators, rate, stats, m, i, binding, usd, power,
             avg_w=float("nan")) -> PoolMetrics:
    pick = (lambda d: {p: float(v[i]) for p, v in d.items()}) if i >= 0 else (lambda d: {p: float("nan") for p in d})
    return PoolMetrics(name=name, kind=kind, machines=machines, accelerators=accelerators, max_rate=rate,
                       output_tokens_per_s=rate * stats.mean_output, usd_per_h=usd, provisioned_power_w=power,
                       ttft_s=pick(m["ttft_s"]), tpot_s=pick(m["tpot_s"]), e2e_s=pick(m["e2e_s"]), binding=binding,
                       avg_power_w=avg_w, output_tokens_per_joule=rate * stats.mean_output / avg_w)


def kv_transfer_s(model: ModelSpec, spec: SplitwiseSpec, prompt_hw: HardwareProfile, token_hw: HardwareProfile,
                  d: Candidate, prompt_tokens: np.ndarray, prefill_s: np.ndarray, kv_dtype: DType) -> tuple:
    """(exposed transfer seconds, bytes) of shipping each prompt's KV cache to a token machine."""
    nbytes = kv_cache_bytes_per_token(model, kv_dtype) * np.asarray(prompt_tokens, float)
    bw = _link_bytes_per_s(spec, prompt_hw, token_hw, d)
    full = nbytes / bw + prompt_hw.scale_out.latency.value
    exposed = spec.transfer_overhead_s
    if exposed is None:
        exposed = pair_overhead_s((d.prompt.hardware, prompt_hw), (d.token.hardware, token_hw))
    layered = np.maximum(full - prefill_s, 0) + nbytes / model.num_layers / bw + exposed
    serial = (spec.kv_transfer == "serialized") | (np.asarray(prompt_tokens) < spec.serialize_below_tokens)
    return np.where(serial, full, layered), nbytes


def _prompt_fits(model: ModelSpec, hw: HardwareProfile, pool: Pool, dtypes: DTypes, tokens: float,
                 name: str) -> None:
    """A prompt machine holds the weights and the KV cache of the longest prompt it prefills (on
    one attention replica's devices; a context-parallel machine spreads it over ``cp`` instances)
    until the cache is shipped; raise ``InfeasibleError`` otherwise."""
    lay = pool.layout
    free = float(np.ravel(free_kv_bytes_device(model, hw, lay, dtypes))[0])
    need = (float(np.ravel(kv_bytes_per_token_device(model, lay, dtypes.kv, hw))[0]) * tokens / pool.cp
            + float(np.ravel(state_bytes_per_sequence_device(model, lay, dtypes.kv, hw))[0]))
    if free < need:
        room = f"{free / 1e9:.1f} GB free" if free > 0 else f"the weights alone exceed it by {-free / 1e9:.0f} GB"
        raise InfeasibleError(f"{name}: a prompt machine ({hw.name} {pool.label}) has no room beside the weights for "
                              f"the KV cache of the workload's longest prompt ({tokens:,.0f} tokens, ~{need / 1e9:.1f} "
                              f"GB per device; {room}); use more devices per prompt machine")


def _link_bytes_per_s(spec: SplitwiseSpec, prompt_hw, token_hw, d: Candidate) -> float:
    if spec.link_gbps is not None:
        return spec.link_gbps * 1e9 / 8
    return link_bytes_per_s(prompt_hw, d.prompt.devices, token_hw, d.token.devices)


def evaluate_splitwise(model: ModelSpec, d: Candidate, spec: SplitwiseSpec, workload: Workload, slo: SLO,
                       engine: Engine, dtypes: DTypes, usd_per_h: dict[str, float],
                       kv_cache: KVCacheSpec | None = None) -> PoolMetrics:
    php = machine_hw(d.prompt.hardware, spec.framework, d.prompt.power_cap)
    thw = machine_hw(d.token.hardware, spec.framework, d.token.power_cap)
    workload, cache = with_pool_cache(model, workload, kv_cache, d.prompt, php, dtypes)
    stats = length_stats(workload)
    play, tlay = d.prompt.layout, d.token.layout
    _layout_of(model, d.prompt, php, f"{d.name} prompt pool")
    _layout_of(model, d.token, thw, f"{d.name} token pool")
    _no_cp(d.token, f"token pool of {d.name}")
    if spec.mixed_pool:
        _no_cp(d.prompt, f"mixed pool of {d.name}")
    i, o, w = workload.joint_support()
    _prompt_fits(model, php, d.prompt, dtypes, float(i.max()), d.name)
    support, s, pre_w = prompt_service(model, php, play, dtypes, workload, d.prompt.cp)
    xfer, nbytes = kv_transfer_s(model, spec, php, thw, d, support, s, dtypes.kv)
    es, es2 = float(s.mean()), float((s**2).mean())
    cs2 = es2 / es**2 - 1
    # token pool: decode-only curve per token instance
    dec_engine = engine.model_copy(update={"chunked_prefill": True})
    dstats = stats.model_copy(update={"mean_prefill": 1e-9, "second_prefill": 1e-18})
    c = serving_curve(model, thw, tlay, dtypes, dec_engine, dstats, workload.arrival.scv)
    if not np.isfinite(c.n[0, 0]):
        need = kv_cache_bytes_per_token(model, dtypes.kv) * (stats.mean_decode_ctx) / 1e9
        raise InfeasibleError(f"{d.name}: a token machine ({thw.name} {d.token.label}) has no room for the KV cache of "
                              f"one request (~{need:.1f} GB) beside the weights; use more devices per token machine")
    token_cap = float(np.nanmax(c.rate)) * d.token.count
    prompt_cap = d.prompt.count / es
    rates = _rate_grid(min(token_cap, prompt_cap))
    wait, rho = multi_server_wait(rates, d.prompt.count, es, cs2, workload.arrival.scv)
    per_tok = rates / d.token.count
    tpot = {p: at_rates(c, c.tpot[p], per_tok) for p in (*PERCENTILES, "mean")}
    # a token instance holds at most n_max sequences' KV: it is an n_max-server queue whose service
    # is a request's decode (O x TPOT); arrivals beyond it wait for KV space (Erlang C)
    o_mean, o_scv = float(w @ o), float(w @ o**2) / float(w @ o) ** 2 - 1
    slots = np.floor(float(c.n_max[0]))
    kv_wait, kv_rho = multi_server_wait(per_tok, slots, o_mean * tpot["mean"], o_scv, workload.arrival.scv)
    kv_wait = np.where(np.isfinite(tpot["mean"]), kv_wait, np.inf)
    for p in PERCENTILES:                       # the wait stretches the gaps of the requests that waited
        tpot[p] = tpot[p] + kv_wait / max(stats.mean_output - 1, 1) * {"p50": 0.5, "p90": 1.5, "p99": 3.0}[p]
    ttft = prompt_ttft(wait, rho, s)
    e2e = {}
    for k, qv in zip(PERCENTILES, (0.5, 0.9, 0.99), strict=True):
        xq = float(np.quantile(xfer, qv))
        first = ttft[k] if k == "p50" else ttft["mean"]     # as in serving.queueing
        e2e[k] = first + xq + kv_wait + (stats.output_quantiles[PERCENTILES.index(k)] - 1) * tpot[k]
    e2e["mean"] = ttft["mean"] + float(xfer.mean()) + kv_wait + (stats.mean_output - 1) * tpot["mean"]
    m = {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e}
    ok, named = _check(slo, m, len(rates))
    mean_bytes = float((nbytes).mean())
    bw = _link_bytes_per_s(spec, php, thw, d)
    extra = [("prompt pool capacity", rho < 1),
             ("token pool capacity (KV memory / batch)", np.isfinite(tpot["mean"]) & (kv_rho < 1)),
             ("kv_transfer_bandwidth (prompt NIC)", rates / d.prompt.count * mean_bytes < bw),
             ("kv_transfer_bandwidth (token NIC)", rates / d.token.count * mean_bytes < bw)]
    rate, idx, binding = _max_rate(rates, ok, named, extra)
    watts = np.nan
    if idx >= 0:   # prompt machines busy a fraction rho at prefill power, token machines at their decode power
        p_idle = php.power.idle.value
        watts = (d.prompt.count * d.prompt.devices * (p_idle + float(rho[idx]) * (pre_w - p_idle))
                 + d.token.count * d.token.devices * float(at_rates(c, c.power_w, rate / d.token.count)))
    cp = f" cp{d.prompt.cp}" if d.prompt.cp > 1 else ""
    machines = (f"{d.prompt.count} x {php.name} {d.prompt.label}{cp} (prompt) + {d.token.count} x {thw.name} "
                f"{d.token.label} (token)")
    acc = d.prompt.count * d.prompt.devices + d.token.count * d.token.devices
    usd = _usd(d.prompt, php, usd_per_h) + _usd(d.token, thw, usd_per_h)
    power = _power(d.prompt, php) + _power(d.token, thw)
    row = _metrics(d.name, "splitwise", machines, acc, rate, stats, m, idx, binding, usd, power, watts)
    if spec.mixed_pool:
        from planner.designs.mixed_pool import evaluate_mixed

        row = evaluate_mixed(model, d, spec.model_copy(update={"mixed_pool": False}), workload, slo, engine, dtypes,
                             usd_per_h, row)[0]
    return row.model_copy(update={"cache": cache})


class SplitwiseResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: Literal["splitwise"] = "splitwise"
    model: str
    slo: SLO
    rows: list[PoolMetrics]
    ratios: list[dict]               # each design against each baseline
    verdicts: list[str] = []         # does disaggregation pay against the baselines, and why
    pareto: list[dict] = []          # searched splits not dominated in (throughput, cost, power)
    certainty: dict | None = None      # sizes at P50 and at the scenario's confidence (planner.confidence)


def plan_splitwise(model: ModelSpec, spec: SplitwiseSpec, workload: Workload, slo: SLO, engine: Engine,
                   usd_per_h: dict[str, float], name: str, kv_cache: KVCacheSpec | None = None) -> SplitwiseResult:
    """Every baseline and design at its largest SLO-meeting rate; a session workload's hit rate is
    each row's own, from the KV tiers of its prefilling machines at the workload's session rate."""
    kv = DType.bf16 if spec.weight_dtype.bytes < 2 else spec.weight_dtype
    dtypes = DTypes(weight=spec.weight_dtype, kv=kv)
    stats = length_stats(workload)
    if spec.slowdown_slo is not None:
        slo = slowdown_slo(model, spec.slowdown_slo, stats, dtypes, spec.framework)
    rows = [evaluate_colocated(model, b, workload, slo, engine, dtypes, spec.framework, usd_per_h, kv_cache)
            for b in spec.baselines]
    designs = list(spec.designs)
    verdicts, front = [], []
    if spec.search is not None:
        from planner.designs.splitwise_search import search_splits

        found, verdicts, front = search_splits(model, spec, workload, slo, engine, dtypes, usd_per_h, rows, kv_cache)
        designs += found
    rows += [evaluate_splitwise(model, d, spec, workload, slo, engine, dtypes, usd_per_h, kv_cache) for d in designs]
    ratios = []
    for d in rows[len(spec.baselines):]:
        for b in rows[:len(spec.baselines)]:
            ratios.append(dict(design=d.name, baseline=b.name,
                               throughput=d.max_rate / b.max_rate if b.max_rate > 0 else float("inf"),
                               cost=d.usd_per_h / b.usd_per_h, power=d.provisioned_power_w / b.provisioned_power_w))
    return SplitwiseResult(scenario=name, model=model.name, slo=slo, rows=rows, ratios=ratios, verdicts=verdicts,
                           pareto=front)


class SplitwiseSimCheck(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str
    rate: float
    requests: int
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    e2e_s: dict[str, float]
    requests_per_s: float
    meets_slo: bool
    violations: list[str]


def simulate_design(model: ModelSpec, d: Candidate, spec: SplitwiseSpec, workload: Workload, slo: SLO,
                    engine: Engine, rate: float, requests: int, seed: int,
                    kv_cache: KVCacheSpec | None = None) -> SplitwiseSimCheck:
    """Run the discrete-event simulator on design ``d`` at ``rate`` requests/s: JSQ on pending
    tokens over the prompt and the token machines; with ``spec.mixed_pool`` the machines take the
    roles the analytic mixed pool settles on (planner.designs.mixed_pool)."""
    from planner.serving.simulate_pools import Machine, simulate_pools
    from planner.serving.slo import judge

    _no_cp(d.prompt, "simulated prompt pool (the simulator does not model context parallelism)")
    kv = DType.bf16 if spec.weight_dtype.bytes < 2 else spec.weight_dtype
    dtypes = DTypes(weight=spec.weight_dtype, kv=kv)
    workload = with_pool_cache(model, workload, kv_cache, d.prompt,
                               machine_hw(d.prompt.hardware, spec.framework, d.prompt.power_cap), dtypes)[0]
    pools, prompt_n, token_n, mixed_n, share = _sim_roles(model, d, spec, workload, slo, engine, dtypes)
    hws = [machine_hw(p.hardware, spec.framework, p.power_cap) for p in pools]
    lays = [p.layout for p in pools]

    def machines(counts):
        return [Machine(hws[k], lays[k], k) for k, c in enumerate(counts) for _ in range(c)]

    def transfer(kp, kt, tokens, prefill_s):
        pair = d.model_copy(update={"prompt": pools[kp], "token": pools[kt]})
        return kv_transfer_s(model, spec, hws[kp], hws[kt], pair, tokens, prefill_s, kv)[0]

    w = workload.with_rate(rate)
    a, i, o = w.sample(requests, seed)
    r = simulate_pools(model, dtypes, engine.model_copy(update={"chunked_prefill": True}), a, i, o, transfer,
                       machines(prompt_n), machines(token_n), machines(mixed_n), share, engine,
                       prefix_hit=w.sample_cache(requests, seed)[0], seed=seed)
    measured, _, bad = judge(slo, r.ttft_s, r.tpot_s, r.e2e_s, r.output_len)
    return SplitwiseSimCheck(name=d.name, rate=rate, requests=requests, ttft_s=measured["ttft_s"],
                             tpot_s=measured["tpot_s"], e2e_s=measured["e2e_s"], requests_per_s=r.requests_per_s,
                             meets_slo=not bad, violations=bad)


def _sim_roles(model, d: Candidate, spec: SplitwiseSpec, workload, slo, engine, dtypes):
    """(pool of each machine type, prompt / token / mixed machines per type, share of requests
    served on mixed machines): the design's own pools, or the mixed pool's settled roles."""
    if not spec.mixed_pool:
        same = (d.prompt.hardware, d.prompt.tp, d.prompt.ep, d.prompt.pp, d.prompt.power_cap) == \
            (d.token.hardware, d.token.tp, d.token.ep, d.token.pp, d.token.power_cap)
        if same:
            return [d.prompt], [d.prompt.count], [d.token.count], [0], 0.0
        return [d.prompt, d.token], [d.prompt.count, 0], [0, d.token.count], [0, 0], 0.0
    from planner.designs.mixed_pool import best_roles, machine_types

    fixed = spec.model_copy(update={"mixed_pool": False})
    types, _, _ = machine_types(model, d, fixed, workload, slo, engine, dtypes, {})
    roles = best_roles(types)
    pools = [d.prompt.model_copy(update={"hardware": t.hardware, "tp": t.tp, "ep": t.ep, "pp": t.pp,
                                         "power_cap": t.power_cap,
                                         "count": t.count}) for t in types]
    mixed_rate = sum(t.mixed_rate * n for t, n in zip(types, roles.mixed, strict=True))
    return pools, list(roles.prompt), list(roles.token), list(roles.mixed), mixed_rate / max(roles.rate, 1e-300)
