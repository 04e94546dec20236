"""``throughput``: steady state of ONE instance serving a closed loop of requests of fixed
lengths, as offline benchmarks (MLPerf Offline, vendors' max-throughput tables; ``concurrency``
None) or closed-loop load generators at a given concurrency measure it."""

from __future__ import annotations

import numpy as np

from planner.catalog.bands import Banded, band_fields
from planner.catalog.dtypes import DType
from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.catalog.model_catalog import model as get_model
from planner.checks import check_context
from planner.errors import InfeasibleError, InputError
from planner.frozen import Frozen
from planner.perf.estimate import phase_bounds, resolve_dtypes
from planner.perf.memory import pool_tokens
from planner.perf.ops import Step
from planner.perf.parallel import Layout, check_layout, dp_ranks
from planner.perf.roofline import step_time
from planner.serving.batching import Engine
from planner.serving.queueing import PREFILL_CAPACITY, Curve, serving_curve
from planner.serving.workload import Fixed, Workload, length_stats


class InstanceRequests(Frozen):
    """Which instance serves which requests (the first fields of every one-instance answer)."""

    model: str
    hardware: str
    framework: str = ""
    tp: int
    pp: int
    ep: int
    input_len: int
    output_len: int


class ServingEstimate(InstanceRequests, Banded):
    """One instance in steady state (``planner.throughput``)."""

    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    ttft_s: float
    tpot_s: float
    concurrency: float          # requests in the system (decoding + waiting for/in prefill)
    decode_batch: float         # sequences decoding per iteration
    accelerators: int
    power_w: float              # all accelerators of the instance
    usd_per_h: float | None
    limit: str                  # what caps throughput at this concurrency
    max_num_seqs: int = 0       # the engine's limits on this device, for the whole instance
    max_batched_tokens: int = 0  # (Engine.instance_limits: given, else the engine's default for it)


def instance_curve(model: str | ModelSpec, hardware: str | HardwareProfile, tp: int, pp: int, ep: int,
                   input_len: int, output_len: int, weight_dtype: str | DType, kv_dtype: str | DType | None,
                   engine: Engine | None, framework: str | None = None, lengths: Workload | None = None
                   ) -> tuple[ModelSpec, HardwareProfile, Layout, Curve]:
    """The checked arguments and the steady-state load curve of one instance serving requests of
    fixed lengths (shared by the closed-loop answer here and ``load_point``'s open-loop ones), the
    profile as the serving framework sees it (``framework`` or ``engine.framework``);
    ``lengths``: requests of that workload's length mix instead (its rate is not read; the
    context check still reads ``input_len + output_len``)."""
    m = get_model(model)
    engine = engine_running(engine, framework)
    hw = engine.profile_on(hardware)
    for name, v in (("input_len", input_len), ("output_len", output_len), ("tp", tp), ("pp", pp), ("ep", ep)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name} must be a positive integer, got {v!r}")
    check_context(m, input_len + output_len)
    dtypes = resolve_dtypes(m, weight_dtype, kv_dtype)
    lay = Layout.of(tp, ep, pp)
    check_layout(m, lay, hw)
    w = lengths or Workload(rate=1.0, input=Fixed(value=input_len), output=Fixed(value=output_len))
    return m, hw, lay, serving_curve(m, hw, lay, dtypes, engine, length_stats(w))


def engine_running(engine: Engine | None, framework: str | None) -> Engine:
    """``engine`` (None: the defaults) running ``framework`` where one is named, the entry's
    scheduler knobs filling those the engine does not give, as ``Engine(framework=...)`` takes
    them (the efficiencies alone were applied: ``throughput(framework="sglang")`` ran SGLang's
    kernels under vLLM's scheduler). An engine that names another framework is an ``InputError``."""
    if framework is None:
        return engine or Engine()
    if engine is None:
        return Engine(framework=framework)
    if engine.framework is None:
        given = {k: getattr(engine, k) for k in engine.model_fields_set if k != "framework"}
        return Engine.model_validate({**given, "framework": framework})
    if engine.framework != framework:
        raise InputError(f"framework {framework!r} and engine.framework {engine.framework!r} name two engines; "
                         "give one")
    return engine


def no_room_for_one(m: ModelSpec, hw: HardwareProfile, *, tp: int, pp: int, ep: int, input_len: int,
                    output_len: int, **formats) -> str:
    """Why the instance holds no sequence of ``input_len + output_len`` tokens and which nearby
    layouts and formats would (``estimate``'s reason and suggestions at batch 1; ``formats``: its
    weight and KV formats)."""
    from planner.perf.estimate import estimate

    e = estimate(m, hw, batch=1, tp=tp, pp=pp, ep=ep, input_len=input_len, output_len=output_len, **formats)
    total = input_len + output_len
    if e.infeasible_reason:
        why = f"one {total}-token sequence does not fit: {e.infeasible_reason}"
    elif total > pool_tokens(hw):
        why = (f"its KV pool, capped at {pool_tokens(hw):,.0f} tokens (kv_pool_tokens), is too small for one "
               f"{total}-token sequence")
    else:
        why = f"it has no memory left for the KV cache of one {total}-token sequence"
    tips = [t for t in e.suggestions if "--batch" not in t]
    fix = "would fit: " + "; ".join(tips) if tips else "try more devices (--tp, --ep, --pp)"
    return f"{m.name} with tp={tp} pp={pp} ep={ep} on {hw.name}: {why}; {fix}"


def throughput(model: str | ModelSpec, hardware: str | HardwareProfile, *, tp: int = 1, pp: int = 1, ep: int = 1,
               input_len: int, output_len: int, weight_dtype: str | DType = "bf16",
               kv_dtype: str | DType | None = None, concurrency: int | None = None,
               engine: Engine | None = None, framework: str | None = None) -> ServingEstimate:
    """Continuous-batching steady state of one instance (see module docstring); ``framework``
    (or ``engine.framework``) names the serving engine (default vLLM for the device's vendor:
    ``frameworks.default_framework``)."""
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, (int, np.integer))
                                    or concurrency < 1):
        raise InputError(f"concurrency must be a positive integer or None, got {concurrency!r}")
    engine = engine_running(engine, framework)
    m, hw, lay, c = instance_curve(model, hardware, tp, pp, ep, input_len, output_len, weight_dtype, kv_dtype,
                                   engine)
    dtypes = resolve_dtypes(m, weight_dtype, kv_dtype)
    if not np.isfinite(c.n[0, 0]):
        raise InfeasibleError(no_room_for_one(m, hw, tp=tp, pp=pp, ep=ep, input_len=input_len, output_len=output_len,
                                              weight_dtype=weight_dtype, kv_dtype=kv_dtype))
    stable = c.rho[0] < 1
    if not stable.any():
        raise InfeasibleError("prefill cannot keep up even with one sequence decoding")
    last = int(np.flatnonzero(stable)[-1])
    n, rate, tpot = c.n[0, :last + 1], c.rate[0, :last + 1], c.tpot["mean"][0, :last + 1]
    ttft_mean = c.ttft["mean"][0, :last + 1]           # prefill service + Kingman wait (many clients ~ Poisson)
    population = rate * (ttft_mean + (output_len - 1) * tpot)        # Little's law
    limit = str(c.limit[0]) if last == c.n.shape[1] - 1 else PREFILL_CAPACITY
    if concurrency is None or concurrency >= population[-1]:
        i = last
        x, t, ttft = rate[i], tpot[i], ttft_mean[i]
        pop = population[i] if concurrency is None else float(concurrency)
        if concurrency is not None:            # excess requests queue for prefill
            ttft = concurrency / x - (output_len - 1) * t
        nb, power = n[i], c.power_w[0, i]
    else:
        limit = "concurrency"
        pop = float(concurrency)
        x = float(np.interp(pop, population, rate))
        t = float(np.interp(pop, population, tpot))
        ttft = float(np.interp(pop, population, ttft_mean))
        nb = float(np.interp(pop, population, n))
        power = float(np.interp(pop, population, c.power_w[0, :last + 1]))
        if concurrency == 1:
            x, ttft, t, nb = _one_client(m, hw, lay, dtypes, engine, input_len, output_len)
    devices = int(np.ravel(lay.devices)[0])
    bounds = _bounds_at(m, hw, lay, dtypes, nb, input_len, output_len)
    seqs_cap, tokens_cap = engine.instance_limits(dp_ranks(hw, lay), hw)
    return ServingEstimate(
        model=m.name, hardware=hw.name, framework=hw.framework or "", tp=tp, pp=pp, ep=ep, input_len=input_len,
        output_len=output_len,
        output_tokens_per_s=float(x * output_len), total_tokens_per_s=float(x * (input_len + output_len)),
        requests_per_s=float(x), ttft_s=float(ttft), tpot_s=float(t), concurrency=float(pop),
        decode_batch=float(nb), accelerators=devices, power_w=float(power * devices),
        usd_per_h=devices * hw.price.rent.value if hw.price.rent else None, limit=limit, regime_bounds=bounds,
        max_num_seqs=int(seqs_cap), max_batched_tokens=int(tokens_cap),
        **band_fields(hw.vendor, hw.framework, bounds, float(ttft), float(t), float(x * output_len)))


def _one_client(m: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes, engine: Engine, input_len: int,
                output_len: int) -> tuple[float, float, float, float]:
    """(requests/s, TTFT, TPOT, time-averaged decode batch) of a closed loop of ONE client: each
    request has the engine to itself, so nothing queues and no other prompt shares its steps (the
    load curve's open-loop Poisson arrivals at a mean population of one would charge both: +19% TTFT
    and +29% TPOT for a 32K-token prompt of Llama-3.1-8B on an H100). One request run through the
    simulator's iteration loop (its prompt chunked as the engine chunks it, its drafts verified),
    the pure-Python loop: one request needs no compiled kernel."""
    from planner.serving.simulate import IterationTable, simulate

    engine = engine.model_copy(update={"simulator": "python"})
    inp, out = np.array([input_len]), np.array([output_len])
    r = simulate(m, hw, lay, dtypes, engine, np.zeros(1), inp, out, warmup_frac=0.0,
                 table=IterationTable.for_requests(m, hw, lay, dtypes, engine, inp, out))
    e2e, ttft = float(r.e2e_s[0]), float(r.ttft_s[0])
    return 1.0 / e2e, ttft, float(r.tpot_s[0]), (e2e - ttft) / e2e


def _bounds_at(m: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes, decode_batch: float, input_len: int,
               output_len: int) -> dict[str, str]:
    """Error-band bound of each phase at the steady state: one prompt's prefill, a decode step
    of the steady decode batch at the middle context; ``serving`` is the bound of the phase that
    takes more machine time per request (a prefill vs ``output_len - 1`` decode steps shared by
    the batch)."""
    b = max(1.0, round(decode_batch))
    pre = step_time(m, hw, lay, Step.of(1.0, float(input_len), 0.0, prompt=True), dtypes)
    dec = step_time(m, hw, lay, Step.of(b, 1.0, input_len + 0.5 * (output_len - 1)), dtypes)
    per_request_decode_s = float(np.ravel(dec.total_s)[0]) * (output_len - 1) / b
    return phase_bounds(pre, dec, float(np.ravel(pre.total_s)[0]), per_request_decode_s)
