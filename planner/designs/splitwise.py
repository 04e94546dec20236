"""Splitwise design (Patel et al., ISCA 2024): a prompt pool and a token pool, possibly of different
hardware or power caps; each request is prefilled on a prompt machine, which produces the first
token, and its KV cache is shipped over the scale-out network to a token machine that decodes it.

The plan: every colocated baseline and design (listed or found by ``splitwise_search``) at its
largest SLO-meeting rate, the ratios between them and whether disaggregation pays; Splitwise's
mixed pool (``mixed_pool``) and the discrete-event check (``serving.simulate_pools``). The
specification is ``splitwise_spec``; the pools as queues, ``splitwise_pools``. The names other
modules import from here (specs, ``slowdown_slo``, ``evaluate_colocated``) are re-exported.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from planner.catalog.dtypes import DType
from planner.catalog.model import ModelSpec
from planner.designs.kv_cache import KVCacheSpec
from planner.designs.mixed_pool import best_roles, evaluate_mixed, machine_key, machine_types, pool_of
from planner.designs.pool_physics import engine_named, machine_hw
from planner.designs.splitwise_pools import (
    PoolMetrics,
    evaluate_colocated,
    evaluate_pools,
    kv_transfer_s,
    no_cp,
    slowdown_slo,
    with_pool_cache,
)
from planner.designs.splitwise_search import search_splits
from planner.designs.splitwise_spec import (
    Baseline,
    Candidate,
    Pool,
    SlowdownReference,
    SplitSearch,
    SplitwiseSpec,
)
from planner.perf.ops import DTypes
from planner.serving.batching import Engine
from planner.serving.slo import SLO
from planner.serving.workload import Workload, length_stats

__all__ = ["Baseline", "Candidate", "Pool", "PoolMetrics", "SlowdownReference", "SplitSearch", "SplitwiseResult",
           "SplitwiseSimCheck", "SplitwiseSpec", "evaluate_colocated", "evaluate_splitwise", "plan_splitwise",
           "simulate_design", "slowdown_slo"]


def evaluate_splitwise(model: ModelSpec, d: Candidate, spec: SplitwiseSpec, workload: Workload, slo: SLO,
                       engine: Engine, dtypes: DTypes, usd_per_h: dict[str, float],
                       kv_cache: KVCacheSpec | None = None) -> PoolMetrics:
    """Design ``d`` at its largest SLO-meeting rate: its own pools (``splitwise_pools.evaluate_pools``)
    and, with ``spec.mixed_pool``, the rate the mixed pool reaches by borrowing machines across them."""
    spec = engine_named(spec, engine)
    row = evaluate_pools(model, d, spec, workload, slo, engine, dtypes, usd_per_h, kv_cache)
    if not spec.mixed_pool:
        return row
    return evaluate_mixed(model, d, spec.model_copy(update={"mixed_pool": False}), workload, slo, engine, dtypes,
                          usd_per_h, row)[0]


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
    spec = engine_named(spec, engine)
    kv = DType.bf16 if spec.weight_dtype.bytes < 2 else spec.weight_dtype
    dtypes = DTypes(weight=spec.weight_dtype, kv=kv)
    stats = length_stats(workload)
    if spec.slowdown_slo is not None:
        slo = slowdown_slo(model, spec.slowdown_slo, stats, dtypes, spec.framework)
    rows = [evaluate_colocated(model, b, workload, slo, engine, dtypes, spec.framework, usd_per_h, kv_cache)
            for b in spec.baselines]
    designs = list(spec.designs)
    verdicts, front, found = [], [], []
    if spec.search is not None:
        found, front = search_splits(model, spec, workload, slo, engine, dtypes, usd_per_h, rows, kv_cache)
        designs += found
    rows += [evaluate_splitwise(model, d, spec, workload, slo, engine, dtypes, usd_per_h, kv_cache) for d in designs]
    if spec.search is not None:
        verdicts = _verdicts(rows[:len(spec.baselines)], rows[len(rows) - len(found):], spec.search.budgets)
    ratios = []
    for d in rows[len(spec.baselines):]:
        for b in rows[:len(spec.baselines)]:
            ratios.append(dict(design=d.name, baseline=b.name,
                               throughput=d.max_rate / b.max_rate if b.max_rate > 0 else float("inf"),
                               cost=d.usd_per_h / b.usd_per_h, power=d.provisioned_power_w / b.provisioned_power_w))
    return SplitwiseResult(scenario=name, model=model.name, slo=slo, rows=rows, ratios=ratios, verdicts=verdicts,
                           pareto=front)


def _verdicts(baselines: list[PoolMetrics], found: list[PoolMetrics], budgets: list[str]) -> list[str]:
    """Whether the best searched split serves more than the best baseline within the budget."""
    if not found:
        return ["no split of the searched pairs within the budget meets the SLOs: loosen the SLOs, raise "
                "search.limit, or search other machine pairs"]
    best_base = max(baselines, key=lambda b: b.max_rate, default=None)
    if best_base is None:
        return []
    top = max(found, key=lambda r: r.max_rate)
    ratio = top.max_rate / best_base.max_rate if best_base.max_rate > 0 else float("inf")
    if ratio > 1.0:
        return [f"disaggregation pays: {top.name} serves {ratio:.2f}x the rate of {best_base.name} "
                f"within the same {' and '.join(budgets)} budget"]
    return [f"disaggregation does not pay: the best split ({top.name}, {top.max_rate:.3g} req/s, "
            f"limited by {top.binding}) serves {ratio:.2f}x {best_base.name} "
            f"({best_base.max_rate:.3g} req/s); keep prefill and decode together"]


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

    no_cp(d.prompt, "simulated prompt pool (the simulator does not model context parallelism)")
    kv = DType.bf16 if spec.weight_dtype.bytes < 2 else spec.weight_dtype
    dtypes = DTypes(weight=spec.weight_dtype, kv=kv)
    prompt_hw = machine_hw(d.prompt.hardware, spec.framework, d.prompt.power_cap, engine.memory_fraction,
                           engine.kv_pool_tokens)
    workload = with_pool_cache(model, workload, kv_cache, d.prompt, prompt_hw, dtypes)[0]
    pools, prompt_n, token_n, mixed_n, share = _sim_roles(model, d, spec, workload, slo, engine, dtypes)
    hws = [machine_hw(p.hardware, spec.framework, p.power_cap, engine.memory_fraction, engine.kv_pool_tokens)
           for p in pools]
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
        if machine_key(d.prompt) == machine_key(d.token):
            return [d.prompt], [d.prompt.count], [d.token.count], [0], 0.0
        return [d.prompt, d.token], [d.prompt.count, 0], [0, d.token.count], [0, 0], 0.0
    fixed = spec.model_copy(update={"mixed_pool": False})
    types, _, _ = machine_types(model, d, fixed, workload, slo, engine, dtypes, {})
    roles = best_roles(types)
    pools = [pool_of(d.prompt, t.key, t.count) for t in types]
    mixed_rate = sum(t.mixed_rate * n for t, n in zip(types, roles.mixed, strict=True))
    return pools, list(roles.prompt), list(roles.token), list(roles.mixed), mixed_rate / max(roles.rate, 1e-300)

