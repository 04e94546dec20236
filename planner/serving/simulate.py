"""Seeded discrete-event simulation of instances under continuous batching, one event per engine
iteration (the granularity at which vLLM/SGLang/TensorRT-LLM schedule).

Each iteration: arrivals join the waiting queue; the scheduler keeps every running sequence
decoding (one token each) and fills the rest of the token budget with prompt chunks, FCFS
(chunked prefill), or, without chunked prefill or on an engine that does not mix decodes into
prompt iterations (SGLang: ``Engine.mixed_prefill``), runs waiting prompts in an iteration of their
own before resuming decodes (prefill-first; with attention replicas only the replicas that prefill
hold their decodes). A request is admitted only if its prompt's KV fits;
when decode growth overflows the KV pool the newest running request is preempted and later
recomputed (vLLM's recompute policy). With attention data parallelism each request lives on one
replica, which takes at most its share of the budget per iteration and prefills its prompts alone
(``Step.replica_tokens``); SGLang's prefill delayer (``Engine.prefill_delay_passes``) holds the
prompts while only some replicas have one. The iteration's duration comes from the same roofline
engine as the analytic model, tabulated over (decodes, mean context, prefill tokens) and
interpolated.

Requests are routed to instances uniformly at random (seeded), so each instance sees a thinned
copy of the arrival process.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.errors import InfeasibleError
from planner.perf.kv_tiers import exposed_prefill_s
from planner.perf.memory import (
    cache_split,
    exact_pool_refusal,
    free_kv_bytes_device,
    kv_bytes_per_token_device,
    pool_tokens,
    state_bytes_per_sequence_device,
)
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout, dp_ranks
from planner.perf.speculation import Speculation
from planner.serving.batching import Engine, iteration, prompt_alone_s


class IterationTable:
    """Iteration time and device power on a grid of (decodes, mean decode context, prefill
    tokens), evaluated in one vectorized roofline call; trilinear interpolation. Axes are
    geometric (plus a zero point), so a lookup finds its cell with one logarithm per axis.

    With attention data parallelism a second grid holds the iteration whose busiest replica
    decodes ``SKEW`` times the mean (``Step.dp_skew``); a lookup at skew ``s`` interpolates
    linearly between the two (and beyond, up to ``dp_ranks``): the replica's attention-side work
    and its all-to-all sends are affine in its sequences."""

    POINTS = 20
    SKEW = 2.0

    def __init__(self, model, hw, lay: Layout, dtypes, engine: Engine, max_ctx: float, prompt_len: float,
                 max_decode: int, max_tokens: int):
        self.axes = [self._axis(1.0, max(max_decode, 2)), self._axis(16.0, max(max_ctx, 32)),
                     self._axis(16.0, max_tokens)]
        self.dp_ranks = dp_ranks(hw, lay)
        N, Cx, P = np.meshgrid(*self.axes, indexing="ij")
        grids = []
        for skew in (1.0, self.SKEW) if self.dp_ranks > 1 else (1.0,):
            it = iteration(model, hw, lay, dtypes, N.ravel(), Cx.ravel(), P.ravel(), prompt_len, engine.speculation,
                           dp_skew=skew, replica_tokens=replica_budget(max_tokens, self.dp_ranks))
            grids.append((np.ascontiguousarray(it.time_s.reshape(N.shape), dtype=float),
                          np.ascontiguousarray(np.broadcast_to(it.power_w, N.ravel().shape).reshape(N.shape),
                                               dtype=float)))
        (self.t_grid, self.w_grid), (self.t2_grid, self.w2_grid) = grids[0], grids[-1]
        self._geo = [(math.log(a[1]), math.log(a[-1] / a[1]) / (len(a) - 2)) for a in self.axes]
        self.geo = np.array(self._geo)                     # (log of the first point, log step) per axis
        self.axes_grid = np.array(self.axes)               # 3 x (POINTS + 1), for the kernels
        self._t, self._w = self.t_grid.tolist(), self.w_grid.tolist()   # plain floats: fast scalar lookups
        self._t2, self._w2 = self.t2_grid.tolist(), self.w2_grid.tolist()
        self._lists = [a.tolist() for a in self.axes]

    @classmethod
    def for_requests(cls, model, hw, lay: Layout, dtypes, engine: Engine, input_len: np.ndarray,
                     output_len: np.ndarray) -> IterationTable:
        """The table of an instance serving these requests: contexts up to the longest, prompts of
        their mean length, decodes and tokens up to the instance's limits."""
        return cls(model, hw, lay, dtypes, engine, float(np.max(input_len + output_len)), float(np.mean(input_len)),
                   *engine.instance_limits(dp_ranks(hw, lay), hw))

    def _axis(self, lo: float, hi: float) -> np.ndarray:
        return np.concatenate([[0.0], np.geomspace(lo, hi, self.POINTS)])

    def _cell(self, d: int, x: float) -> tuple[int, float]:
        axis, (log0, step) = self._lists[d], self._geo[d]
        if x <= axis[1]:
            return 0, max(x, 0.0) / axis[1]
        i = min(int((math.log(x) - log0) / step) + 1, len(axis) - 2)
        lo, hi = axis[i], axis[i + 1]
        return i, (x - lo) / (hi - lo)

    def __call__(self, n: float, ctx: float, p: float, skew: float = 1.0) -> tuple[float, float]:
        i, a = self._cell(0, n)
        j, b = self._cell(1, ctx)
        k, c = self._cell(2, p)
        out = []
        for arr in (self._t, self._w, self._t2, self._w2) if skew != 1.0 else (self._t, self._w):
            lo, hi = arr[i], arr[i + 1]
            v = 0.0
            for jj, wb in ((j, 1 - b), (j + 1, b)):
                for kk, wc in ((k, 1 - c), (k + 1, c)):
                    v += wb * wc * (lo[jj][kk] * (1 - a) + hi[jj][kk] * a)
            out.append(v)
        if skew != 1.0:
            f = (skew - 1.0) / (self.SKEW - 1.0)
            return out[0] + f * (out[2] - out[0]), out[1] + f * (out[3] - out[1])
        return out[0], out[1]


class Replicas:
    """Attention data-parallel replicas of an instance: each request is placed on one at arrival
    and stays there (``Engine.dp_balance``: in turn, or on the one with the fewest unfinished
    requests, the lowest index on ties), and each admits at most ``per_rank`` sequences (its share
    of the instance's limit: SGLang gives every DP worker max_running_requests // dp_size), so a
    request placed on a full replica waits for one of that replica's to end (a decode pool's
    transferred requests join by the instance's limit alone); ``skew`` = decoding sequences on the
    busiest replica over the mean, which sets the step (``Step.dp_skew``)."""

    def __init__(self, ranks: int, requests: int, round_robin: bool, max_seqs: int = 1):
        self.ranks, self.round_robin, self.turn = ranks, round_robin, 0
        self.per_rank = max(1, max_seqs // ranks)
        self.of = [0] * requests
        self.placed = [0] * ranks        # unfinished requests per replica
        self.active = [0] * ranks        # admitted (KV held), unfinished requests per replica
        self.decoding = [0] * ranks      # decoding sequences per replica

    def place(self, r: int) -> None:
        if self.round_robin:
            j = self.turn % self.ranks
            self.turn += 1
        else:
            j = self.placed.index(min(self.placed))
        self.of[r] = j
        self.placed[j] += 1

    def skew(self, n_dec: int) -> float:
        return max(self.decoding) * self.ranks / n_dec if self.ranks > 1 and n_dec else 1.0


def replica_budget(budget_total: int, ranks: int) -> float:
    """Prompt tokens one attention data-parallel replica takes per iteration: its share of the
    instance's budget (SGLang divides --chunked-prefill-size by the DP size under DP attention,
    and --max-prefill-tokens is each DP scheduler's own); no limit without replicas."""
    return float(max(1, budget_total // ranks)) if ranks > 1 else np.inf


def _steady_throughput(arrival_s: np.ndarray, done: np.ndarray, warmup_frac: float) -> float:
    """Requests completed per second between the end of the warm-up and the last arrival."""
    t0 = arrival_s.min() + warmup_frac * (arrival_s.max() - arrival_s.min())
    t1 = arrival_s.max()
    return float(((done >= t0) & (done <= t1)).sum() / (t1 - t0)) if t1 > t0 else float("nan")


@dataclass(frozen=True)
class SimResult:
    """Per-request latencies (s) of completed requests, and instance-level totals."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    makespan_s: float
    energy_j: float          # all devices of all instances
    preemptions: int
    iterations: int
    requests_per_s: float    # completions per second in the steady window (after warm-up, before the last arrival)

    @property
    def output_tokens_per_s(self) -> float:
        return self.requests_per_s * float(self.output_len.mean())


def group(key: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): ``order[bounds[k]:bounds[k + 1]]`` are the indices (ascending) where
    ``key == k``; a stable radix sort when the keys fit in 16 bits."""
    small = key.astype(np.uint16) if groups <= 1 << 16 else key
    order = np.argsort(small, kind="stable")
    return order, np.concatenate([[0], np.cumsum(np.bincount(key, minlength=groups))])


def kv_capacity(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes,
                spec: Speculation | None = None) -> tuple[float, float, float]:
    """(KV bytes free per instance, bytes per cached token, bytes of state per sequence), instance-wide
    (beside the weights of ``spec``'s draft, if any)."""
    free_dev = free_kv_bytes_device(model, hw, lay, dtypes, spec)
    dp = float(np.ravel(lay.attention_dp)[0])
    per_tok = float(np.ravel(kv_bytes_per_token_device(model, lay, dtypes.kv, hw))[0])
    state = float(np.ravel(state_bytes_per_sequence_device(model, lay, dtypes.kv, hw))[0])
    return float(np.ravel(free_dev)[0]) * dp, per_tok, state


def cache_pools(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes,
                engine: Engine) -> tuple[float, float, float, Engine]:
    """``kv_capacity`` as the engine pools it, and the engine with the sequences it can hold: where
    its recurrent states have a pool of their own (``MemoryPolicy.state_pool``: SGLang), the KV
    pool is what the state slots leave, a request holds only its tokens there, and the slots cap
    the running sequences (``Engine.max_num_seqs``, in the engine's own scope). The per-sequence
    bytes returned carry the part-filled last KV page (``page_waste_bytes``). The engine returned
    has the limits it runs with on ``hw`` written out (``Engine.for_device``), as it runs there
    (``Engine.on``: a framework mapping by device)."""
    dp = dp_ranks(hw, lay)
    engine = engine.on(hw).for_device(hw, dp)
    free, per_tok, state = kv_capacity(model, hw, lay, dtypes, engine.speculation)
    if refusal := exact_pool_refusal(hw, free / dp, per_tok):
        raise InfeasibleError(refusal)
    kv, cap, beside = (float(x) for x in cache_split(hw, free, state, per_tok, dp))
    if not np.isfinite(cap):
        return kv, per_tok, beside, engine
    cap = int(cap)
    if cap < 1 and free <= 0:             # nothing left after the weights: check_longest_fits says so
        return free, per_tok, beside + state, engine
    if cap < 1:
        pool = hw.memory_policy.state_pool
        raise InfeasibleError(
            f"the engine's recurrent-state pool ({pool.ratio.value:g} : 1 of the cache memory) holds no request's "
            f"state ({state / 1e9:.2f} GB each, {pool.slots_per_request.value:g} slots per request): use more devices "
            f"per instance, a narrower state format or a larger memory fraction")
    limit = cap if engine.limits_scope == "instance" else max(cap // dp, 1)
    if limit < engine.max_num_seqs:
        engine = engine.model_copy(update={"max_num_seqs": limit})
    return kv, per_tok, beside, engine


def check_longest_fits(input_len: np.ndarray, output_len: np.ndarray, free: float, per_tok: float, state: float,
                       pools: int, where: str, cap_tokens: float = np.inf) -> None:
    """A request's whole KV lives in one pool (its attention replica's, with data parallelism): the
    longest request must fit in ``free / pools`` bytes, or it could never be admitted; where the
    launch caps each pool at ``cap_tokens`` (``memory.pool_tokens``) and that is what it misses,
    the error names the cap."""
    longest = int(np.max(input_len + output_len))
    need, room = longest * per_tok + state, max(free, 0) / pools
    if need > room and longest > cap_tokens:
        raise InfeasibleError(
            f"a request of {longest:,} tokens does not fit in {where}'s KV pool, which the launch caps at "
            f"{cap_tokens:,.0f} tokens (kv_pool_tokens) per attention replica; raise the cap where memory holds "
            f"more, or cap the request length")
    if need > room:
        replica = f" per attention replica ({pools} of them)" if pools > 1 else ""
        raise InfeasibleError(
            f"a request of {longest} tokens needs {need / 1e9:.2f} GB of KV cache but {where} has {room / 1e9:.2f} GB "
            f"free after weights{replica}; use more devices per instance{' or fewer replicas' if pools > 1 else ''}, "
            f"fp8 weights or KV, or cap the request length")


def simulate(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, engine: Engine,
             arrival_s: np.ndarray, input_len: np.ndarray, output_len: np.ndarray, *, instances: int = 1,
             prefix_hit: float | np.ndarray = 0.0, seed: int = 0, warmup_frac: float = 0.1,
             load_s: np.ndarray | None = None, table: IterationTable | None = None) -> SimResult:
    """Simulate ``instances`` identical instances serving the given requests; ``prefix_hit`` and
    ``load_s`` (seconds to load its hits from slower KV tiers) may be given per request. ``table``:
    ``IterationTable.for_requests`` of the same instance and lengths, for a caller that simulates
    them again and again (built here otherwise)."""
    rng = np.random.default_rng(seed)
    route = rng.integers(0, instances, len(arrival_s))
    tps = request_tokens_per_step(engine, len(arrival_s), seed)
    free, per_tok, state, engine = cache_pools(model, hw, lay, dtypes, engine)
    check_longest_fits(input_len, output_len, free, per_tok, state, dp_ranks(hw, lay), "the instance",
                       pool_tokens(hw))
    if table is None:
        table = IterationTable.for_requests(model, hw, lay, dtypes, engine, input_len, output_len)
    devices = int(np.ravel(lay.devices)[0])
    ttft = np.full(len(arrival_s), np.nan)
    done = np.full(len(arrival_s), np.nan)
    energy, preempt, iters, end = 0.0, 0, 0, 0.0
    by_route, bounds = group(route, instances)
    for k in range(instances):
        ids = by_route[bounds[k]:bounds[k + 1]]
        e, pr, it, t_end = _run_instance(ids, arrival_s, input_len, output_len, prefix_hit, engine, table,
                                         free, per_tok, state, ttft, done, dp_ranks(hw, lay),
                                         load_s=load_s, layers=model.num_layers, tps=tps)
        energy += e * devices
        preempt += pr
        iters += it
        end = max(end, t_end)
    # discard the warm-up (first arrivals) when measuring
    keep = np.isfinite(done) & (arrival_s >= arrival_s.min() + warmup_frac * (arrival_s.max() - arrival_s.min()))
    o = output_len[keep]
    tpot = np.where(o > 1, (done[keep] - (ttft[keep] + arrival_s[keep])) / np.maximum(o - 1, 1), 0.0)
    span = float(np.nanmax(done[keep]) - arrival_s[keep].min()) if keep.any() else float("nan")
    host = hw.efficiency.request_overhead.value       # per-request host time (tokenize, admit), in TTFT and E2E
    return SimResult(ttft[keep] + host, tpot, done[keep] - arrival_s[keep] + host, input_len[keep], o, span, energy,
                     preempt, iters, _steady_throughput(arrival_s, done, warmup_frac))


def request_tokens_per_step(engine: Engine, n: int, seed: int) -> np.ndarray:
    """Tokens each of ``n`` requests gains per decode iteration: 1, or with speculative decoding
    its own acceptance length (``Speculation.per_request``; drawn from a stream of its own, so the
    routing draws do not move)."""
    if engine.mtp_tokens == 0:
        return np.ones(n)
    return engine.speculation.per_request(n, np.random.default_rng([seed, 1]))


def _run_instance(ids, arrival_s, input_len, output_len, prefix_hit, engine: Engine, table: IterationTable,
                  kv_free, per_tok, state, ttft, done, dp: int = 1, prefilled: bool = False,
                  load_s: np.ndarray | None = None, layers: int = 1, tps: np.ndarray | None = None):
    """Iteration loop of one instance; fills ``ttft`` and ``done`` for ``ids`` (``ids`` sorted by
    arrival) and returns (energy J per device, preemptions, iterations, end time s). ``tps``: tokens
    per decode iteration of every request (``request_tokens_per_step``; default 1). Runs the
    compiled kernel (``sim_kernel.instance``) or the reference loop below, as
    ``engine.simulator`` says; both give the same numbers."""
    from planner.serving import sim_kernel

    tps_local = np.ones(len(ids)) if tps is None else np.ascontiguousarray(np.asarray(tps, float)[ids])
    run = sim_kernel.kernel("instance", engine.simulator)
    if run is None:
        return _run_instance_python(ids, arrival_s, input_len, output_len, prefix_hit, engine, table, kv_free,
                                    per_tok, state, ttft, done, dp, prefilled, load_s, layers, tps_local)
    t_local, d_local = ttft[ids].astype(float), done[ids].astype(float)     # copies, written back below
    hit = np.broadcast_to(np.asarray(prefix_hit, float), input_len.shape)[ids]
    need = np.maximum(np.round(input_len[ids] * (1 - hit)), 1).astype(np.int64)
    to_load = np.zeros(len(ids)) if load_s is None else np.asarray(load_s, float)[ids]
    max_seqs, budget = engine.instance_limits(dp)
    energy, preempt, iters, end, status = run(
        np.ascontiguousarray(arrival_s[ids], dtype=float), need, input_len[ids].astype(np.int64),
        output_len[ids].astype(np.int64), prefilled, budget, max_seqs,
        engine.chunked_prefill and engine.mixed_prefill, engine.kv_reservation == "full_length", 1 + engine.mtp_tokens,
        tps_local, float(kv_free), float(per_tok), float(state), table.axes_grid,
        table.geo, table.t_grid, table.w_grid, to_load, int(layers), t_local, d_local, table.dp_ranks,
        engine.dp_balance == "round_robin", table.t2_grid, table.w2_grid, table.SKEW, engine.prefill_delay_passes)
    if status == sim_kernel.STALLED:
        raise RuntimeError("simulator stalled: a request cannot be admitted into an empty instance")
    ttft[ids], done[ids] = t_local, d_local
    return energy, preempt, iters, end


def _run_instance_python(ids, arrival_s, input_len, output_len, prefix_hit, engine: Engine, table: IterationTable,
                         kv_free, per_tok, state, ttft, done, dp: int = 1, prefilled: bool = False,
                         load_s: np.ndarray | None = None, layers: int = 1, tps: np.ndarray | None = None):
    """Iteration loop of one instance; fills ``ttft`` and ``done`` for ``ids`` (``ids`` sorted by
    arrival). ``dp``: the instance's attention data-parallel ranks, counted per die as the engine
    runs them (``dp_ranks``), for its limits (``Engine.instance_limits``); the replicas the table
    counts hold the requests (``Replicas``).
    ``prefilled``: requests arrive with their KV cache and first token (a Splitwise token
    machine) and join the decode batch once their KV fits; preempted ones are recomputed here.
    ``load_s``: per request, the load of its hits from slower KV tiers, layer by layer in the
    iteration that starts its prompt (``exposed_prefill_s``: the iteration waits for it).
    ``tps``: tokens each request (local index) gains per decode iteration; default 1.
    With attention replicas each keeps its own requests' KV in a pool of its own, ``kv_free`` /
    replicas (SGLang and vLLM size one KV pool per data-parallel rank): a replica whose pool is full
    holds its own queue and preempts its own newest sequence while the others go on."""
    (max_seqs, budget_total), chunked = engine.instance_limits(dp), engine.chunked_prefill
    mixed = engine.mixed_prefill
    reserve_all = engine.kv_reservation == "full_length"
    # with speculative decoding a decoding sequence verifies 1 + k tokens per iteration and gains
    # tps[r] of them, its own acceptance length (progress in expectation: token counts are floats)
    verify = 1 + engine.mtp_tokens
    tps = np.ones(len(ids)) if tps is None else tps
    arr = arrival_s[ids]
    hit = np.broadcast_to(np.asarray(prefix_hit, float), input_len.shape)[ids]
    need_prefill = np.maximum(np.round(input_len[ids] * (1 - hit)), 1).astype(np.int64)
    to_load = None if load_s is None else np.asarray(load_s, float)[ids].tolist()
    full_in = input_len[ids].astype(np.int64)
    out = output_len[ids].astype(np.int64)
    waiting: deque[int] = deque()          # local indices, FCFS; preempted go to the front
    remaining_prefill = np.zeros_like(need_prefill) if prefilled else need_prefill.copy()
    run_id = np.empty(0, dtype=np.int64)   # decoding sequences
    run_left = np.empty(0, dtype=np.float64)
    run_ctx = np.empty(0, dtype=np.float64)
    ctx_sum = 0.0
    tps_sum = 0.0                          # tokens the batch gains per decode iteration
    generated = np.full(len(ids), 1 if prefilled else 0, dtype=np.float64)
    admitted = np.zeros(len(ids), dtype=bool)
    rep = Replicas(table.dp_ranks, len(ids), engine.dp_balance == "round_robin", max_seqs)
    share = replica_budget(budget_total, rep.ranks)
    placed, active, decoding = rep.placed, rep.active, rep.decoding
    pools = rep.ranks                      # KV pools: one per attention replica, one without
    pool_bytes = kv_free / pools
    kv_used = [0.0] * pools                # bytes held in each pool
    pool_of = np.zeros(len(ids), dtype=np.int64)   # each request's pool (its replica)

    def held(r: int) -> float:
        """KV bytes request ``r`` holds now (all it will ever need, if reserved at admission)."""
        return (full_in[r] + (out[r] if reserve_all else generated[r])) * per_tok + state

    now, nxt, energy, preemptions, iters = 0.0, 0, 0.0, 0, 0
    delay_passes = engine.prefill_delay_passes if rep.ranks > 1 and not prefilled else 0
    delayed = 0                            # passes the prompts have been held back in a row
    n_total = len(ids)
    finished = 0
    while finished < n_total:
        while nxt < n_total and arr[nxt] <= now:
            waiting.append(nxt)
            rep.place(nxt)
            pool_of[nxt] = rep.of[nxt]
            nxt += 1
        if prefilled:                      # transferred requests join the decode batch as KV allows
            joined = []
            while waiting and remaining_prefill[waiting[0]] == 0 and len(run_id) + len(joined) < max_seqs:
                r = waiting[0]
                need = held(r)
                if kv_used[pool_of[r]] + need > pool_bytes:
                    break
                kv_used[pool_of[r]] += need
                admitted[r] = True
                active[rep.of[r]] += 1
                decoding[rep.of[r]] += 1
                joined.append(waiting.popleft())
            if joined:
                left = out[joined] - generated[joined]
                run_id = np.concatenate([run_id, joined]).astype(np.int64)
                run_left = np.concatenate([run_left, left]).astype(np.float64)
                ctx = (full_in[joined] + generated[joined]).astype(np.float64)
                run_ctx = np.concatenate([run_ctx, ctx])
                ctx_sum += float(ctx.sum())
                tps_sum += float(tps[joined].sum())
        n_dec = len(run_id)
        if n_dec == 0 and not waiting:
            now = arr[nxt]
            continue
        # ---- schedule prompt tokens ----
        held_back = False
        if delay_passes and n_dec and waiting:
            # SGLang's PrefillDelayer: while only some replicas have a prompt to start, hold them
            # (decode only), at most delay_passes - 1 passes in a row
            ready = len({rep.of[r] for r in waiting if remaining_prefill[r] and (admitted[r] or active[rep.of[r]]
                                                                                 < rep.per_rank)})
            held_back = 0 < ready < rep.ranks and delayed < delay_passes - 1
        # prompts run in iterations of their own (no chunked prefill, or an engine that does not mix
        # decodes into them: SGLang), where the decodes of the replicas that prefill wait
        alone = (not chunked or not mixed) and bool(waiting) and not held_back
        budget = budget_total if alone else budget_total - n_dec * verify
        chunk: list[tuple[int, int]] = []
        seqs = n_dec
        unspent = [share] * rep.ranks if rep.ranks > 1 else None   # each replica's share of the budget
        full: set[int] = set()                     # pools that could not admit their next request
        for r in waiting if not held_back else ():
            if budget <= 0 or seqs >= max_seqs or remaining_prefill[r] == 0:
                break
            if unspent is not None and unspent[rep.of[r]] <= 0:
                continue                           # its replica's share is taken: the others go on
            if not admitted[r]:
                if rep.ranks > 1 and active[rep.of[r]] >= rep.per_rank:
                    continue                       # its replica is full: it waits there, the others go on
                need = held(r)
                j = pool_of[r]
                if pools > 1 and (j in full or kv_used[j] + need > pool_bytes):
                    full.add(j)                    # its replica's queue waits for KV space (FCFS there)
                    continue
                if kv_used[j] + need > pool_bytes:
                    break                          # admission waits for KV space (FCFS)
                kv_used[j] += need
                admitted[r] = True
                active[rep.of[r]] += 1
            take = int(min(remaining_prefill[r], budget))
            if unspent is not None:
                take = int(min(take, unspent[rep.of[r]]))
                unspent[rep.of[r]] -= take
            chunk.append((r, take))
            budget -= take
            seqs += 1
        prefill_only, go = alone and bool(chunk), None   # nothing admissible: the decodes go on
        if prefill_only and rep.ranks > 1 and n_dec:
            # attention replicas: those without a prompt this iteration decode in it all the same
            busy = {rep.of[r] for r, _ in chunk}
            go = np.fromiter((rep.of[r] not in busy for r in run_id), bool, n_dec)
            prefill_only = not go.any()
            go = None if prefill_only or go.all() else go
        p_tokens = sum(t for _, t in chunk)
        loading = 0.0 if to_load is None else sum(to_load[r] for r, _ in chunk)   # once, by a first chunk
        if p_tokens == 0 and n_dec == 0:
            if nxt >= n_total:
                raise RuntimeError("simulator stalled: a request cannot be admitted into an empty instance")
            now = max(now, arr[nxt])       # blocked on KV with nothing running: wait for arrivals
            continue
        steps = 1
        if prefill_only:
            tau, watts = table(0, 16.0, p_tokens)
        elif go is not None:                # the step of the replicas that decode, with the prompts
            n_go = int(go.sum())
            top = max(d for j, d in enumerate(decoding) if j not in busy)
            tau, watts = table(n_go, float(run_ctx[go].sum()) / n_go, p_tokens, top * rep.ranks / n_go)
        else:
            ctx_mean = ctx_sum / n_dec if n_dec else 16.0
            skew = rep.skew(n_dec)
            tau, watts = table(n_dec, ctx_mean, p_tokens, skew)
            if p_tokens == 0:
                # fast-forward identical decode-only iterations up to the next event: an arrival,
                # a sequence finishing, or the KV pool filling
                horizon = max(1, math.ceil(float((run_left / tps[run_id]).min()) - 1e-9))
                if nxt < n_total:
                    horizon = min(horizon, max(1, int(np.ceil((arr[nxt] - now) / tau))))
                room = kv_room(kv_used, pool_bytes, tps_sum, per_tok, pool_of[run_id], tps[run_id]) \
                    if per_tok > 0 and not reserve_all else horizon
                steps = max(1, min(horizon, room))
                if held_back:               # no further than the passes the prompts may still be held
                    steps = min(steps, delay_passes - 1 - delayed)
                if steps > 1:
                    tau, watts = table(n_dec, ctx_mean + (steps - 1) * (tps_sum / n_dec) / 2, 0, skew)
        if loading > 0:
            tau = float(exposed_prefill_s(tau, loading, layers))
            for r, _ in chunk:
                to_load[r] = 0.0
        delayed = delayed + steps if held_back else 0
        now += tau * steps
        energy += tau * steps * watts
        iters += steps
        # ---- decode progress ----
        if n_dec and not prefill_only:
            run_tps = tps[run_id] if go is None else np.where(go, tps[run_id], 0.0)
            gained = tps_sum if go is None else float(run_tps.sum())   # tokens the batch gains per step
            gain = steps * run_tps
            run_left -= gain
            run_ctx += gain
            ctx_sum += steps * gained
            generated[run_id] += gain
            if not reserve_all and pools == 1:
                kv_used[0] += gained * per_tok * steps
            elif not reserve_all:
                for j, g in enumerate(np.bincount(pool_of[run_id], weights=run_tps, minlength=pools)):
                    kv_used[j] += g * per_tok * steps
            fin = run_left <= 1e-9
            if fin.any():
                for r in run_id[fin]:
                    done[ids[r]] = now
                    kv_used[pool_of[r]] -= held(r)
                    decoding[rep.of[r]] -= 1
                    active[rep.of[r]] -= 1
                    placed[rep.of[r]] -= 1
                finished += int(fin.sum())
                keep = ~fin
                ctx_sum -= float(run_ctx[fin].sum())
                tps_sum -= float(tps[run_id[fin]].sum())
                run_id, run_left, run_ctx = run_id[keep], run_left[keep], run_ctx[keep]
            while (k := newest_over(kv_used, pool_bytes, pool_of[run_id])) >= 0:
                r = int(run_id[k])                 # its pool's newest sequence: preempted, recomputed later
                kv_used[pool_of[r]] -= held(r)
                decoding[rep.of[r]] -= 1
                active[rep.of[r]] -= 1
                admitted[r] = False
                remaining_prefill[r] = need_prefill[r] + round(generated[r])
                waiting.appendleft(r)
                ctx_sum -= float(run_ctx[k])
                tps_sum -= float(tps[r])
                keep = np.arange(len(run_id)) != k
                run_id, run_left, run_ctx = run_id[keep], run_left[keep], run_ctx[keep]
                preemptions += 1
        # ---- prefill progress ----
        new_ids, new_left, new_ctx = [], [], []
        for r, take in chunk:
            remaining_prefill[r] -= take
            if remaining_prefill[r] == 0:
                waiting.remove(r)
                if np.isnan(ttft[ids[r]]):
                    ttft[ids[r]] = now - arr[r]
                generated[r] += 1                  # a prefill (or recompute) ends with a new token
                left = out[r] - generated[r]
                if left <= 0:
                    done[ids[r]] = now
                    kv_used[pool_of[r]] -= held(r)
                    active[rep.of[r]] -= 1
                    placed[rep.of[r]] -= 1
                    finished += 1
                else:
                    decoding[rep.of[r]] += 1
                    new_ids.append(r)
                    new_left.append(left)
                    new_ctx.append(full_in[r] + generated[r])
        if new_ids:
            run_id = np.concatenate([run_id, new_ids]).astype(np.int64)
            run_left = np.concatenate([run_left, new_left]).astype(np.float64)
            run_ctx = np.concatenate([run_ctx, new_ctx]).astype(np.float64)
            ctx_sum += float(sum(new_ctx))
            tps_sum += float(sum(tps[new_ids].tolist()))
    return energy, preemptions, iters, now


def kv_room(kv_used: list[float], pool_bytes: float, tps_sum: float, per_tok: float, run_pool: np.ndarray,
            run_tps: np.ndarray) -> int:
    """Decode iterations until the first KV pool fills: each pool's free bytes over what its running
    sequences add per iteration (``run_pool``, ``run_tps``: each one's pool and tokens per
    iteration; one pool: the batch's ``tps_sum``)."""
    if len(kv_used) == 1:
        return int((pool_bytes - kv_used[0]) // (tps_sum * per_tok))
    rate = np.bincount(run_pool, weights=run_tps, minlength=len(kv_used))
    return min(int((pool_bytes - kv_used[j]) // (rate[j] * per_tok)) for j in range(len(kv_used)) if rate[j] > 0)


def newest_over(kv_used: list[float], pool_bytes: float, run_pool: np.ndarray) -> int:
    """Index in the running batch (admission order) of the newest sequence of a pool over its
    bytes, or -1 when no pool is over or an over-full pool has no decoding sequence to give up
    (its prompts in flight hold the bytes)."""
    over = [j for j in range(len(kv_used)) if kv_used[j] > pool_bytes]
    if not over:
        return -1
    hits = np.flatnonzero(np.isin(run_pool, over))
    return int(hits[-1]) if len(hits) else -1


def simulate_disaggregated(model: ModelSpec, prompt: tuple[HardwareProfile, Layout, int],
                           token: tuple[HardwareProfile, Layout, int], dtypes: DTypes, engine: Engine,
                           arrival_s: np.ndarray, input_len: np.ndarray, output_len: np.ndarray,
                           transfer_s, *, prefix_hit: float = 0.0, seed: int = 0,
                           warmup_frac: float = 0.1) -> SimResult:
    """Splitwise-style pools: prompts are served FCFS by the first free prompt instance (JSQ), which
    emits the first token; ``transfer_s(prompt_tokens, prefill_s)`` gives the exposed KV-transfer
    delay; token instances, taken in turn as KV caches arrive, decode the requests once their
    KV fits (waiting for space otherwise)."""
    (php, play, n_prompt), (thw, tlay, n_token) = prompt, token
    order = np.argsort(arrival_s, kind="stable")
    arrival_s, input_len, output_len = arrival_s[order], input_len[order], output_len[order]
    pre_tokens = np.maximum(np.round(input_len * (1 - prefix_hit)), 1)
    service = prompt_alone_s(model, php, play, dtypes, pre_tokens)
    prefill_done = fcfs_servers(arrival_s, service, n_prompt, engine.simulator)
    ready = prefill_done + np.asarray(transfer_s(pre_tokens, service), dtype=float)
    ttft = prefill_done - arrival_s
    return _decode_pool(model, thw, tlay, n_token, dtypes, engine, arrival_s, input_len, output_len, ready,
                        prefill_done, ttft, prefix_hit, warmup_frac, seed)


def fcfs_servers(arrival_s: np.ndarray, service_s: np.ndarray, servers: int, simulator: str = "python"
                 ) -> np.ndarray:
    """Completion times of jobs served FCFS, in arrival order, by the first free of ``servers``
    (``simulator``: as ``Engine.simulator``; the kernel gives the same numbers)."""
    import heapq

    from planner.serving import sim_kernel

    run = sim_kernel.kernel("fcfs", simulator)
    if run is not None:
        done = np.empty(len(arrival_s))
        run(np.ascontiguousarray(arrival_s, dtype=float), np.ascontiguousarray(service_s, dtype=float), servers, done)
        return done

    free = [0.0] * servers
    heapq.heapify(free)
    done = np.empty(len(arrival_s))
    for k, (a, s) in enumerate(zip(arrival_s, service_s, strict=True)):
        done[k] = max(a, heapq.heappop(free)) + s
        heapq.heappush(free, done[k])
    return done


def _decode_pool(model, thw, tlay, n_token, dtypes, engine, arrival_s, input_len, output_len, ready, first_token,
                 ttft, prefix_hit, warmup_frac, seed: int = 0) -> SimResult:
    """Token instances (taken in turn as KV caches arrive) decode requests whose first token was made
    elsewhere at ``first_token`` and whose KV is in place at ``ready``."""
    free_kv, per_tok, state, engine = cache_pools(model, thw, tlay, dtypes, engine)
    check_longest_fits(input_len, output_len, free_kv, per_tok, state, dp_ranks(thw, tlay), "a token instance",
                       pool_tokens(thw))
    dp = dp_ranks(thw, tlay)
    table = IterationTable.for_requests(model, thw, tlay, dtypes, engine, input_len, output_len)
    by_ready = np.argsort(ready, kind="stable")    # token machines taken in turn (balanced, like JSQ)
    tps = request_tokens_per_step(engine, len(arrival_s), seed)
    done = np.full(len(arrival_s), np.nan)
    scratch = np.full(len(arrival_s), np.nan)      # token instances do not set TTFT
    energy, preempt, iters = 0.0, 0, 0
    for k in range(n_token):
        ids = by_ready[k::n_token]
        e, pr, it, _ = _run_instance(ids, ready, input_len, output_len, prefix_hit, engine, table, free_kv,
                                     per_tok, state, scratch, done, dp, prefilled=True, tps=tps)
        energy += e * int(np.ravel(tlay.devices)[0])
        preempt += pr
        iters += it
    return split_result(arrival_s, input_len, output_len, ttft, first_token, done, energy, preempt, iters, warmup_frac,
                        thw.efficiency.request_overhead.value)


def split_result(arrival_s, input_len, output_len, ttft, first_token, done, energy, preempt, iters,
                 warmup_frac, host_s: float = 0.0) -> SimResult:
    """SimResult of requests (arrival order) whose first token came at ``first_token`` (TPOT is
    measured from it), the warm-up's arrivals left out; ``host_s`` = the engine's per-request host
    time (tokenize, admit), added to TTFT and E2E."""
    keep = np.isfinite(done) & (arrival_s >= arrival_s[0] + warmup_frac * (arrival_s[-1] - arrival_s[0]))
    o = output_len[keep]
    tpot = np.where(o > 1, (done[keep] - first_token[keep]) / np.maximum(o - 1, 1), 0.0)
    span = float(np.nanmax(done[keep]) - arrival_s[keep].min()) if keep.any() else float("nan")
    return SimResult(ttft[keep] + host_s, tpot, done[keep] - arrival_s[keep] + host_s, input_len[keep], o, span,
                     energy, preempt, iters, _steady_throughput(arrival_s, done, warmup_frac))


def simulate_remote_prefill(model: ModelSpec, local_prefill: tuple[HardwareProfile, Layout, int],
                            remote_prefill: tuple[HardwareProfile, Layout, int],
                            decode: tuple[HardwareProfile, Layout, int], dtypes: DTypes, engine: Engine,
                            arrival_s: np.ndarray, input_len: np.ndarray, output_len: np.ndarray, *,
                            threshold: float, kv_bytes: np.ndarray, link_bytes_per_s: float, rtt_s: float,
                            bandwidth_cv: float, max_link_wait_s: float, local_hit: float = 0.0,
                            remote_hit: float = 0.0, prefill_fixed_s: tuple[float, float] = (0.0, 0.0), seed: int = 0,
                            warmup_frac: float = 0.1) -> tuple[SimResult, dict]:
    """Prefill-as-a-Service: prompts longer than ``threshold`` are prefilled remotely and their KV
    crosses one FCFS link whose bandwidth fluctuates per transfer (log-normal, ``bandwidth_cv``);
    a long request falls back to local prefill when the link's backlog exceeds ``max_link_wait_s``
    (bandwidth-aware admission). ``prefill_fixed_s``: (local, remote) time each prefill holds its
    instance beyond the roofline (``Site.prefill_fixed_s``). Returns the result and link statistics."""
    rng = np.random.default_rng(seed)
    order = np.argsort(arrival_s, kind="stable")
    arrival_s, input_len, output_len, kv_bytes = arrival_s[order], input_len[order], output_len[order], kv_bytes[order]
    (lhw, llay, n_local), (rhw, rlay, n_remote), (dhw, dlay, n_dec) = local_prefill, remote_prefill, decode

    def service(hw, lay, hit, fixed_s):
        return prompt_alone_s(model, hw, lay, dtypes, np.maximum(np.round(input_len * (1 - hit)), 1)) + fixed_s

    s_local = service(lhw, llay, local_hit, prefill_fixed_s[0])
    s_remote = service(rhw, rlay, remote_hit, prefill_fixed_s[1])
    sigma = np.sqrt(np.log1p(bandwidth_cv**2))
    factor = rng.lognormal(-sigma**2 / 2, sigma, len(arrival_s)) if bandwidth_cv > 0 else np.ones(len(arrival_s))
    transfer = kv_bytes / (link_bytes_per_s * factor)
    # route in arrival order; remote prefill and link are FCFS; admission looks at the link backlog
    import heapq

    remote_free = [0.0] * n_remote
    heapq.heapify(remote_free)
    link_free = 0.0
    ready = np.empty(len(arrival_s))
    first = np.empty(len(arrival_s))
    is_remote = np.zeros(len(arrival_s), dtype=bool)
    local_idx = []
    for k in range(len(arrival_s)):
        if input_len[k] > threshold:
            start = max(arrival_s[k], remote_free[0])
            done = start + s_remote[k]
            if max(link_free - done, 0.0) <= max_link_wait_s:
                heapq.heapreplace(remote_free, done)
                link_free = max(link_free, done) + transfer[k]
                first[k], ready[k], is_remote[k] = done, link_free + rtt_s, True
                continue
        local_idx.append(k)
    local_idx = np.asarray(local_idx, dtype=np.int64)
    done_local = fcfs_servers(arrival_s[local_idx], s_local[local_idx], n_local, engine.simulator)
    first[local_idx] = done_local
    ready[local_idx] = done_local
    ttft = ready - arrival_s          # remote requests' first token waits for their KV to arrive
    res = _decode_pool(model, dhw, dlay, n_dec, dtypes, engine, arrival_s, input_len, output_len, ready, first, ttft,
                       0.0, warmup_frac, seed)
    span = float(arrival_s[-1] - arrival_s[0]) or 1.0
    stats = {"offload_fraction": float(is_remote.mean()),
             "link_gbps": float(kv_bytes[is_remote].sum() * 8 / 1e9 / span),
             "fallback_fraction": float(((input_len > threshold) & ~is_remote).mean())}
    return res, stats
