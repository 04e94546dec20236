"""Splitwise pool-size search: the best (prompt, token) machine counts per hardware pair and
parallel degrees (TP, and EP for MoE models) within a cost / power / machines budget (or the
least budget for a target rate), the Pareto front of throughput, cost and provisioned power, and
the plan (``splitwise.plan_splitwise``) then says whether disaggregation pays against the
baselines."""

from __future__ import annotations

import numpy as np

from planner.catalog.model import ModelSpec
from planner.designs.kv_cache import KVCacheSpec
from planner.designs.pool_physics import machine_hw
from planner.designs.splitwise_pools import PoolMetrics, evaluate_pools, reusable_physics, split_physics
from planner.designs.splitwise_spec import Candidate, Pool, SplitwiseSpec
from planner.errors import InfeasibleError, InputError
from planner.perf.cost import device_rate
from planner.perf.ops import DTypes
from planner.perf.parallel import check_layout
from planner.search import pareto_front
from planner.serving.batching import Engine
from planner.serving.slo import SLO
from planner.serving.workload import Workload


def search_splits(model: ModelSpec, spec: SplitwiseSpec, workload: Workload, slo: SLO, engine: Engine,
                  dtypes: DTypes, usd_per_h: dict[str, float], baselines: list[PoolMetrics],
                  kv_cache: KVCacheSpec | None = None) -> tuple[list[Candidate], list[dict]]:
    """(the best (prompt, token) machine counts per hardware pair and degrees within the budget,
    the Pareto front of every split tried).

    The prompt pool's SLO-meeting capacity depends only on its count and the token pool's only on
    its count, so each is evaluated once per count and every split is the minimum of the two (the
    chosen split is then re-evaluated jointly, E2E included)."""
    sr = spec.search
    assert sr is not None
    limits = _limits(sr, baselines)
    found, points = [], []
    degrees = [(tp, ep) for tp in sr.tp for ep in sr.ep]
    for prompt_hw, token_hw in sr.pairs:
        for cap in sr.token_power_caps:
            for deg_p in degrees:
                for deg_t in degrees:
                    prompt = Pool(hardware=prompt_hw, tp=deg_p[0], ep=deg_p[1], count=1)
                    token = Pool(hardware=token_hw, tp=deg_t[0], ep=deg_t[1], count=1, power_cap=cap)
                    best, pts = _best_split(model, spec, workload, slo, engine, dtypes, usd_per_h, prompt, token,
                                            sr, limits, kv_cache)
                    points += pts
                    if best is not None:
                        found.append(best)
    return found, _pareto(points)


# most instances one pool of a searched split may hold (each prompt-pool size is evaluated)
MAX_POOL_MACHINES = 1000


def _limits(sr, baselines: list[PoolMetrics]) -> dict[str, float]:
    """{budget kind: limit}, from search.limit and/or the named baseline (8 accelerators a machine)."""
    given = sr.limit if isinstance(sr.limit, dict) else ({sr.budgets[0]: sr.limit} if sr.limit is not None else {})
    base = None
    if sr.of_baseline is not None:
        base = next((b for b in baselines if b.name == sr.of_baseline), None)
        if base is None:
            raise InfeasibleError(f"search.of_baseline {sr.of_baseline!r} is not one of the baselines")
    limits = {}
    for kind in sr.budgets:
        if kind in given:
            limits[kind] = float(given[kind])
        elif base is not None:
            limits[kind] = {"cost": base.usd_per_h, "power": base.provisioned_power_w,
                            "machines": base.accelerators / 8}[kind]
        else:
            raise InfeasibleError(f"search needs a {kind} budget: give search.limit.{kind} or search.of_baseline")
    return limits


def _units(kind: str, usd_per_h: dict[str, float]):
    """Budget used by one machine of ``n`` accelerators, per kind ($/h, W of TDP, machines of 8)."""
    return {"cost": lambda hw, name, n: n * device_rate(usd_per_h, name, hw),
            "power": lambda hw, name, n: n * hw.power.tdp.value,
            "machines": lambda hw, name, n: n / 8}[kind]


def _best_split(model, spec, workload, slo, engine, dtypes, usd_per_h, prompt: Pool, token: Pool, sr, limits,
                kv_cache=None):
    """The best split of one (prompt, token) machine pair (hardware, degrees, the token pool's
    power cap; counts of 1) within every budget in ``limits``."""
    prompt_hw, token_hw, cap = prompt.hardware, token.hardware, token.power_cap
    php = machine_hw(prompt_hw, spec.framework, 1.0, engine.memory_fraction, engine.kv_pool_tokens)
    thw = machine_hw(token_hw, spec.framework, cap, engine.memory_fraction, engine.kv_pool_tokens)
    spec = spec.model_copy(update={"mixed_pool": False})     # pool capacities of fixed pools
    kinds = list(limits)
    up = np.array([_units(k, usd_per_h)(php, prompt_hw, prompt.devices) for k in kinds])
    ut = np.array([_units(k, usd_per_h)(thw, token_hw, token.devices) for k in kinds])
    lim = np.array([limits[k] for k in kinds])
    max_p, max_t = int(np.min(lim // up)), int(np.min(lim // ut))
    if max_p < 1 or max_t < 1:
        return None, []
    if max(max_p, max_t) > MAX_POOL_MACHINES:    # every split is evaluated: a budget of a billion never ends
        raise InputError(f"search.limit allows {max_p:,} {prompt_hw} prompt or {max_t:,} {token_hw} token instances; "
                         f"the search evaluates every split, up to {MAX_POOL_MACHINES:,} instances a pool: give a "
                         "smaller search.limit")
    probe = Candidate(name="probe", prompt=prompt, token=token)
    try:
        check_layout(model, prompt.layout, php)
        check_layout(model, token.layout, thw)
    except InputError:
        return None, []
    # per-machine capacities from single-pool evaluations with many machines on the other side
    # (the pools' physics once: the counts change only the queues)
    big = max(max_p, max_t) * 4
    try:        # a machine that cannot hold the weights and one request's KV serves nothing: skipped
        physics = split_physics(model, probe, spec, workload, engine, dtypes, kv_cache) \
            if reusable_physics(workload) else None
        prompt_rate = np.array([evaluate_pools(model, probe.model_copy(update={
            "prompt": probe.prompt.model_copy(update={"count": n}),
            "token": probe.token.model_copy(update={"count": big})}), spec, workload, slo, engine, dtypes,
            usd_per_h, kv_cache, physics).max_rate for n in range(1, max_p + 1)])
        token_one = evaluate_pools(model, probe.model_copy(update={
            "prompt": probe.prompt.model_copy(update={"count": big})}), spec, workload, slo, engine, dtypes,
            usd_per_h, kv_cache, physics).max_rate
    except InfeasibleError:
        return None, []
    best, best_rate = None, 0.0
    if sr.objective == "min_budget":       # cheapest split (in the budget's unit) that serves target_rate
        if sr.target_rate is None:
            raise InputError("search.objective min_budget needs search.target_rate")
        enough = np.flatnonzero(prompt_rate >= sr.target_rate)
        n_t = int(np.ceil(sr.target_rate / token_one)) if token_one > 0 else 0
        if enough.size and n_t >= 1 and np.all((enough[0] + 1) * up + n_t * ut <= lim * (1 + 1e-9)):
            best, best_rate = (int(enough[0]) + 1, n_t), sr.target_rate
    else:
        for n_p in range(1, max_p + 1):
            n_t = int(np.min((lim - n_p * up) // ut))
            if n_t < 1:
                break
            rate = min(prompt_rate[n_p - 1], token_one * n_t)
            if rate > best_rate:
                best, best_rate = (n_p, n_t), rate
    # every split within the budget, for the throughput / cost / power Pareto front
    n_p, n_t = _front_candidates(prompt_rate, token_one, max_t)
    within = np.all(n_p[..., None] * up + n_t[..., None] * ut <= lim * (1 + 1e-9), axis=-1)
    rate = np.minimum(prompt_rate[n_p - 1], token_one * n_t)
    cost = (prompt.devices * n_p * device_rate(usd_per_h, prompt_hw, php)
            + token.devices * n_t * device_rate(usd_per_h, token_hw, thw))
    power = prompt.devices * n_p * php.power.tdp.value + token.devices * n_t * thw.power.tdp.value
    front = pareto_front(-rate[within], cost[within], power[within])
    degrees = f"{prompt.label}/{token.label}".replace(" ", "-") if (prompt.ep, token.ep) != (1, 1) \
        else f"tp{prompt.tp}/{token.tp}"
    points = list(dict(pair=f"{prompt_hw}/{token_hw}" + (f"@{cap:.0%}" if cap < 1 else "") + f" {degrees}",
                       prompt=int(n_p[within][i]), token=int(n_t[within][i]), req_per_s=float(rate[within][i]),
                       usd_per_h=float(cost[within][i]), power_w=float(power[within][i])) for i in front)
    if best is None:
        return None, points
    tag = f"{prompt_hw}/{token_hw}" + (f"@{cap:.0%}" if cap < 1 else "")
    tps = "" if (prompt.label, token.label) == ("tp8", "tp8") else f" {prompt.label}/{token.label}"
    return Candidate(name=f"best {tag}{tps} ({best[0]}P+{best[1]}T)",
                     prompt=prompt.model_copy(update={"count": best[0]}),
                     token=token.model_copy(update={"count": best[1]})), points


def _front_candidates(prompt_rate: np.ndarray, token_one: float, max_t: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, token) counts that can be on the split's (throughput, cost, power) front: a split
    serves min(prompt_rate[p], token_one x t), and its cost and power grow with both counts, so a
    split where the prompt pool binds is matched, at no more cost, by the fewest token machines
    keeping up with it, and one where the token pool binds by the fewest prompt machines keeping up
    with that: O(prompts + tokens) splits instead of every pair (a 200 x 200 budget spent seconds
    in the dominance tests)."""
    max_p = len(prompt_rate)
    if not (np.isfinite(token_one) and token_one > 0 and np.all(np.isfinite(prompt_rate))):
        n_p, n_t = np.meshgrid(np.arange(1, max_p + 1), np.arange(1, max_t + 1), indexing="ij")
        return n_p.ravel(), n_t.ravel()
    p = np.arange(1, max_p + 1)
    t_for_p = np.maximum(np.ceil(prompt_rate / token_one * (1 - 1e-12)), 1).astype(int)
    keep = t_for_p <= max_t
    t = np.arange(1, max_t + 1)
    reach = prompt_rate[None, :] >= token_one * t[:, None] * (1 - 1e-12)          # (t, p)
    has = reach.any(axis=1)
    p_for_t = np.argmax(reach, axis=1) + 1
    pairs = np.unique(np.concatenate([np.stack([p[keep], t_for_p[keep]], 1), np.stack([p_for_t[has], t[has]], 1)]),
                      axis=0)
    return pairs[:, 0], pairs[:, 1]


def _pareto(points: list[dict]) -> list[dict]:
    """The splits, across every searched pair, not dominated in (throughput, cost, power)."""
    if not points:
        return []
    keep = pareto_front(-np.array([x["req_per_s"] for x in points]), np.array([x["usd_per_h"] for x in points]),
                        np.array([x["power_w"] for x in points]))
    return sorted((points[i] for i in keep), key=lambda x: -x["req_per_s"])
