"""Discrete-event simulation of Splitwise's pools with its cluster scheduler (Patel et al., ISCA
2024, Sec. 4.2): join-the-shortest-queue on **pending tokens**, machines of possibly different
hardware in each role, and a mixed pool whose machines run both phases.

* Prompt machines: each request goes, on arrival, to the prompt machine with the fewest pending
  prompt tokens (tokens of the prompts queued or running there; ties to the lowest index), which
  serves its queue FCFS at that machine's own prefill speed and emits the first token.
* Token machines: when the prefill ends, the request's KV goes to the token machine with the
  fewest pending decode tokens. A token machine's backlog is estimated as Splitwise's scheduler
  sees it: each assigned request counts its output tokens, drained at one token per decode step
  of that machine (``step_s``), so a faster machine's tokens leave sooner. The KV transfer delay
  depends on the pair's hardware. The machine then batches as memory allows (continuous batching).
* Mixed machines (machines borrowed into the mixed pool): a seeded share of the requests, chosen
  at arrival, is served end to end on them with prompts first (the colocated instance loop).

The borrowing itself is taken as settled (the roles come from the analytic steady state,
``planner.designs.mixed_pool``); the machines' moves between roles are not simulated.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.errors import InfeasibleError
from planner.perf.memory import pool_tokens
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout, dp_ranks
from planner.serving.batching import Engine, iteration
from planner.serving.simulate import (
    IterationTable,
    SimResult,
    _run_instance,
    cache_pools,
    check_longest_fits,
    group,
    request_tokens_per_step,
    split_result,
)


@dataclass(frozen=True)
class Machine:
    """One instance of a role: its hardware, layout and a type index (for KV-transfer pairs)."""

    hw: HardwareProfile
    lay: Layout
    kind: int


def jsq_prompt(arrival_s: np.ndarray, tokens: np.ndarray, service_s: np.ndarray, kinds: np.ndarray,
               simulator: str = "python") -> tuple[np.ndarray, np.ndarray]:
    """(prefill completion time, machine index) of each request (in arrival order) dispatched to
    the machine with the fewest pending prompt tokens; ``service_s[kind, request]`` is the prefill
    time on a machine of that kind; each machine serves its own queue FCFS. ``simulator``: as
    ``Engine.simulator`` (the kernel gives the same numbers)."""
    from planner.serving import sim_kernel

    run = sim_kernel.kernel("jsq_prompt", simulator)
    if run is not None:
        done, where = np.empty(len(arrival_s)), np.empty(len(arrival_s), dtype=np.int64)
        run(np.ascontiguousarray(arrival_s, dtype=float), np.ascontiguousarray(tokens, dtype=float),
            np.ascontiguousarray(service_s, dtype=float), np.ascontiguousarray(kinds, dtype=np.int64), done, where)
        return done, where
    m = len(kinds)
    pending = np.zeros(m)
    free = np.zeros(m)
    live: list[tuple[float, int, float]] = []          # (completion, machine, tokens) not yet done
    done = np.empty(len(arrival_s))
    where = np.empty(len(arrival_s), dtype=np.int64)
    for r, a in enumerate(arrival_s):
        while live and live[0][0] <= a:
            _, k, t = heapq.heappop(live)
            pending[k] -= t
        k = int(np.argmin(pending))
        done[r] = max(a, free[k]) + service_s[kinds[k], r]
        free[k] = done[r]
        pending[k] += tokens[r]
        where[r] = k
        heapq.heappush(live, (done[r], k, float(tokens[r])))
    return done, where


def jsq_token(ready_s: np.ndarray, output_tokens: np.ndarray, step_s: np.ndarray, simulator: str = "python"
              ) -> np.ndarray:
    """Token machine of each request (``ready_s`` ascending): the fewest pending decode tokens,
    a request's ``o`` tokens draining at one per ``step_s[k]`` on machine ``k``."""
    from planner.serving import sim_kernel

    run = sim_kernel.kernel("jsq_token", simulator)
    if run is not None:
        where = np.empty(len(ready_s), dtype=np.int64)
        run(np.ascontiguousarray(ready_s, dtype=float), np.ascontiguousarray(output_tokens, dtype=float),
            np.ascontiguousarray(step_s, dtype=float), where)
        return where
    m = len(step_s)
    end_sum = np.zeros(m)        # sum of the estimated decode ends of the requests still there
    count = np.zeros(m)
    live: list[tuple[float, int]] = []
    where = np.empty(len(ready_s), dtype=np.int64)
    for r, t in enumerate(ready_s):
        while live and live[0][0] <= t:
            end, k = heapq.heappop(live)
            end_sum[k] -= end
            count[k] -= 1
        pending = (end_sum - count * t) / step_s
        k = int(np.argmin(pending))
        end = t + output_tokens[r] * step_s[k]
        end_sum[k] += end
        count[k] += 1
        where[r] = k
        heapq.heappush(live, (end, k))
    return where


def simulate_pools(model: ModelSpec, dtypes: DTypes, engine: Engine, arrival_s: np.ndarray, input_len: np.ndarray,
                   output_len: np.ndarray, transfer_s, prompt: list[Machine], token: list[Machine],
                   mixed: list[Machine] = (), mixed_share: float = 0.0, mixed_engine: Engine | None = None, *,
                   prefix_hit: float | np.ndarray = 0.0, seed: int = 0, warmup_frac: float = 0.1) -> SimResult:
    """Simulate prompt, token and mixed machines (``prefix_hit``: one figure, or per request).
    ``transfer_s(prompt_kind, token_kind, tokens, prefill_s)`` is the exposed KV-transfer delay of
    a pair; ``engine`` runs the token machines (decode-only), ``mixed_engine`` the mixed ones (both
    phases; default ``engine``)."""
    if not prompt or not token:
        raise InfeasibleError("a Splitwise design needs at least one prompt and one token machine")
    prefix_hit = np.broadcast_to(np.asarray(prefix_hit, float), np.shape(arrival_s))
    if np.any(arrival_s[1:] < arrival_s[:-1]):
        order = np.argsort(arrival_s, kind="stable")
        arrival_s, input_len, output_len = arrival_s[order], input_len[order], output_len[order]
        prefix_hit = prefix_hit[order]
    n = len(arrival_s)
    rng = np.random.default_rng(seed)
    to_mixed = (rng.random(n) < mixed_share) if mixed else np.zeros(n, dtype=bool)
    ttft, done = np.full(n, np.nan), np.full(n, np.nan)
    first = np.full(n, np.nan)
    energy, preempt, iters = 0.0, 0, 0
    split = np.flatnonzero(~to_mixed)
    if split.size:
        e, pr, it = _split_path(model, dtypes, engine, arrival_s, input_len, output_len, transfer_s, prompt, token,
                                split, prefix_hit, ttft, first, done, request_tokens_per_step(engine, n, seed))
        energy, preempt, iters = energy + e, preempt + pr, iters + it
    if mixed and to_mixed.any():
        m_engine = mixed_engine or engine
        e, pr, it = _mixed_path(model, dtypes, m_engine, arrival_s, input_len, output_len, mixed,
                                np.flatnonzero(to_mixed), prefix_hit, rng, ttft, done,
                                request_tokens_per_step(m_engine, n, seed))
        energy, preempt, iters = energy + e, preempt + pr, iters + it
        first[to_mixed] = arrival_s[to_mixed] + ttft[to_mixed]
    return split_result(arrival_s, input_len, output_len, ttft, first, done, energy, preempt, iters, warmup_frac,
                        prompt[0].hw.efficiency.request_overhead.value)


def unique_lengths(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(tokens, return_inverse=True)`` of whole token counts, by counting (no sort)."""
    whole = tokens.astype(np.int64)
    if not len(tokens) or whole.min() < 0 or whole.max() > 1 << 24 or not np.array_equal(whole, tokens):
        return np.unique(tokens, return_inverse=True)
    seen = np.bincount(whole) > 0
    return np.flatnonzero(seen).astype(tokens.dtype), (np.cumsum(seen) - 1)[whole]


def _kinds(machines: list[Machine]) -> dict[int, Machine]:
    return {m.kind: m for m in machines}


def _split_path(model, dtypes, engine, arrival_s, input_len, output_len, transfer_s, prompt, token, ids, prefix_hit,
                ttft, first, done, tps) -> tuple[float, int, int]:
    """Prompt machines (JSQ on pending prompt tokens), KV transfer, token machines (JSQ on
    pending decode tokens); fills ``ttft``, ``first`` and ``done`` for ``ids``. ``tps``: each
    request's tokens per decode iteration."""
    a, i, o = arrival_s[ids], input_len[ids], output_len[ids]
    pre = np.maximum(np.round(i * (1 - prefix_hit[ids])), 1)
    uniq, inv = unique_lengths(pre)
    pkinds = _kinds(prompt)
    service = np.zeros((max(pkinds) + 1, len(ids)))
    for k, m in pkinds.items():
        service[k] = iteration(model, m.hw, m.lay, dtypes, 0.0, 16.0, uniq, uniq).time_s[inv]
    p_done, p_where = jsq_prompt(a, pre, service, np.array([m.kind for m in prompt]), engine.simulator)
    ttft[ids] = p_done - a
    first[ids] = p_done
    by_done = np.argsort(p_done, kind="stable")
    tables, steps = {}, []
    mean_ctx = float(np.mean(i + o / 2))
    for m in token:
        if m.kind not in tables:
            tables[m.kind] = _table(model, m, dtypes, engine, input_len, output_len)
        steps.append(tables[m.kind][0](16.0, mean_ctx, 0.0)[0])
    t_where = np.empty(len(ids), dtype=np.int64)
    # the KV ships once the prefill ends; the transfer delay depends on the chosen pair
    t_where[by_done] = jsq_token(p_done[by_done], o[by_done], np.array(steps), engine.simulator)
    ready = p_done.copy()
    pairs = [(kp, kt) for kp in sorted({m.kind for m in prompt}) for kt in sorted({m.kind for m in token})]
    if len(pairs) > 1:
        pk, tk = np.array([m.kind for m in prompt])[p_where], np.array([m.kind for m in token])[t_where]
    for kp, kt in pairs:
        sel = slice(None) if len(pairs) == 1 else (pk == kp) & (tk == kt)
        if len(pairs) > 1 and not sel.any():
            continue
        ready[sel] += np.asarray(transfer_s(kp, kt, pre[sel], service[kp][sel]), dtype=float)
    ready_all = np.full(len(arrival_s), np.inf)
    ready_all[ids] = ready
    energy, preempt, iters = 0.0, 0, 0
    scratch = np.full(len(arrival_s), np.nan)
    by_ready = np.argsort(ready, kind="stable")
    by_machine, bounds = group(t_where[by_ready], len(token))     # each machine's requests by KV arrival
    for k, m in enumerate(token):
        mine = ids[by_ready[by_machine[bounds[k]:bounds[k + 1]]]]
        if not mine.size:
            continue
        table, free_kv, per_tok, state, dp, eng = tables[m.kind]
        e, pr, it, _ = _run_instance(mine, ready_all, input_len, output_len, prefix_hit, eng, table, free_kv,
                                     per_tok, state, scratch, done, dp, prefilled=True, tps=tps)
        energy += e * int(np.ravel(m.lay.devices)[0])
        preempt, iters = preempt + pr, iters + it
    return energy, preempt, iters


def _mixed_path(model, dtypes, engine, arrival_s, input_len, output_len, mixed, ids, prefix_hit, rng, ttft, done,
                tps) -> tuple[float, int, int]:
    """Mixed machines: requests spread uniformly at random (seeded), each served end to end
    (``tps``: each request's tokens per decode iteration)."""
    route = rng.integers(0, len(mixed), len(ids))
    tables = {}
    energy, preempt, iters = 0.0, 0, 0
    by_route, bounds = group(route, len(mixed))
    for k, m in enumerate(mixed):
        mine = ids[by_route[bounds[k]:bounds[k + 1]]]
        if not mine.size:
            continue
        if m.kind not in tables:
            tables[m.kind] = _table(model, m, dtypes, engine, input_len, output_len)
        table, free_kv, per_tok, state, dp, eng = tables[m.kind]
        e, pr, it, _ = _run_instance(mine, arrival_s, input_len, output_len, prefix_hit, eng, table, free_kv,
                                     per_tok, state, ttft, done, dp, tps=tps)
        energy += e * int(np.ravel(m.lay.devices)[0])
        preempt, iters = preempt + pr, iters + it
    return energy, preempt, iters


def _table(model, m: Machine, dtypes, engine, input_len, output_len):
    """(iteration table, free KV bytes, KV bytes per token, state bytes, attention DP, the engine with
    the sequences its pools hold) of a machine (``simulate.cache_pools``)."""
    free_kv, per_tok, state, engine = cache_pools(model, m.hw, m.lay, dtypes, engine)
    dp = dp_ranks(m.hw, m.lay)
    check_longest_fits(input_len, output_len, free_kv, per_tok, state, dp, f"a {m.hw.name} instance",
                       pool_tokens(m.hw))
    table = IterationTable.for_requests(model, m.hw, m.lay, dtypes, engine, input_len, output_len)
    return table, free_kv, per_tok, state, dp, engine
