"""Analytic steady state of one instance under continuous batching, vectorized.

The curve is parametrized by the mean number of sequences decoding, ``n`` (a grid per
candidate), which gives everything else explicitly, with no inner solve:

* balance: per iteration ``n tps / E[O]`` requests finish (``tps`` = tokens a sequence gains per
  iteration: 1, or more with speculative decoding), so ``p = n tps E[I_prefill] / E[O]`` prompt
  tokens must be prefilled per iteration on average;
* TPOT(n) = time of a decode iteration of ``n`` sequences plus the prefill time they wait for:
  ``p`` tokens at the marginal cost of a prompt-sized chunk (prompts arrive in compute-bound
  lumps, mixed into the iteration with chunked prefill or run before it without, or on an engine
  that does not mix them: SGLang, ``Engine.mixed_prefill``); with
  speculative decoding an iteration verifies ``1 + k`` tokens per sequence, runs ``k`` draft
  passes and yields ``tps`` tokens, so TPOT is the iteration time over ``tps``;
* Little's law: the request rate this sustains is ``lambda(n) = n / (E[O] TPOT(n))``;
* TTFT: prefill is a single server of ``mu`` tokens/s (the iteration budget left by decodes,
  packed with queued prompts); a request's own prompt then runs at the pace of a prompt-sized
  chunk; the wait follows Kingman's G/G/1 approximation ``E[W] = rho/(1-rho) (ca^2 + cs^2)/2 E[S]``
  with an exponential tail beyond the probability ``rho`` of waiting; hits from slower KV tiers
  load layer by layer under the prompt's compute (``perf.kv_tiers.exposed_prefill_s``);
* TPOT percentiles: normal, with the variance of the decode batch (~Poisson(n), M/G/inf, scaled
  by the arrival burstiness ``ca^2``) plus that of the prompt lumps landing in a request's gaps;
* limits: KV-cache memory (``n`` sequences at their length-biased mean context, or at their full
  prompt + output length when the engine reserves it at admission), the iteration
  token budget, ``max_num_seqs``, and ``rho < 1``.

Less accurate than the simulator near saturation (rho > ~0.85), for heavy-tailed prompt lengths
(TTFT tails), for output-length tails (E2E), and at very small n (discrete batches).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.normal import cdf as ndtr
from planner.normal import ppf as ndtri
from planner.perf.kv_tiers import exposed_prefill_s
from planner.perf.memory import (
    cache_split,
    free_kv_bytes_device,
    kv_bytes_per_token_device,
    pools_per_device,
    state_bytes_per_sequence_device,
    state_pool_split,
)
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout, on_dies
from planner.serving.batching import Engine, iteration
from planner.serving.slo import PERCENTILES, SLO
from planner.serving.workload import LengthStats

GRID = 48
N_LIGHT = 0.02   # lightest mean decode batch on the curve
_Z = {"p50": 0.0, "p90": float(ndtri(0.9)), "p99": float(ndtri(0.99))}
_QV = {"p50": 0.5, "p90": 0.9, "p99": 0.99}

# limit codes per grid point
KV, BUDGET, SEQS = "kv_cache_memory", "iteration_token_budget", "max_num_seqs"
KV_CAP = "kv_pool_tokens"       # the launch's cap on each KV pool, below what memory holds
PREFILL_CAPACITY = "prefill_capacity"   # the arrival rate exceeds what prefill can serve (rho >= 1)


@dataclass(frozen=True)
class Curve:
    """Arrays of shape (candidates, GRID), per instance."""

    n: np.ndarray
    rate: np.ndarray            # requests/s sustained
    tpot: dict[str, np.ndarray]   # mean, p50, p90, p99
    ttft: dict[str, np.ndarray]
    e2e: dict[str, np.ndarray]
    rho: np.ndarray             # prefill server utilisation
    wait: np.ndarray            # mean wait for the prefill server (s)
    power_w: np.ndarray         # per device, time-averaged
    peak_power_w: np.ndarray    # per device, during iterations carrying a prompt chunk
    mu: np.ndarray              # prompt tokens/s the prefill server processes when busy
    n_max: np.ndarray           # (candidates,) largest decode batch memory/budget/engine allow
    limit: np.ndarray           # (candidates,) what bounds n_max
    devices: np.ndarray         # (candidates,)
    mean_output: float

    @property
    def output_tokens_per_s(self) -> np.ndarray:
        return self.rate * self.mean_output

    def row(self, i: int) -> Curve:
        """The curve of candidate ``i`` alone (arrays keep their leading axis, of length 1)."""
        return self.rows(slice(i, i + 1))

    def rows(self, sel) -> Curve:
        """The curves of candidates ``sel`` (a slice, indices or a mask)."""

        def cut(v):
            if isinstance(v, dict):
                return {k: x[sel] for k, x in v.items()}
            return v[sel] if isinstance(v, np.ndarray) else v

        return Curve(**{f.name: cut(getattr(self, f.name)) for f in fields(self)})


def max_decode_batch(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, engine: Engine,
                     stats: LengthStats) -> tuple[np.ndarray, np.ndarray]:
    """(largest mean decode batch, the limit that sets it) per candidate."""
    engine = engine.on(hw)
    free = free_kv_bytes_device(model, hw, lay, dtypes, engine.speculation)
    held = stats.mean_full_len if engine.kv_reservation == "full_length" else stats.mean_decode_ctx
    per_tok = kv_bytes_per_token_device(model, lay, dtypes.kv, hw)
    # an engine that pools recurrent states apart (SGLang) carves its state slots out first: a
    # sequence then takes only KV from what they leave, and the slots cap the batch (both memory);
    # a launch's token cap holds each pool (a device's share: one per attention replica as the
    # engine counts them, per die)
    state = state_bytes_per_sequence_device(model, lay, dtypes.kv, hw)
    kv_free, slot_cap, beside = cache_split(hw, free, state, per_tok, pools_per_device(hw, lay))
    per_seq = (per_tok * held + beside) / lay.attention_dp
    n_kv = np.minimum(np.maximum(kv_free, 0) / per_seq, slot_cap * lay.attention_dp)
    capped = kv_free < state_pool_split(hw, free, state)[0]
    # the whole instance's, over its DP ranks as the engine counts them (per die)
    seqs, tokens = engine.instance_limits(on_dies(hw, lay)[1].attention_dp, hw)
    verify = 1.0 + engine.mtp_tokens            # tokens each decoding sequence puts in an iteration
    n_budget = (tokens - np.asarray(lay.attention_dp, float)) / verify + 0 * n_kv   # decodes must fit the budget
    limits = np.stack(np.broadcast_arrays(n_kv, n_budget, seqs + 0 * n_kv))
    names = np.array([KV, BUDGET, SEQS, KV_CAP], dtype=object)
    which = limits.argmin(axis=0)
    return limits.min(axis=0), names[np.where((which == 0) & capped, 3, which)]


@dataclass(frozen=True)
class LoadGrid:
    """The roofline part of a serving curve, arrays (candidates, GRID): the decode-batch grid and
    the iteration times and powers at each point. It depends on the engine's budget and batching
    and on context and prompt lengths, not on the prompt rate, so curves that differ only in
    ``mean_prefill`` (the disaggregated decode pool) can share it."""

    n: np.ndarray
    n_max: np.ndarray
    limit: np.ndarray
    chunk: np.ndarray          # prompt tokens riding an iteration with the decodes
    packed: np.ndarray         # prompt tokens of an iteration packed with queued prompts
    t_dec: np.ndarray
    t_chunk: np.ndarray
    t_packed: np.ndarray
    p_dec: np.ndarray
    p_chunk: np.ndarray
    # attention data parallelism: s per prompt token beyond one prompt's lump in an iteration (more
    # prompts go to other replicas, which prefill them side by side); NaN without replicas
    spread: np.ndarray | float = np.nan
    replicas: np.ndarray | float = 1.0   # attention data-parallel replicas per instance (candidates, 1)
    # prompts run in iterations of their own, the decodes waiting (``prompts_alone``): bool or (candidates, 1)
    alone: np.ndarray | bool = False


def load_grid(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, engine: Engine,
              stats: LengthStats, grid: int = GRID, power: bool = True) -> LoadGrid:
    """Decode-batch grid of each candidate and the iteration times along it (one roofline call;
    ``power=False``: iteration powers not computed, NaN, for searches that rank by speed only)."""
    engine = engine.on(hw)
    n_max, limit = max_decode_batch(model, hw, lay, dtypes, engine, stats)
    n_max = np.atleast_1d(n_max)
    # mean decode batch from N_LIGHT (an instance idle most of the time) up to n_max
    frac = np.linspace(0.0, 1.0, grid)[None, :]
    top = np.maximum(n_max[:, None], 1.0)
    n = np.where(n_max[:, None] >= 1, N_LIGHT * (top / N_LIGHT) ** frac, np.nan)
    L = Layout.of(*(np.atleast_1d(x)[:, None, None] for x in (lay.tp, lay.ep, lay.pp)))
    Lp, ctx = stats.mean_prompt_len, stats.mean_decode_ctx
    spec = engine.speculation
    verify = 1.0 + spec.draft_tokens           # tokens verified per sequence
    ranks = on_dies(hw, L)[1].attention_dp                                   # (candidates, 1, 1), per die
    C = engine.instance_limits(np.reshape(ranks, (-1, 1)), hw)[1]          # budget of the whole instance
    # Prompts arrive in lumps: an iteration carrying a prompt chunk is compute-bound and every
    # decoding sequence waits for it, so charge prefill at its marginal cost in a chunk of the
    # typical prompt size rather than spreading it thinly over memory-bound decode iterations.
    room = C - n * verify                      # budget left by the decodes
    alone = prompts_alone(engine, ranks)        # prompts in iterations of their own (bool or (candidates, 1))
    # a prompt alone takes up to the whole budget, one with the decodes what they leave
    chunk = np.where(alone, np.minimum(C, Lp), np.minimum(np.maximum(room, 1.0), Lp))
    # While prompts queue, the engine packs as many as its budget holds into each iteration: that,
    # not one prompt per iteration, is the prefill server's capacity (it matters for short prompts).
    packed = np.maximum(np.where(alone, C, room), chunk)
    busy_n = np.maximum(n, 1.0)                 # an iteration runs at least one sequence
    # three iterations per point, (candidates, 3, grid): decodes alone, with a chunk, packed; with
    # chunked prefill all three carry the same decodes, so their operators are built once (axis 1
    # broadcasts) - the same values as three separate calls
    if alone is False:
        dec = busy_n[:, None, :]
    else:
        with_prompt = np.where(alone, 0.0, busy_n)
        dec = np.stack([busy_n, with_prompt, with_prompt], axis=1)
    # with attention data parallelism a prompt is prefilled on one replica (``Step.replica_tokens``)
    # at most its share of the budget per iteration (SGLang: --chunked-prefill-size / dp): a lone
    # lump is that share of one prompt, all its replica's; a packed iteration fills every share
    per_replica = np.inf
    if np.any(ranks > 1):
        budget = np.reshape(np.asarray(C, float), (-1, 1, 1)) if np.ndim(C) else float(C)
        share = np.broadcast_to(np.where(ranks > 1, np.maximum(np.floor(budget / ranks), 1.0), np.inf), ranks.shape)
        chunk = np.minimum(chunk, share[:, 0])
        per_replica = np.concatenate([np.full(ranks.shape, np.inf), np.full(ranks.shape, np.inf), share], axis=1)
    it = iteration(model, hw, L, dtypes, dec, ctx, np.stack([0 * n, chunk, packed], axis=1), Lp, spec, power,
                   replica_tokens=per_replica)
    t_dec, t_chunk, t_packed = (it.time_s[:, k] for k in range(3))
    p_dec, p_chunk = it.power_w[:, 0], it.power_w[:, 1]
    spread, replicas = np.nan, 1.0
    if np.any(ranks > 1):
        side = np.where(alone, t_packed, t_packed - t_dec) / packed
        replicas = np.reshape(ranks, (-1, 1)).astype(float)
        spread = np.where(replicas > 1, side, np.nan)
    return LoadGrid(n, n_max, np.atleast_1d(limit), chunk, packed, t_dec, t_chunk, t_packed, p_dec, p_chunk, spread,
                    replicas, alone)


def prompts_alone(engine: Engine, ranks) -> bool | np.ndarray:
    """Whether an iteration that runs prompts runs nothing else, the decodes waiting for it: without
    chunked prefill, or on an engine that does not mix them (``Engine.mixed_prefill``: SGLang). Per
    candidate where that depends on its attention replicas (``ranks``, (candidates, 1, 1)): with
    replicas, those without a prompt decode in the same iteration, which the curve keeps as the
    mixed iteration (the replica that prefills holds its own decodes: a 1 / dp share the simulator
    has and the curve leaves out)."""
    if not engine.chunked_prefill:
        return True
    if engine.mixed_prefill:
        return False
    return np.reshape(np.asarray(ranks), (-1, 1)) <= 1


def serving_curve(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, engine: Engine,
                  stats: LengthStats, arrival_scv: float = 1.0, grid: int = GRID,
                  load: LoadGrid | None = None, power: bool = True,
                  percentiles: tuple[str, ...] = PERCENTILES, ttft: bool = True) -> Curve:
    """Steady-state metrics of each candidate layout on a grid of decode batch sizes (``load``: the
    candidates' ``load_grid``, if already computed for the same engine, layouts and lengths;
    ``power=False``: powers left NaN, for callers that do not read them; ``percentiles``: the
    latency percentiles computed besides the means, for a search that reads only some: each is
    the same number whichever others are computed; ``ttft=False``: TTFT and E2E not computed, left
    empty, for a decode pool whose TTFT is its prefill pool's). ``engine`` runs as it does on
    ``hw`` (``Engine.on``: a framework mapping by device)."""
    engine = engine.on(hw)
    g = load if load is not None else load_grid(model, hw, lay, dtypes, engine, stats, grid, power)
    n, n_max, limit, chunk, packed = g.n, g.n_max, g.limit, g.chunk, g.packed
    t_dec, t_chunk, t_packed, p_dec, p_chunk = g.t_dec, g.t_chunk, g.t_packed, g.p_dec, g.p_chunk
    I, O = stats.mean_prefill, stats.mean_output  # noqa: E741
    tps = engine.speculation.tokens_per_step   # tokens yielded per sequence per iteration
    p = n * tps * I / O                        # prompt tokens per iteration, on average
    marginal = np.where(g.alone, t_chunk, t_chunk - t_dec) / chunk   # s per prompt token
    t_pre = p * marginal                       # prompt work per iteration
    held = 0.0                                 # iterations a prompt waits for the prefill delayer
    replicated = np.isfinite(g.spread)         # candidates with attention data-parallel replicas
    if np.any(replicated):
        # with attention replicas a prompt lump costs its replica all of it (``Step.replica_tokens``)
        # and the step waits for the busiest replica: with a Poisson number of lumps per iteration
        # (mean p / chunk) on different replicas, the busiest holds chunk x P(at least one) of the
        # p tokens; the rest are other replicas', prefilled side by side (their expert share only)
        lumps = p / chunk
        share = -np.expm1(-lumps)              # iterations that carry a lump
        if engine.prefill_delay_passes:
            # the delayer releases prompts when every replica has one (a coupon collector's dp H_dp
            # lumps) or after its passes: one lump per release on the busiest replica. The lump that
            # opens a cycle waits all of it, the m - 1 others of a cycle of m half of it on average
            r = g.replicas
            harmonic = np.log(r) + 0.5772156649 + 1 / (2 * r)
            cycle = np.clip(r * harmonic / np.maximum(lumps, 1e-12), 1.0, engine.prefill_delay_passes)
            share = np.minimum(share, 1 / cycle)
            per_cycle = np.maximum(lumps * cycle, 1.0)
            held = np.where(replicated, (cycle - 1) * (1 + 1 / per_cycle) / 2, 0.0)
        busiest = chunk * share
        t_pre = np.where(replicated, busiest * marginal + (p - busiest) * g.spread, t_pre)
    t_iter = t_dec + t_pre                     # mean iteration time
    # a prompt held by the prefill delayer waits that many iterations (the mean and every percentile)
    hold_s = held * t_iter if np.any(held) else 0.0
    tpot = t_iter if tps == 1 else t_iter / tps   # each iteration yields tps tokens per sequence (x / 1 = x)
    mu = packed / t_packed                     # prompt tokens/s while the prefill queue is busy
    if power or not np.isnan(p_dec).all():
        pre_j = p_chunk * p * marginal
        if np.any(replicated):
            pre_j = np.where(replicated, p_chunk * t_pre, pre_j)
        power_w = (p_dec * t_dec + pre_j) / t_iter
        idle = hw.power.idle.value
        power_w = idle + (power_w - idle) * np.minimum(1.0, n)   # below one sequence the instance idles part-time
    else:       # iteration powers not computed (NaN): so is every average of them, and it is not computed either
        power_w = np.full(np.shape(t_iter), np.nan)
    rate = n / (O * tpot)
    rho = rate * I / mu
    s_mean = I / mu                            # server time per request (Kingman's E[S])
    own = t_chunk / chunk                      # s per token of a request's own prompt, riding its iterations
    cs2 = stats.second_prefill / I**2 - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(rho < 1, rho / (1 - rho) * (arrival_scv + cs2) / 2 * s_mean, np.inf)
    slope = np.gradient(tpot, axis=1) / np.maximum(np.gradient(n, axis=1), 1e-9)
    # spread of a request's TPOT: the decode batch fluctuates (~Poisson(n), scaled by ca^2), and
    # a Poisson number of prompt lumps (lambda x decode time) lands in its O - 1 gaps
    var_tpot = (np.maximum(slope, 0) ** 2 * n * arrival_scv
                + rate * tpot * marginal**2 * stats.second_prefill * stats.mean_inv_decode)
    if engine.speculation.spread:
        # and each request accepts drafts at its own rate: its TPOT is the step over its own L_i
        var_tpot = var_tpot + (tpot * engine.speculation.inverse_cv) ** 2
    sd_tpot = np.sqrt(var_tpot)
    if not ttft:
        tpot_q = {"mean": tpot} | {k: tpot + _Z[k] * sd_tpot for k in PERCENTILES if k in percentiles}
        return Curve(n, rate, tpot_q, {}, {}, rho, wait, power_w, np.maximum(p_chunk, p_dec), mu, n_max, limit,
                     np.atleast_1d(lay.devices), O)
    t_iter = t_iter + hw.efficiency.request_overhead.value   # host time per request (tokenize, admit)
    # a request's own prompt, with its hits from slower KV tiers loading layer by layer alongside
    # (the mean pairs the means, each percentile the percentiles, as the other TTFT terms add up)
    layers = model.num_layers
    ttft_q = {"mean": wait + exposed_prefill_s(I * own, stats.mean_load_s, layers) + t_iter + hold_s}
    tpot_q = {"mean": tpot}
    e2e = {}
    for k, (pq, oq, lq) in zip(PERCENTILES, zip(stats.prefill_quantiles, stats.output_quantiles,
                                                 stats.load_quantiles, strict=True), strict=True):
        if k not in percentiles:
            continue
        q = _QV[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            w_q = np.where(rho > 1 - q, wait / np.maximum(rho, 1e-12) * np.log(np.maximum(rho, 1e-12) / (1 - q)), 0.0)
        ttft_q[k] = w_q + exposed_prefill_s(pq * own, lq, layers) + t_iter + hold_s
        tpot_q[k] = tpot + _Z[k] * sd_tpot
        # the median request: median TTFT and median output; tails: mean TTFT plus the output tail
        e2e[k] = (ttft_q[k] if k == "p50" else ttft_q["mean"]) + (oq - 1) * tpot_q[k]
    e2e["mean"] = ttft_q["mean"] + (O - 1) * tpot
    devices = np.atleast_1d(lay.devices)
    return Curve(n, rate, tpot_q, ttft_q, e2e, rho, wait, power_w, np.maximum(p_chunk, p_dec), mu, n_max,
                 limit, devices, O)


def slo_ok(curve: Curve, slo: SLO, stats_support: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Grid points (candidates, GRID) that are stable and meet every SLO target."""
    ok = np.isfinite(curve.rate) & (curve.rho < 1)
    for metric, values in (("ttft_s", curve.ttft), ("tpot_s", curve.tpot), ("e2e_s", curve.e2e)):
        for p, bound in getattr(slo, metric).items():
            ok &= values[p] <= bound
    if slo.attainment is not None:
        ok &= attainment(curve, slo) >= slo.attainment
    return ok


def attainment(curve: Curve, slo: SLO) -> np.ndarray:
    """Analytic fraction of requests meeting the per-request thresholds (independence assumed)."""
    with np.errstate(all="ignore"):       # inf/NaN mark unstable points; they stay out of range
        return _attainment(curve, slo)


def _attainment(curve: Curve, slo: SLO) -> np.ndarray:
    th = slo.thresholds()
    frac = np.ones_like(curve.rate)
    if "ttft_s" in th:
        # TTFT = service + wait, service at its mean; P(wait <= x) = 1 - rho exp(-x rho / E[W])
        x = th["ttft_s"] - (curve.ttft["mean"] - curve.wait)
        rho = np.clip(curve.rho, 1e-12, 1 - 1e-12)
        frac *= np.where(x < 0, 0.0, 1 - rho * np.exp(-x * rho / np.maximum(curve.wait, 1e-12)))
    if "tpot_s" in th:
        spread = np.maximum(curve.tpot["p90"] - curve.tpot["mean"], 1e-12) / _Z["p90"]
        frac *= ndtr((th["tpot_s"] - curve.tpot["mean"]) / spread)
    if "e2e_s" in th:
        spread = np.maximum(curve.e2e["p90"] - curve.e2e["p50"], 1e-12) / _Z["p90"]
        frac *= ndtr((th["e2e_s"] - curve.e2e["p50"]) / spread)
    return frac


def interpolate(curve: Curve, values: np.ndarray, rate) -> np.ndarray:
    """``values`` (candidates, GRID) at per-instance request ``rate`` (candidates,), linear in rate;
    NaN beyond the curve's largest rate."""
    rate = np.broadcast_to(np.asarray(rate, float), curve.rate.shape[:1])
    r = np.where(np.isfinite(curve.rate), curve.rate, np.inf)
    idx = np.clip((r < rate[:, None]).sum(axis=1), 1, r.shape[1] - 1)
    rows = np.arange(len(rate))
    r0, r1 = r[rows, idx - 1], r[rows, idx]
    w = np.clip((rate - r0) / np.where(r1 > r0, r1 - r0, 1.0), 0.0, 1.0)
    out = values[rows, idx - 1] * (1 - w) + values[rows, idx] * w
    below = rate < r[:, 0]          # lighter than one decoding sequence: take the n=1 point
    out = np.where(below, values[:, 0], out)
    return np.where(rate > np.nanmax(np.where(np.isfinite(curve.rate), curve.rate, np.nan), axis=1), np.nan, out)


def erlang_c(servers, load) -> np.ndarray:
    """Probability of waiting in an M/M/c queue with ``servers`` servers and offered load
    ``load`` = lambda E[S] (< servers); vectorized, stable recursion on the Erlang-B formula."""
    c = np.asarray(servers, dtype=float)
    a = np.asarray(load, dtype=float)
    c, a = np.broadcast_arrays(c, a)
    b = np.ones(np.shape(a))
    for k in range(1, int(np.max(c)) + 1):          # Erlang B: B_k = a B_{k-1} / (k + a B_{k-1})
        nb = a * b / (k + a * b)
        b = np.where(k <= c, nb, b)
    rho = a / c
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rho < 1, b / (1 - rho * (1 - b)), 1.0)


def multi_server_wait(rate, servers, mean_service, service_scv, arrival_scv=1.0) -> tuple[np.ndarray, np.ndarray]:
    """(mean wait, utilisation) of a G/G/c FCFS queue, Allen-Cunneen approximation:
    ``W = C(c, a) / (c mu - lambda) x (ca^2 + cs^2) / 2`` (exact for M/M/c when both are 1)."""
    c = np.asarray(servers, dtype=float)
    a = np.asarray(rate, dtype=float) * mean_service
    rho = a / c
    pw = erlang_c(c, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(rho < 1, pw * mean_service / (c * (1 - rho)) * (arrival_scv + service_scv) / 2, np.inf)
    return wait, rho


def at_rates(curve: Curve, values: np.ndarray, rates) -> np.ndarray:
    """``values`` of a one-candidate curve at many per-instance ``rates`` (linear in rate; NaN
    beyond the curve's largest rate; rates lighter than one decoding sequence take the n=1 point).
    Only the rising branch is read: past the largest rate, more sequences in flight serve fewer
    requests per second (the KV pool or the prefill server saturates), so the same rate would map
    to two points."""
    r, v = curve.rate[0], values[0]
    keep = np.isfinite(r) & np.isfinite(v)
    if keep.any():
        keep[int(np.argmax(np.where(np.isfinite(r), r, -np.inf))) + 1:] = False
    r, v = r[keep], v[keep]
    rates = np.asarray(rates, dtype=float)
    if r.size == 0:
        return np.full(rates.shape, np.nan)
    out = np.interp(rates, r, v)
    return np.where(rates > r[-1], np.nan, out)
