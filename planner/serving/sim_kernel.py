"""The simulator's loops as kernels over preallocated numpy arrays (no Python object per request),
written so that numba can compile them (``pip install "planner[fast]"``) and plain Python can run
them unchanged.

Each kernel does, operation for operation, what the reference loop in ``simulate`` /
``simulate_pools`` does, so it returns the same floats, not merely similar ones: the same table
cells and interpolation order, numpy's pairwise summation where the reference sums an array, a
heap keyed like the reference's tuples, round-half-even where the reference rounds. The tests
compare both on fixed seeds, uncompiled and (when numba imports) compiled.

numba is imported only inside :func:`compiled`, never on the ``whatif``/``plan`` import path.
"""

from __future__ import annotations

import functools
import math

import numpy as np

STALLED = -1          # status of an instance that cannot admit a request into an empty KV pool


# ---------------------------------------------------------------------------------------------------
# the iteration table: trilinear interpolation on geometric axes (planner.serving.simulate.IterationTable)

def cell(axes: np.ndarray, geo: np.ndarray, d: int, x: float) -> tuple[int, float]:
    """(cell index, fraction within it) of ``x`` on axis ``d`` (axes[d]: 0 then geometric points)."""
    a1 = axes[d, 1]
    if x <= a1:
        return 0, max(x, 0.0) / a1
    i = min(int((math.log(x) - geo[d, 0]) / geo[d, 1]) + 1, axes.shape[1] - 2)
    lo, hi = axes[d, i], axes[d, i + 1]
    return i, (x - lo) / (hi - lo)


def interp(g: np.ndarray, i: int, a: float, j: int, b: float, k: int, c: float) -> float:
    """Trilinear interpolation of grid ``g`` in cell (i, j, k) at fractions (a, b, c)."""
    v = 0.0
    v += (1 - b) * (1 - c) * (g[i, j, k] * (1 - a) + g[i + 1, j, k] * a)
    v += (1 - b) * c * (g[i, j, k + 1] * (1 - a) + g[i + 1, j, k + 1] * a)
    v += b * (1 - c) * (g[i, j + 1, k] * (1 - a) + g[i + 1, j + 1, k] * a)
    v += b * c * (g[i, j + 1, k + 1] * (1 - a) + g[i + 1, j + 1, k + 1] * a)
    return v


def lookup(axes, geo, t_grid, w_grid, n: float, ctx: float, p: float) -> tuple[float, float]:
    """(iteration time s, device power W) at (decodes, mean context, prefill tokens)."""
    i, a = cell(axes, geo, 0, n)
    j, b = cell(axes, geo, 1, ctx)
    k, c = cell(axes, geo, 2, p)
    return interp(t_grid, i, a, j, b, k, c), interp(w_grid, i, a, j, b, k, c)


def lookup_skewed(axes, geo, t_grid, w_grid, t2_grid, w2_grid, skew_hi: float, n: float, ctx: float, p: float,
                  skew: float) -> tuple[float, float]:
    """``lookup`` at a busiest-replica skew: linear between the grid at 1 and the one at
    ``skew_hi`` (at 1, ``lookup`` itself)."""
    if skew == 1.0:
        return lookup(axes, geo, t_grid, w_grid, n, ctx, p)
    i, a = cell(axes, geo, 0, n)
    j, b = cell(axes, geo, 1, ctx)
    k, c = cell(axes, geo, 2, p)
    t1, w1 = interp(t_grid, i, a, j, b, k, c), interp(w_grid, i, a, j, b, k, c)
    t2, w2 = interp(t2_grid, i, a, j, b, k, c), interp(w2_grid, i, a, j, b, k, c)
    f = (skew - 1.0) / (skew_hi - 1.0)
    return t1 + f * (t2 - t1), w1 + f * (w2 - w1)


def place(rank_of, placed, r: int, ranks: int, round_robin: bool, turn: int) -> int:
    """Place request ``r`` on an attention replica (``simulate.Replicas.place``); returns the turn."""
    if round_robin:
        j = turn % ranks
        turn += 1
    else:
        j = 0
        for q in range(1, ranks):
            if placed[q] < placed[j]:
                j = q
    rank_of[r] = j
    placed[j] += 1
    return turn


def skew_of(decoding, ranks: int, n_dec: int) -> float:
    """Decoding sequences on the busiest replica over the mean (``simulate.Replicas.skew``)."""
    if ranks <= 1 or n_dec == 0:
        return 1.0
    most = decoding[0]
    for q in range(1, ranks):
        most = max(most, decoding[q])
    return most * ranks / n_dec


def block_sum(x: np.ndarray, lo: int, n: int) -> float:
    """numpy's sum of ``x[lo:lo+n]`` for n <= 128: sequential below 8, else eight accumulators."""
    if n < 8:
        res = 0.0
        for q in range(lo, lo + n):
            res += x[q]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    q = 8
    while q < n - n % 8:
        r0 += x[lo + q]
        r1 += x[lo + q + 1]
        r2 += x[lo + q + 2]
        r3 += x[lo + q + 3]
        r4 += x[lo + q + 4]
        r5 += x[lo + q + 5]
        r6 += x[lo + q + 6]
        r7 += x[lo + q + 7]
        q += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while q < n:
        res += x[lo + q]
        q += 1
    return res


def pairwise_sum(x: np.ndarray, lo: int, n: int) -> float:
    """``x[lo:lo+n].sum()`` in numpy's order (pairwise above 128 elements, halves cut at a multiple
    of 8), so a sum of non-integer floats comes out bit for bit as numpy's. Iterative (an explicit
    stack of pending halves), as numba compiles no self-recursion here."""
    if n <= 128:
        return block_sum(x, lo, n)
    s_lo, s_n, s_phase = np.empty(128, np.int64), np.empty(128, np.int64), np.empty(128, np.int64)
    vals = np.empty(128)
    top, nv = 0, 0
    s_lo[0], s_n[0], s_phase[0] = lo, n, 0
    top = 1
    while top:
        top -= 1
        a, m, phase = s_lo[top], s_n[top], s_phase[top]
        if m <= 128:
            vals[nv] = block_sum(x, a, m)
            nv += 1
        elif phase == 1:                        # both halves done: left + right
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        else:
            m2 = m // 2
            m2 -= m2 % 8
            s_lo[top], s_n[top], s_phase[top] = a, m, 1
            s_lo[top + 1], s_n[top + 1], s_phase[top + 1] = a + m2, m - m2, 0
            s_lo[top + 2], s_n[top + 2], s_phase[top + 2] = a, m2, 0      # popped first: left
            top += 3
    return vals[0]


# ---------------------------------------------------------------------------------------------------
# one instance under continuous batching (planner.serving.simulate._run_instance_python)

def held(r: int, full_in, out, generated, reserve_all: bool, per_tok: float, state: float) -> float:
    """KV bytes request ``r`` holds now (all it will ever need, if reserved at admission)."""
    if reserve_all:
        return (full_in[r] + out[r]) * per_tok + state
    return (full_in[r] + generated[r]) * per_tok + state


def decode_steps(least: float, to_arrival_s: float, tau: float, kv_room: float, kv_per_step: float,
                 reserve_all: bool) -> int:
    """Identical decode-only iterations to run at once: up to the next event (a sequence ending
    after ``least`` iterations, an arrival in ``to_arrival_s``, or the KV pool filling at
    ``kv_per_step`` bytes per step)."""
    horizon = max(1, math.ceil(least - 1e-9))
    if to_arrival_s < math.inf:
        horizon = min(horizon, max(1, math.ceil(to_arrival_s / tau)))
    room = int(kv_room // kv_per_step) if kv_per_step > 0 and not reserve_all else horizon
    return max(1, min(horizon, room))


def pool_room(kv_used, pool_bytes: float, per_tok: float, rate, run_id, run_tps, rank_of, n_run: int) -> float:
    """Decode iterations until the first KV pool fills (``simulate.kv_room``): each pool's free
    bytes over what its sequences add per iteration, their tokens summed in batch order into
    ``rate`` (scratch, one slot per pool)."""
    rate[:] = 0.0
    for q in range(n_run):
        rate[rank_of[run_id[q]]] += run_tps[q]
    room = math.inf
    for j in range(len(kv_used)):
        if rate[j] > 0:
            room = min(room, float(int((pool_bytes - kv_used[j]) // (rate[j] * per_tok))))
    return room


def ring_remove(wq, head: int, cap: int, start: int, r: int) -> int:
    """Remove ``r`` (at or after position ``start``) from the ring ``wq``: the entries before it
    move one place back; returns the new head."""
    p = start
    while wq[(head + p) % cap] != r:
        p += 1
    while p > 0:
        wq[(head + p) % cap] = wq[(head + p - 1) % cap]
        p -= 1
    return (head + 1) % cap


def batch_append(run_id, run_left, run_ctx, run_gen, run_tps, n_run: int, r: int, left: float, ctx: float, gen: float,
                 tps: float) -> int:
    """Append request ``r`` to the running batch; returns its new size."""
    run_id[n_run], run_left[n_run], run_ctx[n_run], run_gen[n_run], run_tps[n_run] = r, left, ctx, gen, tps
    return n_run + 1


def instance(arr, need_prefill, full_in, out, prefilled: bool, budget_total: int, max_seqs: int, chunked: bool,
             reserve_all: bool, verify: int, tps, kv_free: float, per_tok: float, state: float,
             axes, geo, t_grid, w_grid, to_load, layers: int, ttft, done, ranks: int = 1, round_robin: bool = False,
             t2_grid=None, w2_grid=None, skew_hi: float = 2.0, delay_passes: int = 0):
    """Iteration loop of one instance over its requests (arrival order): fills ``ttft`` and ``done``
    (local, NaN on entry); returns (energy J per device, preemptions, iterations, end time s,
    status). ``to_load``: seconds to load each request's hits from slower KV tiers, layer by layer
    in the iteration of its first chunk, which takes the longer of compute and load plus one layer
    of the shorter (``perf.kv_tiers.exposed_prefill_s``); zeroed once paid. The waiting queue is a
    ring buffer (preempted requests go to its front); the running batch is arrays in admission
    order (the newest is preempted first). ``tps``: tokens each request gains per decode iteration.
    ``ranks`` attention replicas (``simulate.Replicas``): the step is looked up at the busiest one's
    skew, between ``t_grid`` (skew 1) and ``t2_grid`` (skew ``skew_hi``); ``delay_passes``: hold the
    prompts while only some replicas have one, at most that many passes in a row (PrefillDelayer).
    Each replica keeps its requests' KV in a pool of ``kv_free / ranks`` (``simulate``'s reference
    loop: a full pool holds its replica's queue and gives up its own newest sequence)."""
    if t2_grid is None:
        t2_grid, w2_grid = t_grid, w_grid
    n = len(arr)
    cap = max(n, 1)
    wq = np.empty(cap, np.int64)               # waiting queue (ring): wq[(head + p) % cap]
    head, count = 0, 0
    remaining = np.zeros(cap, np.int64)
    if not prefilled:
        remaining[:n] = need_prefill
    generated = np.full(cap, 1.0 if prefilled else 0.0)
    admitted = np.zeros(cap, np.bool_)
    run_id = np.empty(cap, np.int64)
    run_left = np.empty(cap)
    run_ctx = np.empty(cap)
    run_gen = np.empty(cap)                    # tokens generated (generated[] holds them off the batch)
    run_tps = np.empty(cap)                    # tokens gained per decode iteration
    # every request gains the same tokens per iteration (no speculation, or no spread): the least
    # tokens left then gives the fewest iterations left (x / t is monotone in x) and a decode pass
    # that ends nobody needs no comparisons; otherwise ``least`` is the fewest iterations left
    uniform = True
    for q in range(n):
        if tps[q] != tps[0]:
            uniform = False
    unit = tps[0] if uniform and n else 1.0    # least / unit = fewest iterations left
    least = math.inf
    buf = np.empty(cap)                        # contexts of the sequences ending in one iteration
    fin_id = np.empty(cap, np.int64)           # and their ids
    fin_tps = np.empty(cap)                    # and tokens per iteration
    rank_of = np.zeros(cap, np.int64)          # each request's attention replica
    placed = np.zeros(max(ranks, 1), np.int64)     # unfinished requests per replica
    decoding = np.zeros(max(ranks, 1), np.int64)   # decoding sequences per replica
    active = np.zeros(max(ranks, 1), np.int64)     # admitted (KV held), unfinished requests per replica
    per_rank = max(1, max_seqs // max(ranks, 1))   # sequences a replica admits
    share = max(1, budget_total // ranks) if ranks > 1 else budget_total   # prompt tokens a replica takes
    unspent = np.zeros(max(ranks, 1), np.int64)    # of it (``simulate.replica_budget``) left this iteration
    turn = 0
    if ranks <= 1 or prefilled:
        delay_passes = 0
    delayed = 0                                # passes the prompts have been held back in a row
    has_prompt = np.zeros(max(ranks, 1), np.bool_)   # replicas with a prompt to start (PrefillDelayer)
    busy = np.zeros(max(ranks, 1), np.bool_)         # replicas prefilling in a prompts-only iteration
    run_go = np.empty(cap)                     # tokens each sequence gains in such an iteration
    ch_id = np.empty(cap, np.int64)            # this iteration's prompt chunk
    ch_take = np.empty(cap, np.int64)
    n_run = 0
    ctx_sum, tps_sum = 0.0, 0.0                # running sums over the batch
    pools = max(ranks, 1)                      # KV pools: one per attention replica
    pool_bytes = kv_free / pools
    kv_used = np.zeros(pools)                  # bytes held in each pool
    pool_full = np.zeros(pools, np.bool_)      # pools that could not admit their next request
    pool_gain = np.zeros(pools)                # tokens each pool's sequences gain per iteration
    now, nxt, energy, preemptions, iters, finished = 0.0, 0, 0.0, 0, 0, 0
    while finished < n:
        while nxt < n and arr[nxt] <= now:
            wq[(head + count) % cap] = nxt
            if ranks > 1:
                turn = place(rank_of, placed, nxt, ranks, round_robin, turn)
            count += 1
            nxt += 1
        if prefilled:                          # transferred requests join the decode batch as KV allows
            joined = 0
            while count > 0 and remaining[wq[head]] == 0 and n_run < max_seqs:
                r = wq[head]
                need = held(r, full_in, out, generated, reserve_all, per_tok, state)
                if kv_used[rank_of[r]] + need > pool_bytes:
                    break
                kv_used[rank_of[r]] += need
                admitted[r] = True
                if ranks > 1:
                    active[rank_of[r]] += 1
                    decoding[rank_of[r]] += 1
                head = (head + 1) % cap
                count -= 1
                least = min(least, (out[r] - generated[r]) / (1.0 if uniform else tps[r]))
                n_run = batch_append(run_id, run_left, run_ctx, run_gen, run_tps, n_run, r, out[r] - generated[r],
                                     full_in[r] + generated[r], generated[r], tps[r])
                joined += 1
            if joined:
                ctx_sum += pairwise_sum(run_ctx, n_run - joined, joined)
                tps_sum += pairwise_sum(run_tps, n_run - joined, joined)
        n_dec = n_run
        if n_dec == 0 and count == 0:
            now = arr[nxt]
            continue
        # ---- schedule prompt tokens ----
        held_back = False
        if delay_passes > 0 and n_dec > 0 and count > 0:
            has_prompt[:] = False
            ready = 0
            for p in range(count):
                r = wq[(head + p) % cap]
                j = rank_of[r]
                if remaining[r] > 0 and not has_prompt[j] and (admitted[r] or active[j] < per_rank):
                    has_prompt[j] = True
                    ready += 1
                    if ready == ranks:
                        break
            held_back = ready > 0 and ready < ranks and delayed < delay_passes - 1
        # prompts run in iterations of their own (``chunked`` False: no chunked prefill, or an engine
        # that does not mix decodes into them), where the decodes of the replicas that prefill wait
        prefill_only = (not chunked) and count > 0 and not held_back
        budget = budget_total if prefill_only else budget_total - n_dec * verify
        n_ch, seqs, p_tokens = 0, n_dec, 0
        if ranks > 1:
            unspent[:] = share
            pool_full[:] = False
        for p in range(0 if held_back else count):
            r = wq[(head + p) % cap]
            if budget <= 0 or seqs >= max_seqs or remaining[r] == 0:
                break
            if ranks > 1 and unspent[rank_of[r]] <= 0:
                continue                       # its replica's share is taken: the others go on
            if not admitted[r]:
                if ranks > 1 and active[rank_of[r]] >= per_rank:
                    continue                   # its replica is full: it waits there, the others go on
                need = held(r, full_in, out, generated, reserve_all, per_tok, state)
                j = rank_of[r]
                if pools > 1 and (pool_full[j] or kv_used[j] + need > pool_bytes):
                    pool_full[j] = True        # its replica's queue waits for KV space (FCFS there)
                    continue
                if kv_used[j] + need > pool_bytes:
                    break                      # admission waits for KV space (FCFS)
                kv_used[j] += need
                admitted[r] = True
                if ranks > 1:
                    active[rank_of[r]] += 1
            take = min(remaining[r], budget)
            if ranks > 1:
                take = min(take, unspent[rank_of[r]])
                unspent[rank_of[r]] -= take
            ch_id[n_ch] = r
            ch_take[n_ch] = take
            n_ch += 1
            p_tokens += take
            budget -= take
            seqs += 1
        if n_ch == 0:
            prefill_only = False               # nothing admissible: the decodes go on
        paused, n_go, top = False, 0, 0        # some replicas prefill, the others decode
        if prefill_only and ranks > 1 and n_dec > 0:
            busy[:] = False
            for q in range(n_ch):
                busy[rank_of[ch_id[q]]] = True
            for j in range(ranks):
                if not busy[j]:
                    n_go += decoding[j]
                    top = max(top, decoding[j])
            if n_go > 0:
                prefill_only = False
                paused = n_go < n_dec
        loading = 0.0
        for q in range(n_ch):
            loading += to_load[ch_id[q]]
        if p_tokens == 0 and n_dec == 0:
            if nxt >= n:
                return energy, preemptions, iters, now, STALLED
            now = max(now, arr[nxt])           # blocked on KV with nothing running: wait for arrivals
            continue
        steps = 1
        if prefill_only:
            tau, watts = lookup(axes, geo, t_grid, w_grid, 0.0, 16.0, float(p_tokens))
        elif paused:                           # the step of the replicas that decode, with the prompts
            m = 0
            for q in range(n_run):
                if not busy[rank_of[run_id[q]]]:
                    buf[m] = run_ctx[q]
                    m += 1
            skew = top * ranks / n_go
            ctx_go = pairwise_sum(buf, 0, n_go) / n_go
            tau, watts = lookup_skewed(axes, geo, t_grid, w_grid, t2_grid, w2_grid, skew_hi, float(n_go), ctx_go,
                                       float(p_tokens), skew)
        else:
            ctx_mean = ctx_sum / n_dec if n_dec else 16.0
            skew = skew_of(decoding, ranks, n_dec) if ranks > 1 else 1.0
            if skew == 1.0:                    # direct, not via lookup_skewed: +16% on the colocated bench
                tau, watts = lookup(axes, geo, t_grid, w_grid, float(n_dec), ctx_mean, float(p_tokens))
            else:
                tau, watts = lookup_skewed(axes, geo, t_grid, w_grid, t2_grid, w2_grid, skew_hi, float(n_dec),
                                           ctx_mean, float(p_tokens), skew)
            if p_tokens == 0:
                # fast-forward identical decode-only iterations up to the next event
                if pools == 1:
                    steps = decode_steps(least / unit, arr[nxt] - now if nxt < n else math.inf, tau,
                                         pool_bytes - kv_used[0], tps_sum * per_tok, reserve_all)
                else:
                    fills = per_tok > 0 and not reserve_all
                    room = pool_room(kv_used, pool_bytes, per_tok, pool_gain, run_id, run_tps, rank_of, n_run) \
                        if fills else 0.0
                    steps = decode_steps(least / unit, arr[nxt] - now if nxt < n else math.inf, tau, room,
                                         1.0 if fills else 0.0, reserve_all)
                if held_back:                  # no further than the passes the prompts may still be held
                    steps = min(steps, delay_passes - 1 - delayed)
                if steps > 1 and skew == 1.0:
                    tau, watts = lookup(axes, geo, t_grid, w_grid, float(n_dec),
                                        ctx_mean + (steps - 1) * (tps_sum / n_dec) / 2, 0.0)
                elif steps > 1:
                    tau, watts = lookup_skewed(axes, geo, t_grid, w_grid, t2_grid, w2_grid, skew_hi, float(n_dec),
                                               ctx_mean + (steps - 1) * (tps_sum / n_dec) / 2, 0.0, skew)
        if loading > 0:
            tau = max(tau, loading) + min(tau, loading) / layers
            for q in range(n_ch):
                to_load[ch_id[q]] = 0.0
        delayed = delayed + steps if held_back else 0
        now += tau * steps
        energy += tau * steps * watts
        iters += steps
        # ---- decode progress ----
        n_pre = 0                               # requests preempted in this iteration
        gained = tps_sum                        # tokens the batch gains per step
        if n_dec and not prefill_only and pools > 1 and not reserve_all:
            pool_gain[:] = 0.0                  # each pool's share, summed in batch order
            for q in range(n_run):
                j = rank_of[run_id[q]]
                pool_gain[j] += 0.0 if paused and busy[j] else run_tps[q]
        if n_dec and not prefill_only:
            n_fin, m = 0, 0
            if uniform and not paused and least - steps * unit > 1e-9:   # nobody ends (x - gain is monotone in x)
                gain = steps * unit
                for q in range(n_run):          # three plain loops: vectorized when compiled
                    run_left[q] -= gain
                for q in range(n_run):
                    run_ctx[q] += gain
                for q in range(n_run):
                    run_gen[q] += gain
                least -= gain
                m = n_run
            elif uniform and not paused:        # one pass: progress, and the batch compacted past the ended
                least = math.inf
                gain = steps * unit
                for q in range(n_run):
                    r = run_id[q]
                    left = run_left[q] - gain
                    ctx = run_ctx[q] + gain
                    gen = run_gen[q] + gain
                    if left <= 1e-9:
                        generated[r] = gen
                        fin_id[n_fin] = r
                        buf[n_fin] = ctx
                        fin_tps[n_fin] = unit
                        n_fin += 1
                    else:
                        run_id[m], run_left[m], run_ctx[m], run_gen[m] = r, left, ctx, gen
                        least = min(least, left)
                        m += 1
            else:   # the same pass, each sequence at its own tokens per iteration: numba does not unswitch
                    # one loop on `uniform`, which cost the colocated benchmark ~8%; none for the
                    # sequences of the replicas that prefill in a prompts-only iteration (paused)
                least = math.inf
                if paused:
                    for q in range(n_run):
                        run_go[q] = 0.0 if busy[rank_of[run_id[q]]] else run_tps[q]
                    gained = pairwise_sum(run_go, 0, n_run)
                rate = run_go if paused else run_tps
                for q in range(n_run):
                    r = run_id[q]
                    gain = steps * rate[q]
                    left = run_left[q] - gain
                    ctx = run_ctx[q] + gain
                    gen = run_gen[q] + gain
                    if left <= 1e-9:
                        generated[r] = gen
                        fin_id[n_fin] = r
                        buf[n_fin] = ctx
                        fin_tps[n_fin] = run_tps[q]
                        n_fin += 1
                    else:
                        run_id[m], run_left[m], run_ctx[m], run_gen[m], run_tps[m] = r, left, ctx, gen, run_tps[q]
                        least = min(least, left / run_tps[q])
                        m += 1
                if uniform:                     # the uniform branches keep the fewest tokens left
                    least *= unit
            n_run = m
            ctx_sum += steps * gained
            if not reserve_all and pools == 1:
                kv_used[0] += gained * per_tok * steps
            elif not reserve_all:
                for j in range(pools):
                    kv_used[j] += pool_gain[j] * per_tok * steps
            if n_fin:
                for q in range(n_fin):
                    r = fin_id[q]
                    done[r] = now
                    kv_used[rank_of[r]] -= held(r, full_in, out, generated, reserve_all, per_tok, state)
                    if ranks > 1:
                        decoding[rank_of[r]] -= 1
                        active[rank_of[r]] -= 1
                        placed[rank_of[r]] -= 1
                finished += n_fin
                ctx_sum -= pairwise_sum(buf, 0, n_fin)
                tps_sum -= pairwise_sum(fin_tps, 0, n_fin)
            while True:                         # a pool over its bytes gives up its newest sequence
                over = False
                for j in range(pools):
                    over = over or kv_used[j] > pool_bytes
                if not over:
                    break
                k = n_run - 1
                while k >= 0 and kv_used[rank_of[run_id[k]]] <= pool_bytes:
                    k -= 1
                if k < 0:
                    break
                r = run_id[k]
                generated[r] = run_gen[k]
                kv_used[rank_of[r]] -= held(r, full_in, out, generated, reserve_all, per_tok, state)
                if ranks > 1:
                    decoding[rank_of[r]] -= 1
                    active[rank_of[r]] -= 1
                admitted[r] = False
                remaining[r] = need_prefill[r] + np.int64(np.rint(generated[r]))
                head = (head - 1) % cap
                wq[head] = r
                count += 1
                ctx_sum -= run_ctx[k]
                tps_sum -= run_tps[k]
                for q in range(k, n_run - 1):   # recompute it later; the batch keeps its order
                    run_id[q], run_left[q], run_ctx[q] = run_id[q + 1], run_left[q + 1], run_ctx[q + 1]
                    run_gen[q], run_tps[q] = run_gen[q + 1], run_tps[q + 1]
                n_run -= 1
                preemptions += 1
                n_pre += 1
            if n_pre:
                least = math.inf
                for q in range(n_run):
                    least = min(least, run_left[q] / (1.0 if uniform else run_tps[q]))
        # ---- prefill progress ----
        added = 0
        for q in range(n_ch):
            r = ch_id[q]
            remaining[r] -= ch_take[q]
            if remaining[r] == 0:
                head = ring_remove(wq, head, cap, n_pre, r)   # the chunk is the queue's front, behind the
                count -= 1                                  # requests preempted in this iteration
                if math.isnan(ttft[r]):
                    ttft[r] = now - arr[r]
                generated[r] += 1              # a prefill (or recompute) ends with a new token
                left = out[r] - generated[r]
                if left <= 0:
                    done[r] = now
                    kv_used[rank_of[r]] -= held(r, full_in, out, generated, reserve_all, per_tok, state)
                    if ranks > 1:
                        active[rank_of[r]] -= 1
                        placed[rank_of[r]] -= 1
                    finished += 1
                else:
                    if ranks > 1:
                        decoding[rank_of[r]] += 1
                    least = min(least, left / (1.0 if uniform else tps[r]))
                    n_run = batch_append(run_id, run_left, run_ctx, run_gen, run_tps, n_run, r, left,
                                         full_in[r] + generated[r], generated[r], tps[r])
                    added += 1
        if added:
            s, t = 0.0, 0.0
            for q in range(n_run - added, n_run):
                s += run_ctx[q]
                t += run_tps[q]
            ctx_sum += s
            tps_sum += t
    return energy, preemptions, iters, now, 0


# ---------------------------------------------------------------------------------------------------
# binary min-heap on (time, index) pairs held in arrays, for the pool dispatchers

def heap_push(ht, hk, hp, size: int, t: float, k: int, payload: float) -> int:
    """Push (t, k) with ``payload``; returns the new size."""
    q = size
    while q > 0:
        up = (q - 1) // 2
        if ht[up] < t or (ht[up] == t and hk[up] <= k):
            break
        ht[q], hk[q], hp[q] = ht[up], hk[up], hp[up]
        q = up
    ht[q], hk[q], hp[q] = t, k, payload
    return size + 1


def heap_pop(ht, hk, hp, size: int) -> int:
    """Drop the least (t, k) (read it from ht[0], hk[0], hp[0] first); returns the new size."""
    size -= 1
    t, k, payload = ht[size], hk[size], hp[size]
    q = 0
    while True:
        c = 2 * q + 1
        if c >= size:
            break
        if c + 1 < size and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hk[c + 1] < hk[c])):
            c += 1
        if t < ht[c] or (t == ht[c] and k <= hk[c]):
            break
        ht[q], hk[q], hp[q] = ht[c], hk[c], hp[c]
        q = c
    if size > 0:
        ht[q], hk[q], hp[q] = t, k, payload
    return size


def fcfs(arrival_s, service_s, servers: int, done):
    """Completion times (into ``done``) of jobs served FCFS, in arrival order, by the first free
    of ``servers`` (planner.serving.simulate.fcfs_servers)."""
    ht = np.zeros(servers)
    hk = np.zeros(servers, np.int64)
    hp = np.zeros(servers)
    for r in range(len(arrival_s)):
        free = ht[0]
        size = heap_pop(ht, hk, hp, servers)
        done[r] = max(arrival_s[r], free) + service_s[r]
        heap_push(ht, hk, hp, size, done[r], 0, 0.0)


def better(vals, a: int, b: int) -> int:
    """The leaf of the lower value, the lower index on a tie (``a`` < ``b``; -1 = no leaf)."""
    if b < 0:
        return a
    if a < 0:
        return b
    return b if vals[b] < vals[a] else a


def tree_update(tree, vals, leaves: int, i: int) -> None:
    """Replay the matches above leaf ``i`` of a tournament tree after ``vals[i]`` changed."""
    node = (leaves + i) // 2
    while node >= 1:
        tree[node] = better(vals, tree[2 * node], tree[2 * node + 1])
        node //= 2


def jsq_prompt(arrival_s, tokens, service_s, kinds, done, where):
    """Prompt machine with the fewest pending prompt tokens, the lowest index on a tie (numpy's
    argmin; planner.serving.simulate_pools.jsq_prompt), found by a tournament tree."""
    m = len(kinds)
    pending = np.zeros(m)
    free = np.zeros(m)
    leaves = 1
    while leaves < m:
        leaves *= 2
    tree = np.full(2 * leaves, -1, np.int64)
    for i in range(m):
        tree[leaves + i] = i
    for node in range(leaves - 1, 0, -1):
        tree[node] = better(pending, tree[2 * node], tree[2 * node + 1])
    n = len(arrival_s)
    ht, hk, hp = np.empty(max(n, 1)), np.empty(max(n, 1), np.int64), np.empty(max(n, 1))
    size = 0
    for r in range(n):
        a = arrival_s[r]
        while size and ht[0] <= a:
            pending[hk[0]] -= hp[0]
            tree_update(tree, pending, leaves, hk[0])
            size = heap_pop(ht, hk, hp, size)
        k = tree[1] if m > 1 else 0
        done[r] = max(a, free[k]) + service_s[kinds[k], r]
        free[k] = done[r]
        pending[k] += tokens[r]
        tree_update(tree, pending, leaves, k)
        where[r] = k
        size = heap_push(ht, hk, hp, size, done[r], k, float(tokens[r]))


def jsq_token(ready_s, output_tokens, step_s, where):
    """Token machine with the fewest pending decode tokens (planner.serving.simulate_pools.jsq_token)."""
    m = len(step_s)
    end_sum = np.zeros(m)
    count = np.zeros(m)
    pend = np.empty(m)
    n = len(ready_s)
    ht, hk, hp = np.empty(max(n, 1)), np.empty(max(n, 1), np.int64), np.empty(max(n, 1))
    size = 0
    for r in range(n):
        t = ready_s[r]
        while size and ht[0] <= t:
            end_sum[hk[0]] -= ht[0]
            count[hk[0]] -= 1
            size = heap_pop(ht, hk, hp, size)
        for q in range(m):                      # a plain loop (vectorized when compiled), then the argmin
            pend[q] = (end_sum[q] - count[q] * t) / step_s[q]
        k = 0
        for q in range(1, m):
            if pend[q] < pend[k]:
                k = q
        end = t + output_tokens[r] * step_s[k]
        end_sum[k] += end
        count[k] += 1
        where[r] = k
        size = heap_push(ht, hk, hp, size, end, k, 0.0)


# ---------------------------------------------------------------------------------------------------
# selection and compilation

_HELPERS = (cell, interp, lookup, lookup_skewed, place, skew_of, block_sum, pairwise_sum, held, decode_steps, pool_room,
            ring_remove, batch_append, heap_push, heap_pop, better, tree_update)
_KERNELS = {"instance": instance, "fcfs": fcfs, "jsq_prompt": jsq_prompt, "jsq_token": jsq_token}
_compiled: dict[str, object] = {}


@functools.cache
def numba_available() -> bool:
    """Whether numba imports (the optional ``fast`` extra)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def njit(f, helpers=()):
    """``f`` compiled by numba with ``helpers`` callable from it, cached on disk where numba can
    write its cache (else compiled in every process)."""
    import numba
    from numba.extending import register_jitable

    for h in helpers:
        register_jitable(h)
    try:
        return numba.njit(cache=True, nogil=True)(f)
    except RuntimeError:                       # no writable cache location: compile in every process
        return numba.njit(nogil=True)(f)


def compiled(name: str):
    """The numba-compiled kernel ``name`` (compiled once per process, cached on disk by numba)."""
    if not _compiled:
        for key, f in _KERNELS.items():
            _compiled[key] = njit(f, _HELPERS)
    return _compiled[name]


def use_numba(mode: str) -> bool:
    """Whether ``Engine.simulator`` = ``mode`` runs compiled kernels: not for "python", nor "auto"
    without numba; "numba" without numba is an input error."""
    if mode == "python" or (mode == "auto" and not numba_available()):
        return False
    if not numba_available():
        from planner.errors import InputError

        raise InputError('engine.simulator: numba is not installed; pip install "planner[fast]" (or numba), '
                         'or use simulator: python')
    return True


def kernel(name: str, mode: str):
    """The compiled kernel ``name`` for ``Engine.simulator`` = ``mode``, or None when the reference
    loop is to run (``use_numba``)."""
    return compiled(name) if use_numba(mode) else None
