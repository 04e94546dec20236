"""Splitwise's pools as queues (Patel et al., ISCA 2024): a prompt pool and a token pool, possibly
of different hardware or power caps; each request is prefilled on a prompt machine, which produces
the first token, and its KV cache is shipped over the scale-out network to a token machine that
decodes it. A machine is ``max(tp, ep) x pp`` devices (``splitwise_spec.Pool``).

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

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from planner.catalog.dtypes import DType
from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.designs.kv_cache import CacheReport, KVCacheSpec, pool_cache
from planner.designs.kv_link import link_bytes_per_s, pair_overhead_s
from planner.designs.pool_physics import machine_hw, prompt_service, prompt_ttft
from planner.designs.splitwise_spec import Baseline, Candidate, Pool, SlowdownReference, SplitwiseSpec
from planner.errors import InfeasibleError, InputError
from planner.perf.cost import device_rate
from planner.perf.memory import (
    exact_pool_refusal,
    free_kv_bytes_device,
    kv_bytes_per_token_device,
    kv_cache_bytes_per_token,
    pool_tokens,
    state_bytes_per_sequence_device,
)
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout, check_layout
from planner.serving.batching import Engine, iteration
from planner.serving.queueing import at_rates, multi_server_wait, serving_curve
from planner.serving.sessions import SessionWorkload
from planner.serving.slo import PERCENTILES, SLO, Target
from planner.serving.workload import LengthStats, Workload, length_stats


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
    check_layout(model, lay, hw)
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
    hw = machine_hw(b.pool.hardware, fw, b.pool.power_cap, engine.memory_fraction, engine.kv_pool_tokens)
    lay = b.pool.layout
    _layout_of(model, b.pool, hw, f"baseline {b.name}")
    no_cp(b.pool, f"baseline {b.name}")
    workload, cache = with_pool_cache(model, workload, kv_cache, b.pool, hw, dtypes)
    stats = length_stats(workload)
    c = serving_curve(model, hw, lay, dtypes, engine, stats, workload.arrival.scv)
    stable = np.where(c.rho < 1, c.rate, np.nan)
    upper = (float(np.nanmax(stable)) if np.isfinite(stable).any() else np.nan) * b.pool.count   # NaN: none
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


def no_cp(p: Pool, role: str) -> None:
    if p.cp != 1:
        raise InputError(f"cp applies to prompt pools only (context-parallel prefill); the {role} has cp={p.cp}")


def _usd(p: Pool, hw: HardwareProfile, usd_per_h: dict[str, float]) -> float:
    return p.count * p.devices * device_rate(usd_per_h, p.hardware, hw)


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
    bw = kv_link_bytes_per_s(spec, prompt_hw, token_hw, d)
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
    per_token = float(np.ravel(kv_bytes_per_token_device(model, lay, dtypes.kv, hw))[0])
    state = float(np.ravel(state_bytes_per_sequence_device(model, lay, dtypes.kv, hw))[0])
    need = per_token * tokens / pool.cp + state
    if refusal := exact_pool_refusal(hw, free, per_token):
        raise InfeasibleError(f"{name}: a prompt machine ({hw.name} {pool.label}): {refusal}")
    cap = pool_tokens(hw)
    if free >= need and tokens / pool.cp > cap:
        raise InfeasibleError(f"{name}: a prompt machine ({hw.name} {pool.label}) holds at most {cap:,.0f} tokens in "
                              f"its KV pool (kv_pool_tokens), fewer than the workload's longest prompt "
                              f"({tokens / pool.cp:,.0f} tokens per instance); raise the cap")
    if free < need:
        room = f"{free / 1e9:.1f} GB free" if free > 0 else f"the weights alone exceed it by {-free / 1e9:.0f} GB"
        raise InfeasibleError(f"{name}: a prompt machine ({hw.name} {pool.label}) has no room beside the weights for "
                              f"the KV cache of the workload's longest prompt ({tokens:,.0f} tokens, ~{need / 1e9:.1f} "
                              f"GB per device; {room}); use more devices per prompt machine")


def kv_link_bytes_per_s(spec: SplitwiseSpec, prompt_hw, token_hw, d: Candidate) -> float:
    """Bytes/s a prompt machine of ``d`` ships KV to a token machine at: the spec's ``link_gbps``, or
    the slower side's NICs (``kv_link.link_bytes_per_s``)."""
    if spec.link_gbps is not None:
        return spec.link_gbps * 1e9 / 8
    return link_bytes_per_s(prompt_hw, d.prompt.devices, token_hw, d.token.devices)


@dataclass(frozen=True)
class SplitPhysics:
    """What a design's pools do per machine, whatever their counts: the prompt service times, the
    KV transfer, the token machine's decode curve (``evaluate_pools`` at any counts reuses it)."""

    php: HardwareProfile
    thw: HardwareProfile
    workload: Workload
    cache: CacheReport | None
    stats: LengthStats
    s: np.ndarray               # prompt service time of each supported length
    pre_w: float                # a prompt machine's draw while prefilling
    xfer: np.ndarray            # exposed KV transfer per length
    nbytes: np.ndarray          # KV bytes shipped per length
    curve: Any                  # the token instance's decode-only serving curve
    o_mean: float
    o_scv: float
    link_bytes_per_s: float


def split_physics(model: ModelSpec, d: Candidate, spec: SplitwiseSpec, workload: Workload, engine: Engine,
                 dtypes: DTypes, kv_cache: KVCacheSpec | None = None) -> SplitPhysics:
    """``SplitPhysics`` of design ``d``: depends on its pools' counts only through a session
    workload's prefix cache (held by the prompt machines), so a search over counts of another
    workload computes it once."""
    php = machine_hw(d.prompt.hardware, spec.framework, d.prompt.power_cap, engine.memory_fraction,
                     engine.kv_pool_tokens)
    thw = machine_hw(d.token.hardware, spec.framework, d.token.power_cap, engine.memory_fraction,
                     engine.kv_pool_tokens)
    workload, cache = with_pool_cache(model, workload, kv_cache, d.prompt, php, dtypes)
    stats = length_stats(workload)
    play, tlay = d.prompt.layout, d.token.layout
    _layout_of(model, d.prompt, php, f"{d.name} prompt pool")
    _layout_of(model, d.token, thw, f"{d.name} token pool")
    no_cp(d.token, f"token pool of {d.name}")
    if spec.mixed_pool:
        no_cp(d.prompt, f"mixed pool of {d.name}")
    i, o, w = workload.joint_support()
    _prompt_fits(model, php, d.prompt, dtypes, float(i.max()), d.name)
    support, s, pre_w = prompt_service(model, php, play, dtypes, workload, d.prompt.cp)
    xfer, nbytes = kv_transfer_s(model, spec, php, thw, d, support, s, dtypes.kv)
    # token pool: decode-only curve per token instance
    dec_engine = engine.model_copy(update={"chunked_prefill": True})
    dstats = stats.model_copy(update={"mean_prefill": 1e-9, "second_prefill": 1e-18})
    c = serving_curve(model, thw, tlay, dtypes, dec_engine, dstats, workload.arrival.scv)
    if not np.isfinite(c.n[0, 0]):
        need = kv_cache_bytes_per_token(model, dtypes.kv) * (stats.mean_decode_ctx) / 1e9
        raise InfeasibleError(f"{d.name}: a token machine ({thw.name} {d.token.label}) has no room for the KV cache of "
                              f"one request (~{need:.1f} GB) beside the weights; use more devices per token machine")
    o_mean, o_scv = float(w @ o), float(w @ o**2) / float(w @ o) ** 2 - 1
    return SplitPhysics(php, thw, workload, cache, stats, s, pre_w, xfer, nbytes, c, o_mean, o_scv,
                       kv_link_bytes_per_s(spec, php, thw, d))


def reusable_physics(workload: Workload) -> bool:
    """Whether ``split_physics`` holds for every pool count: not for a session workload, whose
    prefix cache grows with the prompt machines holding it."""
    return not isinstance(workload, SessionWorkload)


def evaluate_pools(model: ModelSpec, d: Candidate, spec: SplitwiseSpec, workload: Workload, slo: SLO,
                   engine: Engine, dtypes: DTypes, usd_per_h: dict[str, float],
                   kv_cache: KVCacheSpec | None = None, physics: SplitPhysics | None = None) -> PoolMetrics:
    """Design ``d`` at its largest SLO-meeting rate; ``physics`` (``split_physics`` of a design
    differing from ``d`` in its counts only; ``reusable_physics`` says when the counts leave it
    unchanged) skips recomputing it."""
    if physics is None:
        physics = split_physics(model, d, spec, workload, engine, dtypes, kv_cache)
    php, thw, stats, s, pre_w, xfer, c = physics.php, physics.thw, physics.stats, physics.s, physics.pre_w, \
        physics.xfer, physics.curve
    es, es2 = float(s.mean()), float((s**2).mean())
    cs2 = es2 / es**2 - 1
    scv = physics.workload.arrival.scv
    token_cap = float(np.nanmax(c.rate)) * d.token.count
    prompt_cap = d.prompt.count / es
    rates = _rate_grid(min(token_cap, prompt_cap))
    wait, rho = multi_server_wait(rates, d.prompt.count, es, cs2, scv)
    per_tok = rates / d.token.count
    tpot = {p: at_rates(c, c.tpot[p], per_tok) for p in (*PERCENTILES, "mean")}
    # a token instance holds at most n_max sequences' KV: it is an n_max-server queue whose service
    # is a request's decode (O x TPOT); arrivals beyond it wait for KV space (Erlang C)
    slots = np.floor(float(c.n_max[0]))
    kv_wait, kv_rho = multi_server_wait(per_tok, slots, physics.o_mean * tpot["mean"], physics.o_scv, scv)
    kv_wait = np.where(np.isfinite(tpot["mean"]), kv_wait, np.inf)
    for p in PERCENTILES:                       # the wait stretches the gaps of the requests that waited
        tpot[p] = tpot[p] + kv_wait / max(stats.mean_output - 1, 1) * {"p50": 0.5, "p90": 1.5, "p99": 3.0}[p]
    ttft = prompt_ttft(wait, rho, s)
    e2e = {}
    with np.errstate(invalid="ignore"):     # one-token outputs: 0 x an unstable (inf) TPOT is NaN, not met
        for k, qv in zip(PERCENTILES, (0.5, 0.9, 0.99), strict=True):
            xq = float(np.quantile(xfer, qv))
            first = ttft[k] if k == "p50" else ttft["mean"]     # as in serving.queueing
            e2e[k] = first + xq + kv_wait + (stats.output_quantiles[PERCENTILES.index(k)] - 1) * tpot[k]
        e2e["mean"] = ttft["mean"] + float(xfer.mean()) + kv_wait + (stats.mean_output - 1) * tpot["mean"]
    m = {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e}
    ok, named = _check(slo, m, len(rates))
    mean_bytes = float((physics.nbytes).mean())
    bw = physics.link_bytes_per_s
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
    return row.model_copy(update={"cache": physics.cache})
