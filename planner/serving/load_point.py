"""One instance under open-loop (Poisson) load: its latencies at a request rate, and the most load
that meets an SLO (``planner throughput --rate`` / ``--ttft-p90 --tpot-p90``).

``planner.throughput`` answers the closed-loop question (a fixed number of clients); this module
reads the same steady-state curve (``queueing.serving_curve``: continuous batching, the prefill
server as an M/G/1 queue) at a given arrival rate instead, or at its largest SLO-meeting point.
"""

from __future__ import annotations

import numpy as np

from planner.catalog.dtypes import DType
from planner.errors import InfeasibleError, InputError, count
from planner.serving.batching import Engine
from planner.serving.closed_loop import InstanceRequests, instance_curve, no_room_for_one
from planner.serving.queueing import Curve, at_rates, slo_ok
from planner.serving.slo import SLO
from planner.serving.workload import Workload

_P = ("mean", "p50", "p90", "p99")


# MLPerf's Server runs sat at 92-100% of their systems' Offline rates with mean TPOTs 1.3-5.7x what the
# model gives there (loadgen summaries, README "Validation"): from NEAR_CAPACITY of capacity on, a load
# point also says what THROUGHPUT_MARGIN less capacity would do to its latency (and a plan within that
# margin of its SLO limit says so: run._headroom_note).
NEAR_CAPACITY = 0.85
THROUGHPUT_MARGIN = 0.05


class LoadPoint(InstanceRequests):
    """Steady state of one instance at one open-loop request rate (per instance)."""

    requests_per_s: float
    output_tokens_per_s: float
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    e2e_s: dict[str, float]
    decode_batch: float          # mean sequences decoding per iteration
    prefill_utilization: float   # busy fraction of the prefill server (1 = saturated)
    max_rate: float              # the largest stable rate of this layout, req/s
    accelerators: int
    power_w: float               # all accelerators, time-averaged
    usd_per_h: float | None
    binding: str                 # "rate" (given), or the SLO target / capacity that stops more load
    # near capacity, latency follows small throughput errors: the P90 TTFT / TPOT (s) this layout would
    # give at this rate if it sustained 5% less (read at rate / 0.95 on the same curve), None where
    # that is past its capacity (the queue would grow without bound); only at >= 85% of max_rate
    if_5pct_less_capacity: dict[str, float | None] | None = None


def _curve(model, hardware, tp, pp, ep, input_len, output_len, weight_dtype, kv_dtype, engine, lengths=None):
    m, hw, lay, c = instance_curve(model, hardware, tp, pp, ep, input_len, output_len, weight_dtype, kv_dtype,
                                   engine, lengths=lengths)
    if not np.isfinite(c.n[0, 0]):
        raise InfeasibleError(no_room_for_one(m, hw, tp=tp, pp=pp, ep=ep, input_len=input_len, output_len=output_len,
                                              weight_dtype=weight_dtype, kv_dtype=kv_dtype))
    stable = np.isfinite(c.rate[0]) & (c.rho[0] < 1)
    if not stable.any():
        raise InfeasibleError(f"{m.name} tp={tp} pp={pp} ep={ep} on {hw.name} cannot serve one {input_len}+"
                              f"{output_len}-token request stably (no KV room or prefill too slow); try more "
                              "devices or fp8 weights")
    return m, hw, lay, c, stable


def _point(m, hw, lay, c: Curve, rate: float, max_rate: float, binding: str, input_len: int,
           output_len: int) -> LoadPoint:
    at = lambda v: float(at_rates(c, v, rate)[()])  # noqa: E731
    devices = int(np.ravel(lay.devices)[0])
    sensitivity = None
    if rate >= NEAR_CAPACITY * max_rate:
        worse = rate / (1 - THROUGHPUT_MARGIN)
        sensitivity = {k: float(at_rates(c, getattr(c, k[:-2])["p90"], worse)[()]) if worse <= max_rate else None
                       for k in ("ttft_s", "tpot_s")}
    return LoadPoint(
        model=m.name, hardware=hw.name, tp=int(lay.tp), pp=int(lay.pp), ep=int(lay.ep), input_len=input_len,
        output_len=output_len, requests_per_s=rate, output_tokens_per_s=rate * c.mean_output,
        ttft_s={p: at(c.ttft[p]) for p in _P}, tpot_s={p: at(c.tpot[p]) for p in _P},
        e2e_s={p: at(c.e2e[p]) for p in _P}, decode_batch=at(c.n), prefill_utilization=at(c.rho),
        max_rate=max_rate, accelerators=devices, power_w=at(c.power_w) * devices,
        usd_per_h=devices * hw.price.rent.value if hw.price.rent else None, binding=binding,
        if_5pct_less_capacity=sensitivity)


def at_rate(model, hardware, *, tp: int = 1, pp: int = 1, ep: int = 1, input_len: int, output_len: int,
            rate: float, weight_dtype: str | DType = "bf16", kv_dtype: str | DType | None = None,
            engine: Engine | None = None, lengths: Workload | None = None) -> LoadPoint:
    """Latencies of one instance receiving Poisson arrivals at ``rate`` requests/s (``lengths``: a
    workload whose length mix the requests have, ``output_len`` their mean output)."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not np.isfinite(rate) or rate <= 0:
        raise InputError(f"rate must be a finite number > 0 requests/s, got {rate!r}")
    m, hw, lay, c, stable = _curve(model, hardware, tp, pp, ep, input_len, output_len, weight_dtype, kv_dtype,
                                   engine, lengths)
    max_rate = float(c.rate[0][stable].max())
    if rate > max_rate:
        raise InfeasibleError(f"{rate:g} req/s exceeds the {max_rate:.4g} req/s one instance of {m.name} tp={tp} "
                              f"pp={pp} ep={ep} on {hw.name} sustains; use {count(np.ceil(rate / max_rate))} "
                              "instances or a larger layout")
    return _point(m, hw, lay, c, float(rate), max_rate, "rate", input_len, output_len)


def engine_floor(hw, slo: SLO) -> str | None:
    """Why no layout of this engine can meet ``slo``, if that is so: a TPOT bound at or below the
    engine's per-step host time, or a TTFT bound at or below its per-request time plus one step
    (a framework's ``step_overhead`` / ``request_overhead``, e.g. vllm-ascend's 40 ms per step);
    else None."""
    eff, bounds = hw.efficiency, slo.thresholds()
    step, front = eff.step_overhead.value, eff.request_overhead.value + eff.step_overhead.value
    if bounds.get("tpot_s", np.inf) <= step:
        return (f"this engine's per-step host time alone is {step * 1e3:.3g} ms, at or above the TPOT bound: no "
                "layout meets it on this engine; try another --framework (engine.framework)")
    if bounds.get("ttft_s", np.inf) <= front:
        return (f"this engine's per-request time plus one step is {front * 1e3:.3g} ms, at or above the TTFT bound: "
                "no layout meets it on this engine; try another --framework (engine.framework)")
    return None


def slo_remedy(hw, slo: SLO) -> str:
    """What would fix an SLO that no load meets: another engine (``engine_floor``), else more
    devices or a faster chip."""
    return engine_floor(hw, slo) or "try a larger tp or a faster chip"


def max_load(model, hardware, *, tp: int = 1, pp: int = 1, ep: int = 1, input_len: int, output_len: int,
             slo: SLO, weight_dtype: str | DType = "bf16", kv_dtype: str | DType | None = None,
             engine: Engine | None = None, lengths: Workload | None = None) -> LoadPoint:
    """The largest Poisson request rate at which one instance meets ``slo`` (``lengths``: a workload
    whose length mix the requests have, ``output_len`` their mean output)."""
    m, hw, lay, c, stable = _curve(model, hardware, tp, pp, ep, input_len, output_len, weight_dtype, kv_dtype,
                                   engine, lengths)
    max_rate = float(c.rate[0][stable].max())
    ok = slo_ok(c, slo)[0]
    if not ok.any():
        first = int(np.flatnonzero(stable)[0])
        missed = [f"{metric}.{p} {getattr(c, metric[:-2])[p][0, first]:.3g} s > {bound:g} s"
                  for metric in ("ttft_s", "tpot_s", "e2e_s") for p, bound in getattr(slo, metric).items()
                  if getattr(c, metric[:-2])[p][0, first] > bound]
        raise InfeasibleError(f"{m.name} tp={tp} pp={pp} ep={ep} on {hw.name} misses the SLO even at the lightest "
                              f"load ({'; '.join(missed) or 'attainment'}); {slo_remedy(hw, slo)}")
    i = int(np.flatnonzero(ok)[-1])
    nxt = i + 1 if i + 1 < ok.size else None
    binding = "capacity" if nxt is None or not stable[nxt] else next(
        (f"{metric}.{p} <= {bound:g}" for metric in ("ttft_s", "tpot_s", "e2e_s")
         for p, bound in getattr(slo, metric).items() if getattr(c, metric[:-2])[p][0, nxt] > bound), "attainment")
    return _point(m, hw, lay, c, float(c.rate[0, i]), max_rate, binding, input_len, output_len)
