"""Splitwise's mixed pool and machine borrowing (Patel et al., ISCA 2024, Sec. 4.2), analytic.

In Splitwise the cluster scheduler sends each request to the prompt and token machines with the
fewest pending tokens; when that queue passes a threshold it looks in the mixed pool, then takes
a machine from the *opposite* pool into the mixed pool. A borrowed machine runs whatever it is
given, prompts first (it preempts decodes for them), and goes back when no work of the other kind
is left; coarse re-purposing between pools happens too (infrequently).

Under a sustained load the borrowing settles: each machine spends its time in one of three roles,
**prompt** (prefill only), **token** (decode only) or **mixed** (both phases, prompts first: the
colocated continuous-batching steady state). This module finds the best such assignment of the
design's machines, the steady state the borrowing converges to, and so what the mechanism can
recover when a cluster sized for one workload serves another (Splitwise Sec. 6.4):

    rate(roles) = min(sum_h R_P,h(n_P,h), sum_h n_T,h r_T,h) + sum_h n_M,h r_M,h

* ``R_P,h(n)``: the largest rate ``n`` prompt machines of type ``h`` serve within the TTFT SLOs
  (one G/G/n queue: JSQ on pending tokens, i.e. least work left, is a central FCFS queue when the
  work is proportional to the tokens; Allen-Cunneen wait), not linear in ``n``;
* ``r_T,h``: one token machine's largest SLO-meeting rate (decode-only continuous batching, KV
  slots, E2E with an idle prompt side), linear in the count;
* ``r_M,h``: one machine's largest SLO-meeting rate running both phases (the colocated model with
  the scenario's engine), linear too. A request mix split across groups meets each percentile
  SLO if every group does (a mixture's P90 is below a bound every component's P90 is below).

The search is exact over the integers: for two machine types it enumerates the prompt counts of
both and the token count of the first; the second type's token count is at an end point or at the
balance ``sum R_P = sum n_T r_T``, where the piecewise-linear objective has its kinks. The fixed
pools are one of the assignments, so the mixed pool never does worse than them. The gain is
measured within this model and applied to the joint evaluation of the fixed pools (which also
couples E2E across the two sides): ``rate = joint_fixed x best / fixed``.

Not modelled: the transient while machines move (seconds, against minutes of load shift), the
threshold's effect below saturation, and preemption of decodes on mixed machines beyond what the
colocated model charges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.catalog.model import ModelSpec
from planner.designs.pool_physics import machine_hw, prompt_service, prompt_ttft
from planner.designs.splitwise_pools import evaluate_colocated, evaluate_pools, kv_link_bytes_per_s, kv_transfer_s
from planner.designs.splitwise_spec import Baseline
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving.batching import Engine
from planner.serving.queueing import multi_server_wait
from planner.serving.slo import SLO
from planner.serving.workload import Workload


@dataclass(frozen=True)
class MachineType:
    """Interchangeable machines of a design, and what each role serves (requests/s)."""

    hardware: str
    tp: int
    pp: int
    power_cap: float
    count: int
    prompt_rate: np.ndarray      # (count + 1,) SLO-meeting rate of n = 0..count prompt machines
    token_rate: float            # per token machine
    mixed_rate: float            # per mixed machine
    ep: int = 1

    @property
    def key(self) -> tuple:
        """``machine_key`` of these machines."""
        return self.hardware, self.tp, self.ep, self.pp, self.power_cap


@dataclass(frozen=True)
class Roles:
    """Machines per role and type (type order as given), and the rate the assignment serves."""

    prompt: tuple[int, ...]
    token: tuple[int, ...]
    mixed: tuple[int, ...]
    rate: float

    def describe(self, types: list[MachineType]) -> str:
        parts = []
        for k, t in enumerate(types):
            cap = f"@{t.power_cap:.0%}" if t.power_cap < 1 else ""
            parts.append(f"{t.hardware}{cap}: {self.prompt[k]}P/{self.token[k]}T/{self.mixed[k]}M")
        return ", ".join(parts)


def best_roles(types: list[MachineType]) -> Roles:
    """The role assignment of every machine that serves the most requests/s (1 or 2 types)."""
    if not 1 <= len(types) <= 2:
        raise ValueError("the mixed-pool search takes one or two machine types")
    pad = MachineType("-", 1, 1, 1.0, 0, np.zeros(1), 0.0, 0.0)
    a, b = (types + [pad])[:2]
    p1 = np.arange(a.count + 1)[:, None, None]
    p2 = np.arange(b.count + 1)[None, :, None]
    t1 = np.arange(a.count + 1)[None, None, :]
    ok1 = p1 + t1 <= a.count
    prompt = a.prompt_rate[p1] + b.prompt_rate[p2]
    free2 = b.count - p2
    kink = (prompt - t1 * a.token_rate) / max(b.token_rate, 1e-300)
    best_val, best_idx = -1.0, None
    for t2 in (0 * kink, np.floor(kink), np.ceil(kink), free2 + 0 * kink):
        t2 = np.clip(t2, 0, free2)
        val = (np.minimum(prompt, t1 * a.token_rate + t2 * b.token_rate)
               + (a.count - p1 - t1) * a.mixed_rate + (free2 - t2) * b.mixed_rate)
        val = np.where(ok1, val, -np.inf)
        k = int(np.argmax(val))
        if val.flat[k] > best_val:
            i, j, m = np.unravel_index(k, val.shape)
            best_val, best_idx = float(val.flat[k]), (int(i), int(j), int(m), int(t2[i, j, m]))
    i, j, m, n = best_idx
    roles = Roles((i, j), (m, n), (a.count - i - m, b.count - j - n), best_val)
    k = len(types)
    return Roles(roles.prompt[:k], roles.token[:k], roles.mixed[:k], roles.rate)


def fixed_roles(types: list[MachineType], prompt_count: list[int], token_count: list[int]) -> Roles:
    """The design's own pools as an assignment (no borrowing), with its rate in the same model."""
    prompt = sum(t.prompt_rate[n] for t, n in zip(types, prompt_count, strict=True))
    token = sum(t.token_rate * n for t, n in zip(types, token_count, strict=True))
    return Roles(tuple(prompt_count), tuple(token_count), (0,) * len(types), float(min(prompt, token)))


def prompt_rates(model: ModelSpec, hw, lay: Layout, dtypes: DTypes, workload: Workload, slo: SLO,
                 count: int, kv_cap: float = np.inf) -> np.ndarray:
    """SLO-meeting rate of n = 0..count prompt machines (TTFT bounds, utilisation < 1, at most
    ``kv_cap`` requests/s each through its NICs), all n at once: a (count, rates) grid of G/G/n."""
    _, s, _ = prompt_service(model, hw, lay, dtypes, workload)
    es = float(s.mean())
    cs2 = float((s**2).mean()) / es**2 - 1
    n = np.arange(1, count + 1)[:, None]
    rates = np.geomspace(1e-3, 1.0, 400)[None, :] * n / es        # up to each count's capacity
    wait, rho = multi_server_wait(rates, n, es, cs2, workload.arrival.scv)
    ttft = prompt_ttft(wait, rho, s)
    ok = rho < 1
    for p, bound in slo.ttft_s.items():
        ok &= ttft[p] <= bound
    first_bad = np.where(ok.all(axis=1), ok.shape[1], np.argmin(ok, axis=1))
    best = np.where(first_bad > 0, rates[np.arange(count), np.maximum(first_bad - 1, 0)], 0.0)
    return np.concatenate([[0.0], np.minimum(best, n[:, 0] * kv_cap)])


def machine_types(model: ModelSpec, d, spec, workload: Workload, slo: SLO, engine: Engine, dtypes: DTypes,
                  usd_per_h: dict[str, float]) -> tuple[list[MachineType], list[int], list[int]]:
    """The design's machine types (identical pools merge) with their role capacities, and the
    design's own prompt and token counts per type."""
    pools = [d.prompt, d.token]
    keys = list(dict.fromkeys(machine_key(p) for p in pools))
    count = {k: sum(p.count for p in pools if machine_key(p) == k) for k in keys}
    big = 4 * sum(count.values())
    types = []
    for key in keys:
        hw_name, tp, ep, pp, cap = key
        pool = pool_of(d.prompt, key, 1)
        hw = machine_hw(hw_name, spec.framework, cap, engine.memory_fraction, engine.kv_pool_tokens)
        lay = pool.layout
        token_one = evaluate_pools(model, d.model_copy(update={
            "token": pool, "prompt": d.prompt.model_copy(update={"count": big})}), spec, workload, slo, engine,
            dtypes, usd_per_h).max_rate
        mixed_one = evaluate_colocated(model, Baseline(name="mixed", pool=pool), workload, slo, engine, dtypes,
                                       spec.framework, usd_per_h).max_rate
        # a prompt machine ships each request's KV to a token machine of the design's token type
        pair = d.model_copy(update={"prompt": pool})
        thw = machine_hw(d.token.hardware, spec.framework, d.token.power_cap, engine.memory_fraction,
                         engine.kv_pool_tokens)
        support, s, _ = prompt_service(model, hw, lay, dtypes, workload)
        mean_bytes = float(kv_transfer_s(model, spec, hw, thw, pair, support, s, dtypes.kv)[1].mean())
        kv_cap = kv_link_bytes_per_s(spec, hw, thw, pair) / mean_bytes
        types.append(MachineType(hw_name, tp, pp, cap, count[key],
                                 prompt_rates(model, hw, lay, dtypes, workload, slo, count[key], kv_cap), token_one,
                                 mixed_one, ep=ep))
    own = [machine_key(p) for p in pools]
    prompt_n = [d.prompt.count if k == own[0] else 0 for k in keys]
    token_n = [d.token.count if k == own[1] else 0 for k in keys]
    return types, prompt_n, token_n


def machine_key(p) -> tuple:
    """What makes two pools' machines interchangeable: hardware, degrees and power cap."""
    return p.hardware, p.tp, p.ep, p.pp, p.power_cap


def pool_of(template, key: tuple, count: int):
    """``count`` machines of ``key`` (``machine_key``), the rest of ``template``'s fields kept."""
    hardware, tp, ep, pp, cap = key
    return template.model_copy(update={"hardware": hardware, "tp": tp, "ep": ep, "pp": pp, "power_cap": cap,
                                       "count": count})


def evaluate_mixed(model: ModelSpec, d, spec, workload: Workload, slo: SLO, engine: Engine, dtypes: DTypes,
                   usd_per_h: dict[str, float], fixed):
    """``fixed`` (the joint evaluation of the design's own pools) with the rate the mixed pool
    reaches: the best role assignment's gain over the fixed roles, in the same model."""
    types, prompt_n, token_n = machine_types(model, d, spec, workload, slo, engine, dtypes, usd_per_h)
    best = best_roles(types)
    base = fixed_roles(types, prompt_n, token_n)
    if best.rate <= base.rate * (1 + 1e-9):
        return fixed.model_copy(update={"binding": fixed.binding + " (mixed pool: no borrowing pays)"}), best
    rate = fixed.max_rate * best.rate / base.rate if base.rate > 0 and fixed.max_rate > 0 else best.rate
    scale = rate / fixed.max_rate if fixed.max_rate > 0 else float("nan")
    return fixed.model_copy(update={
        "max_rate": rate, "output_tokens_per_s": fixed.output_tokens_per_s * scale,
        "avg_power_w": fixed.avg_power_w * scale if scale == scale else float("nan"),
        "binding": f"mixed pool borrows machines: {best.describe(types)} (P prompt, T token, M both phases); "
                   f"fixed pools: {fixed.binding}"}), best
