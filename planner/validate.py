"""``planner validate``: predict every published measurement in ``validation/measurements.yaml``
from the catalog's hardware profiles, models and framework entries only, and summarize the error
per vendor and metric, calibration and held-out points apart."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError, model_validator

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import Format, Framework, Switch, TokenCount, framework
from planner.catalog.hardware import Count, Figure, Fraction, MemoryPolicy, hardware
from planner.checks import Degree
from planner.errors import InfeasibleError, InputError, PlannerError
from planner.frozen import Frozen
from planner.yamlio import load_yaml, validation_error

Metric = Literal["prefill_s", "decode_step_s", "batch_latency_s", "offline_output_tokens_per_s",
                 "decode_tokens_per_s_per_device_at_tpot_bound",
                 "prefill_tokens_per_s_per_device", "ttft_s", "tpot_s", "output_tokens_per_s",
                 "server_output_tokens_per_s"]
LATENCY = {"prefill_s", "decode_step_s", "batch_latency_s", "ttft_s", "tpot_s"}


class Point(Frozen):
    """One published measurement. No field can carry a correction factor: predictions use the
    catalog only."""

    id: str
    vendor: Literal["nvidia", "amd", "huawei"]
    hardware: str
    model: str
    tp: Degree = 1
    ep: Degree = 1
    pp: Degree = 1
    weight_dtype: str = "bf16"
    kv_dtype: str | None = None
    framework: str
    input_len: int = Field(ge=1)
    lengths: str | None = Field(None, description="the benchmark dataset's per-sample token counts (a bundled "
                                "trace, mlperf-*, or a CSV path), where they are public: offline replays and "
                                "server_output_tokens_per_s draw their requests from them (input_len and "
                                "output_len stay the run's means, for the other evaluators)")
    fixed_output: bool = Field(False, description="with lengths: every request generates output_len tokens (the "
                               "served model's answers are not the dataset's reference answers)")
    output_len: int = Field(ge=1)
    batch: int | None = Field(None, ge=1)
    concurrency: int | None = Field(None, ge=1)
    request_rate: float | None = Field(None, gt=0, description="an open-loop run: the rate (requests/s) "
                                       "at which the benchmark sent its num_requests (vLLM / SGLang bench_serving "
                                       "--request-rate, burstiness 1), replayed by the simulator")
    arrivals: Literal["poisson", "constant"] = Field("poisson", description="an open-loop run's send times: "
                                                     "poisson (bench_serving --request-rate, burstiness 1) or "
                                                     "constant, evenly spaced (guidellm --rate-type constant)")
    mtp_tokens: int = Field(0, ge=0, le=64, description="MTP draft tokens per decode step, as deployed by the source")
    mtp_acceptance: float = Field(0.0, ge=0, lt=1, description="acceptance rate the source reports for them")
    draft: str | None = Field(None, description="the EAGLE-3 draft model that proposed them (catalog.draft name), "
                              "where the run used one; None: the model's own MTP module")
    tpot_bound_s: float | None = Field(None, gt=0, description="latency-bounded metrics: the TPOT bound of the load")
    ttft_bound_s: float | None = Field(None, gt=0, description="server_output_tokens_per_s: the TTFT bound of the load")
    slo_percentile: Literal["p50", "p90", "p99"] = Field("p99", description="server_output_tokens_per_s: the "
                                                         "percentile both bounds apply to (MLPerf: P99)")
    max_num_seqs: int | None = Field(None, ge=1, le=1 << 30, description="the engine's batch-size limit in the "
                                     "run, where the source's tool sized it (else the framework's default)")
    max_batched_tokens: int | None = Field(None, ge=16, le=1 << 40, description="the engine's tokens per "
                                           "iteration in the run, where the source's tool sized it")
    prefill_delay_passes: int | None = Field(None, ge=0, description="the run's prefill delayer under attention "
                                             "DP, where its command enables one (Engine.prefill_delay_passes)")
    mem_fraction: float | None = Field(None, gt=0, le=1, description="the run's memory fraction for weights, "
                                       "activations and KV (SGLang --mem-fraction-static, vLLM "
                                       "--gpu-memory-utilization), where its command sets one: it replaces the "
                                       "framework's default in the engine's memory policy")
    kv_pool_tokens: int | None = Field(None, ge=1, description="the run's cap on each KV pool's tokens, where its "
                                       "command sets one (SGLang --max-total-tokens, TensorRT-LLM "
                                       "kv_cache_config.max_tokens, vLLM --num-gpu-blocks-override x block size): "
                                       "the pool is the smaller of it and what memory gives")
    state_dtype: Literal["fp32", "bf16", "fp16"] | None = Field(
        None, description="the format the run keeps linear-attention recurrent states in, where its command sets "
        "one (SGLang --mamba-ssm-dtype, vLLM --mamba-ssm-cache-dtype): it replaces the framework's default")
    eager_prompts: bool = Field(False, description="the run captures no graph for steps with prompt tokens "
                                "(--enforce-eager, or cudagraph_mode FULL_DECODE_ONLY): the framework launches "
                                "every such step eagerly (Efficiency.graph_max_tokens 0)")
    perfect_eplb: bool = Field(False, description="the source's figure is a projection under an idealised, "
                               "perfect expert balance (CloudMatrix384 Table 3's 'Perfect EPLB' rows), not a run "
                               "with the engine's own load balancing: routing skew 1 (the framework's "
                               "moe_imbalance unused)")
    latency_stat: Literal["mean", "median"] = Field("mean", description="which statistic over the run's requests "
                                                    "the source prints for ttft_s / tpot_s (bench_serving's mean or "
                                                    "its P50); a replayed run is compared on the same one")
    num_requests: int | None = Field(None, ge=1, le=100_000, description="the requests the benchmark sent, where "
                                     "the source states it: an offline run (all queued at once) or, with "
                                     "concurrency, a closed loop of that many clients is then replayed by the "
                                     "simulator (request by request: at most 100,000)")
    metric: Metric
    value: float = Field(gt=0)
    source: str
    role: Literal["calibration", "held_out"]
    note: str | None = None

    @model_validator(mode="after")
    def _bounds_and_lengths(self) -> Point:
        """The bounds a latency-bounded metric reads, and a lengths trace that loads, checked where
        the point is written."""
        from planner.checks import located

        if self.request_rate is not None and (self.num_requests is None or self.concurrency is not None):
            raise located("request_rate", "an open-loop run needs num_requests (the prompts sent at that rate) "
                          "and no concurrency (a closed loop of clients)")
        if self.latency_stat == "median" and (self.metric not in ("ttft_s", "tpot_s") or self.num_requests is None):
            raise located("latency_stat", "a median is compared on a replayed run's TTFT or TPOT: it needs "
                          "metric ttft_s or tpot_s and num_requests")
        if self.arrivals != "poisson" and self.request_rate is None:
            raise located("arrivals", "arrivals describes an open-loop run: it needs request_rate")
        if self.metric == "server_output_tokens_per_s" and (self.ttft_bound_s is None or self.tpot_bound_s is None):
            raise located("ttft_bound_s", "server_output_tokens_per_s needs ttft_bound_s and tpot_bound_s")
        if self.metric == "decode_tokens_per_s_per_device_at_tpot_bound" and self.tpot_bound_s is None:
            raise located("tpot_bound_s", f"{self.metric} needs tpot_bound_s")
        if self.lengths is not None:
            from planner.serving.trace import load_trace

            try:
                load_trace(self.lengths)
            except InputError as e:
                raise located("lengths", str(e)) from None
        return self


class Dataset(Frozen):
    sources: dict[str, str]
    points: list[Point]


def default_path() -> Path:
    here = Path(__file__).resolve().parent
    for p in (here / "_data" / "validation" / "measurements.yaml", here.parent / "validation" / "measurements.yaml"):
        if p.exists():
            return p
    raise PlannerError("validation/measurements.yaml not found")


def _load_file(path: Path) -> Dataset:
    data, lines = load_yaml(path)
    try:
        return Dataset.model_validate(data)
    except ValidationError as e:
        raise validation_error(path, e, lines, Dataset) from None


def load_points(path: Path | None = None) -> Dataset:
    """One measurements file, or (no ``path``) ``validation/measurements.yaml`` and every YAML
    file of ``validation/measurements/`` merged: sources are shared, ids unique."""
    paths = [path] if path else [default_path(), *sorted((default_path().parent / "measurements").glob("*.yaml"))]
    sources: dict[str, str] = {}
    points: list[Point] = []
    for f in paths:
        ds = _load_file(f)
        for key, text in ds.sources.items():
            if sources.get(key, text) != text:
                raise PlannerError(f"{f}: source {key!r} is defined differently in another measurements file")
            sources[key] = text
        points += ds.points
    seen: set[str] = set()
    for p in points:
        if p.source not in sources:
            raise PlannerError(f"{paths[-1] if len(paths) == 1 else paths[0].parent}: point {p.id} cites unknown "
                               f"source {p.source!r}")
        if p.id in seen:
            raise PlannerError(f"point id {p.id!r} appears twice in the measurements")
        seen.add(p.id)
    return Dataset(sources=sources, points=points)


def predict(p: Point, fw: Framework | None = None) -> float:
    """The model's value for point ``p`` (SI units), from catalog data only (``fw`` replaces the
    point's framework entry: used by ``planner.calibrate`` to score candidate entries)."""
    return predict_with_bounds(p, fw)[0]


def _as_run(fw: Framework | None, p: Point) -> Framework:
    """``fw`` (default: the point's framework entry) with the memory fraction and the recurrent-state
    format ``p``'s run set on its command line, where it set them (the memory policy's kind stays
    the engine's; an entry without one has the profiles' total fraction), and no routing skew where
    the source projects a perfect expert balance."""
    fw = fw or framework(p.framework)
    if p.perfect_eplb:
        fw = fw.model_copy(update={"moe_imbalance": Figure(
            value=1.0, source=f"the source's idealised perfect expert balance ({p.source})")})
    if p.eager_prompts:
        fw = fw.model_copy(update={"graph_max_tokens": TokenCount(value=0, source=f"the run's launch ({p.source})")})
    if p.state_dtype is not None:
        given = f"the run's command line ({p.source})"
        fw = fw.model_copy(update={"linear_state_dtype": Format(value=DType(p.state_dtype), source=given),
                                   "linear_state_from_checkpoint": Switch(value=False, source=given)})
    pol = fw.memory_policy
    if p.mem_fraction is not None:
        frac = Fraction(value=p.mem_fraction, source=f"the run's command line ({p.source})")
        pol = (pol or MemoryPolicy(kind="total_fraction", fraction=frac)).given(frac)   # the profiles' default kind
    if p.kv_pool_tokens is not None:
        if pol is None:
            raise InputError(f"{p.id}: kv_pool_tokens caps the framework's KV pool, but {fw.name or 'the framework'} "
                             "has no memory policy of its own; give the run's mem_fraction too")
        pol = pol.capped(Count(value=p.kv_pool_tokens, source=f"the run's command line ({p.source})"))
    return fw if pol is fw.memory_policy else fw.model_copy(update={"memory_policy": pol})


def predict_with_bounds(p: Point, fw: Framework | None = None) -> tuple[float, dict[str, str]]:
    """``predict`` and the error-band bound of each phase at the point's conditions."""
    from planner.perf.estimate import estimate

    fw = _as_run(fw, p)
    kw = dict(tp=p.tp, pp=p.pp, ep=p.ep, weight_dtype=p.weight_dtype, kv_dtype=p.kv_dtype)
    if p.metric == "decode_tokens_per_s_per_device_at_tpot_bound":
        return _at_tpot_bound(p, fw, kw)
    if p.metric == "server_output_tokens_per_s":
        return _server(p, fw, kw)
    if p.metric in ("offline_output_tokens_per_s", "ttft_s", "tpot_s", "output_tokens_per_s"):
        r = _closed_loop(fw.model_dump_json(), p.hardware, p.model, p.input_len, p.output_len, p.concurrency,
                         tuple(kw.items()), p.max_num_seqs, p.max_batched_tokens, p.mtp_tokens, p.mtp_acceptance,
                         p.draft)
        if p.num_requests and (p.concurrency or p.request_rate or p.metric == "offline_output_tokens_per_s"):
            means, medians, out = _replay(fw.model_dump_json(), run_of(p))
            ttft, tpot = medians if p.latency_stat == "median" else means
            return {"ttft_s": ttft, "tpot_s": tpot}.get(p.metric, out), r.regime_bounds
        return {"ttft_s": r.ttft_s, "tpot_s": r.tpot_s}.get(p.metric, r.output_tokens_per_s), r.regime_bounds
    out_len = 2 if p.metric == "decode_step_s" else p.output_len
    e = estimate(_replayed(p.model), fw.apply(hardware(p.hardware)), batch=p.batch or 1, input_len=p.input_len,
                 output_len=out_len,
                 mtp_tokens=p.mtp_tokens, mtp_acceptance=p.mtp_acceptance, draft=p.draft, **kw)
    value = {"prefill_s": e.ttft_s, "decode_step_s": e.tpot_s, "batch_latency_s": e.e2e_s}.get(
        p.metric, (p.batch or 1) * p.input_len / e.ttft_s / e.accelerators)   # prefill tokens/s per device
    return value, e.regime_bounds


def _at_tpot_bound(p: Point, fw: Framework, kw: dict) -> tuple[float, dict[str, str]]:
    """Most decode load meeting the point's TPOT bound (``decode_at_tpot_bound``), and the bounds
    of the step at that batch (at batch 1 where no batch meets it: the prediction is then 0)."""
    from planner.perf.estimate import estimate
    from planner.perf.parallel import Layout

    if p.tpot_bound_s is None:
        raise PlannerError(f"point {p.id}: metric {p.metric} needs tpot_bound_s")
    r = decode_at_tpot_bound(p, p.tpot_bound_s, fw=fw)
    devices = int(np.ravel(Layout.of(p.tp, p.ep, p.pp).devices)[0])
    e = estimate(p.model, fw.apply(hardware(p.hardware)), batch=max(1, r["batch_per_device"]) * devices,
                 input_len=p.input_len, output_len=2, mtp_tokens=p.mtp_tokens, mtp_acceptance=p.mtp_acceptance,
                 draft=p.draft, **kw)
    return r["tokens_per_s_per_device"], e.regime_bounds


def _server(p: Point, fw: Framework, kw: dict) -> tuple[float, dict[str, str]]:
    """Output tokens/s of one instance at the most Poisson load whose TTFT and TPOT percentiles
    meet the point's bounds (MLPerf's Server and Interactive scenarios: the rate an instance holds
    with P99 TTFT and P99 TPOT under the benchmark's limits over a run of >= 600 s), found by
    replaying such runs in the simulator (``serving.replayed_load``) - the same iteration loop, KV pool
    and dataset lengths the offline rows replay, so a Server row can never beat its engine's
    saturated rate; 0 where even the lightest load misses a bound."""
    if p.ttft_bound_s is None or p.tpot_bound_s is None:
        raise PlannerError(f"point {p.id}: metric {p.metric} needs ttft_bound_s and tpot_bound_s")
    r = _closed_loop(fw.model_dump_json(), p.hardware, p.model, p.input_len, p.output_len, None, tuple(kw.items()),
                     p.max_num_seqs, p.max_batched_tokens, p.mtp_tokens, p.mtp_acceptance, p.draft)
    saturated = r.output_tokens_per_s / p.output_len      # requests/s of the engine kept full
    return _server_replay(fw.model_dump_json(), p, float(saturated)), r.regime_bounds


@lru_cache(maxsize=1024)
def _server_replay(fw_json: str, p: Point, saturated_rate: float) -> float:
    """Output tokens/s at the largest Poisson rate whose replayed run of ``p``'s requests (its
    dataset's lengths, or its fixed ones) meets ``p``'s bounds at its percentile
    (``replayed_load.max_load_replayed``)."""
    from planner.perf.estimate import resolve_dtypes
    from planner.perf.parallel import Layout
    from planner.serving.replayed_load import max_load_replayed
    from planner.serving.slo import SLO, Target

    m, hw, engine = _replay_inputs(fw_json, p)
    slo = SLO(ttft_s=Target(**{p.slo_percentile: p.ttft_bound_s}), tpot_s=Target(**{p.slo_percentile: p.tpot_bound_s}))
    try:
        r = max_load_replayed(m, hw, Layout.of(p.tp, p.ep, p.pp), resolve_dtypes(m, p.weight_dtype, p.kv_dtype),
                              engine, slo, saturated_rate, input_len=p.input_len, output_len=p.output_len,
                              lengths=_lengths(p))
    except InfeasibleError:
        return 0.0
    return r.output_tokens_per_s


WAVE_ITERATIONS = 30


def run_of(p: Point) -> Point:
    """``p`` reduced to the run it was measured in (what it printed and how it is named dropped),
    so the TTFT, TPOT and throughput points of one run share one replay."""
    return p.model_copy(update={"id": "", "metric": "ttft_s", "value": 1.0, "source": "", "role": "held_out",
                                "note": None, "latency_stat": "mean"})


@lru_cache(maxsize=1024)
def _replay(fw_json: str, p: Point) -> tuple[tuple[float, float], tuple[float, float], float]:
    """((mean TTFT, mean TPOT), (their medians), output tokens/s) of a benchmark run of
    ``p.num_requests`` fixed-length requests (drawn from its dataset's lengths where ``p.lengths``
    names them), replayed by the simulator once per run (``run_of``), whichever of its points asks.
    With ``p.concurrency`` = C, a closed loop
    (vLLM/SGLang ``bench_serving --max-concurrency C --num-prompts N``): C clients start together
    and each sends its next request when its previous one completes; the first wave's prompts
    queue behind each other, which a run of few waves (N / C small) averages into its mean TTFT
    and the steady state, where clients have drifted apart, does not have. Request ``j`` is client
    ``j mod C``'s ``(j // C)``-th: its arrival is its predecessor's completion plus the front end's
    per-request time, a fixed point found by re-simulating (arrivals only move later, so it
    settles in a few rounds). With ``p.request_rate``, an open loop (bench_serving --request-rate):
    Poisson arrivals at that rate (one seeded draw), the first at time 0, or evenly spaced ones
    (``arrivals: constant``, guidellm's constant rate). Without either, an offline
    run (vLLM benchmark_throughput, trtllm-bench): all N queued at time 0. Such runs move in
    lockstep waves - every running sequence reaches prompt + output together, so an engine that
    pages KV on demand (vLLM) runs out of blocks at the end of a wave and preempts and recomputes -
    and pay the last wave's ramp-down; output tokens/s is over the makespan."""
    from planner.perf.estimate import resolve_dtypes
    from planner.perf.parallel import Layout
    from planner.serving.simulate import IterationTable, simulate

    m, hw, engine = _replay_inputs(fw_json, p)
    n = int(p.num_requests or 1)
    c = min(int(p.concurrency or n), n)
    # requests drawn from the benchmark's dataset where the point names it (a fixed seed: the same
    # requests every replay), else all of input_len + output_len
    w = _lengths(p)
    inp, out = w.sample(n, seed=0)[1:] if w else (np.full(n, p.input_len), np.full(n, p.output_len))
    lay, dtypes = Layout.of(p.tp, p.ep, p.pp), resolve_dtypes(m, p.weight_dtype, p.kv_dtype)
    table = IterationTable.for_requests(m, hw, lay, dtypes, engine, inp, out)   # every round's lengths
    if p.request_rate and p.arrivals == "constant":      # an open loop: the arrivals are fixed, so one
        nxt = np.arange(n) / p.request_rate               # round settles it
    elif p.request_rate:
        gaps = np.random.default_rng(1).exponential(1.0 / p.request_rate, n)
        nxt = np.cumsum(gaps) - gaps[0]
    elif c < n:                  # a closed loop: start from each client's requests served alone
        nxt = _chained(_alone_e2e_s(m, hw, lay, dtypes, engine, inp, out, table), c)
    else:
        nxt = np.zeros(n)
    for _ in range(WAVE_ITERATIONS):           # (a run that has not settled by then keeps its last round)
        arrival = nxt
        order = np.argsort(arrival, kind="stable")
        r = simulate(m, hw, lay, dtypes, engine, arrival[order], inp[order], out[order], warmup_frac=0.0,
                     table=table)
        e2e = np.empty(n)
        e2e[order] = r.e2e_s
        nxt = arrival.copy()
        nxt[c:] = arrival[:-c] + e2e[:-c]          # sent when the client's previous answer is complete
        if np.array_equal(nxt, arrival):
            break
    return ((float(np.mean(r.ttft_s)), float(np.mean(r.tpot_s))),
            (float(np.median(r.ttft_s)), float(np.median(r.tpot_s))), float(out.sum()) / r.makespan_s)


def _alone_e2e_s(m, hw, lay, dtypes, engine, inp, out, table) -> np.ndarray:
    """Each request's end-to-end time when it has the engine to itself (sent a day apart: the
    simulator skips idle time), a lower bound on its time in any loop that shares the engine."""
    from planner.serving.simulate import simulate

    r = simulate(m, hw, lay, dtypes, engine, np.arange(len(inp)) * 86_400.0, inp, out, warmup_frac=0.0,
                 table=table)
    return np.asarray(r.e2e_s, dtype=float)


def _chained(e2e_s: np.ndarray, clients: int) -> np.ndarray:
    """Send times of a closed loop of ``clients`` (request j is client j mod C's (j // C)-th) when
    request j takes ``e2e_s[j]``: the first wave at 0, then each after its predecessor's answer.
    From the alone times this is the earliest any request can be sent, so the replay's fixed point
    starts below the answer, near it when requests seldom overlap (at one client, exactly on it),
    instead of from all-at-zero, which needs about one round per wave to undo."""
    n = len(e2e_s)
    waves = -(-n // clients)
    pad = np.zeros(waves * clients)
    pad[:n] = e2e_s
    starts = np.zeros_like(pad)
    starts[clients:] = np.cumsum(pad.reshape(waves, clients), axis=0)[:-1].ravel()
    return starts[:n]


def _replay_inputs(fw_json: str, p: Point):
    """(model, hardware as the framework sees it, engine sized as the run was) of a replayed point."""
    fw = Framework.model_validate_json(fw_json)
    engine = _sized_engine(fw, p.max_num_seqs, p.max_batched_tokens, p.mtp_tokens, p.mtp_acceptance,
                           p.prefill_delay_passes, p.draft)
    return _replayed(p.model), fw.apply(hardware(p.hardware)), engine


def _lengths(p: Point):
    """The request mix of ``p``'s benchmark dataset (rate 1: only its lengths are read), or None."""
    if p.lengths is None:
        return None
    from planner.serving.workload import Fixed, Workload

    return Workload(rate=1.0, trace=p.lengths, output=Fixed(value=p.output_len) if p.fixed_output else None)


def _replayed(name: str):
    """Model ``name`` as a published run is replayed: as measured, even past the config's nominal
    window (BLOOM's ALiBi positions extrapolate beyond its 2,048 training tokens)."""
    from planner.catalog.model_catalog import model as get_model

    return get_model(name).model_copy(update={"max_context": None})


@lru_cache(maxsize=4096)
def _closed_loop(fw_json: str, hw_name: str, model: str, input_len: int, output_len: int, concurrency: int | None,
                 deploy: tuple, max_num_seqs: int | None = None, max_batched_tokens: int | None = None,
                 mtp_tokens: int = 0, mtp_acceptance: float = 0.0, draft: str | None = None):
    """One closed-loop steady state, shared by the TTFT, TPOT and throughput points of a run (with
    the engine sizes and the speculative decoding the run used, where the point states them)."""
    from planner.serving.closed_loop import throughput

    fw = Framework.model_validate_json(fw_json)
    return throughput(_replayed(model), fw.apply(hardware(hw_name)), input_len=input_len, output_len=output_len,
                      concurrency=concurrency,
                      engine=_sized_engine(fw, max_num_seqs, max_batched_tokens, mtp_tokens, mtp_acceptance,
                                           draft=draft),
                      **dict(deploy))


def _sized_engine(fw: Framework, max_num_seqs: int | None, max_batched_tokens: int | None, mtp_tokens: int = 0,
                  mtp_acceptance: float = 0.0, prefill_delay_passes: int | None = None, draft: str | None = None):
    """The framework's engine with the sizes, the draft tokens and the prefill delayer a published
    run used, where the point states them (a point's MTP reaches the serving evaluators too, not
    only the static ones)."""
    sized = {k: v for k, v in (("max_num_seqs", max_num_seqs), ("max_batched_tokens", max_batched_tokens),
                               ("prefill_delay_passes", prefill_delay_passes)) if v is not None}
    if mtp_tokens:
        sized |= {"mtp_tokens": mtp_tokens, "mtp_acceptance": mtp_acceptance, "draft": draft}
    from planner.serving.batching import Engine

    return Engine(**(fw.engine_knobs() | sized))


def phase(metric: str) -> str:
    """Error-band phase of a metric (``catalog/bands.py``)."""
    if metric in ("prefill_s", "ttft_s", "prefill_tokens_per_s_per_device"):
        return "prefill"
    return "decode" if metric in ("decode_step_s", "tpot_s", "decode_tokens_per_s_per_device_at_tpot_bound") \
        else "serving"


def slowdown(metric: str, predicted: float, measured: float) -> float:
    """Measured time over predicted time (throughputs: predicted over measured)."""
    return measured / predicted if metric in LATENCY else predicted / measured


def decode_at_tpot_bound(p: Point, tpot_bound_s: float, max_batch_per_device: int = 256,
                         fw: Framework | None = None) -> dict:
    """Decode throughput per device at a TPOT bound, the way serving papers quote it: the largest
    batch per device (same deployment and memory fraction as point ``p``) whose predicted TPOT meets the bound and
    fits in memory, and ``batch / TPOT`` there. All batches are evaluated in one vectorized call."""
    from planner.catalog.draft import draft as get_draft
    from planner.catalog.model_catalog import model
    from planner.perf.estimate import evaluate, resolve_dtypes
    from planner.perf.parallel import Layout
    from planner.perf.speculation import Speculation

    m, hw = model(p.model), _as_run(fw, p).apply(hardware(p.hardware))
    lay = Layout.of(p.tp, p.ep, p.pp)
    devices = int(np.ravel(lay.devices)[0])
    per_dev = np.arange(1, max_batch_per_device + 1)
    r = evaluate(m, hw, lay, per_dev * devices, p.input_len, p.output_len,
                 resolve_dtypes(m, p.weight_dtype, p.kv_dtype),
                 Speculation(p.mtp_tokens, p.mtp_acceptance, draft=get_draft(p.draft)))
    tpot = np.ravel(r.tpot_s)
    ok = (tpot <= tpot_bound_s) & np.ravel(r.memory.fits)
    if not ok.any():
        return {"tpot_bound_s": tpot_bound_s, "batch_per_device": 0, "tokens_per_s_per_device": 0.0,
                "min_tpot_s": float(tpot.min())}
    i = int(np.flatnonzero(ok)[-1])
    return {"tpot_bound_s": tpot_bound_s, "batch_per_device": int(per_dev[i]),
            "tokens_per_s_per_device": float(per_dev[i] / tpot[i]), "min_tpot_s": float(tpot.min())}


class Row(BaseModel):
    id: str
    vendor: str
    framework: str
    source: str
    metric: str
    kind: str            # latency | throughput
    role: str
    measured: float
    predicted: float
    rel_error: float     # (predicted - measured) / measured
    phase: str           # error-band regime: prefill | decode | serving
    bound: str           # compute | memory | comm | overhead at the point's conditions
    slowdown: float      # measured / predicted time (catalog/bands.py)


def rows(path: Path | None = None, progress=None) -> list[Row]:
    """Every point predicted, with its error-band regime; ``progress(done, total)`` per point."""
    out = []
    points = load_points(path).points
    for k, p in enumerate(points):
        if progress is not None:
            progress(k, len(points))
        pred, bounds = predict_with_bounds(p)
        ph = phase(p.metric)
        out.append(Row(id=p.id, vendor=p.vendor, framework=p.framework, source=p.source, metric=p.metric,
                       kind="latency" if p.metric in LATENCY else "throughput", role=p.role, measured=p.value,
                       predicted=pred, rel_error=(pred - p.value) / p.value, phase=ph, bound=bounds[ph],
                       slowdown=slowdown(p.metric, pred, p.value)))
    return out


def validate(path: Path | None = None, progress=None) -> dict:
    """Every point predicted against its measurement; ``progress(done, total)`` is called per point."""
    rows_ = rows(path, progress)
    from planner.microbench import (
        allreduce_sweeps,
        decode_attention_sweeps,
        gemm_sweeps,
        linear_decode_sweeps,
        moe_mlp_sweeps,
    )

    sweeps = [{k: v for k, v in s.items() if not k.endswith("_tflops")} for s in gemm_sweeps()]
    decode, linear, moe = ([{k: v for k, v in s.items() if not k.endswith("_us")} for s in f()]
                           for f in (decode_attention_sweeps, linear_decode_sweeps, moe_mlp_sweeps))
    return {"points": [r.model_dump() for r in rows_], "summary": _summary(rows_, "vendor"),
            "summary_by_framework": _summary(rows_, "framework"), "corpus": corpus(rows_),
            "microbenchmarks": sweeps, "decode_attention": decode, "linear_decode": linear,
            "moe_mlp": moe,
            "collectives": allreduce_sweeps()}


def corpus(rows_: list[Row]) -> dict[str, dict[str, dict[str, int]]]:
    """Points per vendor and per source: {vendor|source: {name: {calibration, held_out}}}."""
    out: dict[str, dict[str, dict[str, int]]] = {"vendor": {}, "source": {}}
    for r in rows_:
        for by in ("vendor", "source"):
            cell = out[by].setdefault(getattr(r, by), {"calibration": 0, "held_out": 0})
            cell[r.role] += 1
    return out


def _summary(rows: list[Row], by: str) -> dict[str, dict]:
    """{role: {group: {latency|throughput: {n, median_abs_rel_error, p90_abs_rel_error}}}}."""
    out: dict[str, dict] = {}
    for role in ("held_out", "calibration"):
        for group in sorted({getattr(r, by) for r in rows}):
            for kind in ("latency", "throughput"):
                errs = np.abs([r.rel_error for r in rows
                               if r.role == role and getattr(r, by) == group and r.kind == kind])
                if errs.size:
                    out.setdefault(role, {}).setdefault(group, {})[kind] = {
                        "n": int(errs.size), "median_abs_rel_error": float(np.median(errs)),
                        "p90_abs_rel_error": float(np.quantile(errs, 0.9))}
    return out
