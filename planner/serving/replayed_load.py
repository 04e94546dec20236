"""The most Poisson load one instance holds under an SLO, found by replaying runs in the
simulator: what MLPerf's Server and Interactive scenarios measure (the highest scheduled rate
whose run meets P99 TTFT and P99 TPOT bounds over at least 600 s of requests).

The analytic curve (``load_point.max_load``) answers the same question in milliseconds from a
mean-field queue; a replay runs the iteration loop itself - chunked prefill, KV pool, the length
spread of a dataset - so it can not hold more than the engine does when kept full. It is slower
(one simulated run per bisection step, ~10 runs of up to 60,000 requests: about a second).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import InfeasibleError
from planner.serving.slo import PERCENTILES, SLO

RUN_S = 600.0                  # MLPerf's minimum Server duration (loadgen mlperf.conf min_duration)
REQUESTS = (2_000, 60_000)     # requests replayed per load: RUN_S of the bracket's rate, within these
STEPS = 10                     # bisection steps on the rate (resolution: the bracket / 1,024)
STABLE = 0.97                  # a load is held if completions keep up with arrivals (a growing backlog is not)


@dataclass(frozen=True)
class ReplayedLoad:
    """The held load and its replayed latencies (seconds, per percentile)."""

    requests_per_s: float
    output_tokens_per_s: float
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    requests: int              # requests replayed per load
    bracket_rate: float        # the rate the bisection started from, req/s (1.25x the saturated rate)


def max_load_replayed(model, hw, lay, dtypes, engine, slo: SLO, saturated_rate: float, *,
                      input_len: int, output_len: int, lengths=None) -> ReplayedLoad:
    """Largest Poisson rate whose replayed run meets every bound of ``slo`` (TTFT with the
    engine's per-request front-end time, as ``simulate`` reports it; TPOT per request:
    (last token - first token) / (output - 1); E2E),
    bisected between 0 and a rate the engine cannot hold (1.25x ``saturated_rate``, its closed
    loop kept full, doubled until a run fails). Requests: ``lengths`` (a ``Workload`` whose
    length mix they have) or all ``input_len`` + ``output_len``, as many as ``RUN_S`` of the
    bracket's rate brings (a near-capacity load's queue grows slowly: a short run would pass
    it); one seeded draw of gaps scaled by 1 / rate, so feasibility moves with the rate alone.
    The first tenth of arrivals is warm-up (``simulate``); a load whose completions fall behind
    its arrivals (``STABLE``) is not held, whatever the bounds. ``slo.attainment`` is not used.
    Raises ``InfeasibleError`` (with the bounds missed) where even 1/1,024 of the bracket misses."""
    from planner.serving.simulate import IterationTable, simulate

    hi = 1.25 * float(saturated_rate)
    n = int(np.clip(RUN_S * hi, *REQUESTS))
    if lengths is not None:
        inp, out = lengths.sample(n, seed=0)[1:]
    else:
        inp, out = np.full(n, int(input_len)), np.full(n, int(output_len))
    table = IterationTable.for_requests(model, hw, lay, dtypes, engine, inp, out)
    gaps = np.random.default_rng(1).exponential(1.0, n)
    bounds = [(metric, p, bound) for metric in ("ttft_s", "tpot_s", "e2e_s")
              for p, bound in getattr(slo, metric).items()]

    def missed(r) -> list[str]:
        """The bounds run ``r`` misses, in words."""
        out_of = [(metric, p, bound, np.percentile(getattr(r, metric), float(p[1:]))) for metric, p, bound in bounds]
        return [f"{metric}.{p} {v:.3g} s > {bound:g} s" for metric, p, bound, v in out_of if v > bound]

    def run(rate: float):
        arrival = np.cumsum(gaps / rate)
        r = simulate(model, hw, lay, dtypes, engine, arrival, inp, out, table=table)
        t0 = arrival[0] + 0.1 * (arrival[-1] - arrival[0])          # simulate's warm-up
        offered = np.count_nonzero(arrival >= t0) / (arrival[-1] - t0)
        return r.requests_per_s >= STABLE * offered and not missed(r), r

    start = hi
    for _ in range(4):
        if not run(hi)[0]:
            break
        hi *= 2.0
    lo, best, lightest = 0.0, None, None
    for _ in range(STEPS):
        mid = 0.5 * (lo + hi)
        held, r = run(mid)
        lo, hi, best = (mid, hi, r) if held else (lo, mid, best)
        lightest = lightest if held else (mid, r)
    if best is None:
        rate, r = lightest
        from planner.serving.load_point import slo_remedy

        raise InfeasibleError(f"{model.name} tp={lay.tp} pp={lay.pp} ep={lay.ep} on {hw.name} misses the SLO even at "
                              f"{rate:.3g} req/s, the lightest load replayed "
                              f"({'; '.join(missed(r)) or 'completions fall behind arrivals'}); {slo_remedy(hw, slo)}")
    pct = lambda x: {p: float(np.percentile(x, float(p[1:]))) for p in PERCENTILES}  # noqa: E731
    return ReplayedLoad(requests_per_s=lo, output_tokens_per_s=lo * float(out.mean()), ttft_s=pct(best.ttft_s),
                        tpot_s=pct(best.tpot_s), requests=n, bracket_rate=start)


def replayed_max_load(model, hardware, *, tp: int = 1, pp: int = 1, ep: int = 1, input_len: int, output_len: int,
                      slo: SLO, weight_dtype="bf16", kv_dtype=None, engine=None) -> ReplayedLoad:
    """``max_load_replayed`` for named inputs (as ``load_point.max_load`` takes them): requests of
    fixed lengths, the bracket from the closed loop kept full (``closed_loop.throughput``)."""
    from planner.perf.estimate import resolve_dtypes
    from planner.serving.closed_loop import instance_curve, throughput

    m, hw, lay, _ = instance_curve(model, hardware, tp, pp, ep, input_len, output_len, weight_dtype, kv_dtype, engine)
    full = throughput(m, hw, tp=tp, pp=pp, ep=ep, input_len=input_len, output_len=output_len,
                      weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine)
    return max_load_replayed(m, hw, lay, resolve_dtypes(m, weight_dtype, kv_dtype), engine, slo, full.requests_per_s,
                             input_len=input_len, output_len=output_len)
