"""DistServe-style placement (Zhong et al., OSDI 2024, arXiv 2401.09670, Sec. 4): prefill and
decode instances with their own parallelism (TP x PP each), searched for the most **goodput per
GPU**, the largest request rate at which a target fraction (e.g. 90%) of requests meets the TTFT
and the TPOT bounds, divided by the GPUs it takes.

* Prefill instance (tp, pp): FCFS, queued prompts packed into iterations of the engine's token
  budget; per instance a G/G/1 queue whose server works at ``mu`` tokens/s (a full packed
  iteration), Kingman's mean wait ``W = rho/(1-rho) (ca^2 + cs^2)/2 E[I]/mu``, P(wait <= x) =
  1 - rho exp(-x rho/W) (the exponential tail the colocated model uses); a request's own prompt of
  ``L`` tokens then takes ``D(L)`` (the roofline prefill, alone). TTFT attainment = sum_L w_L
  P(wait <= T - D(L)) over the workload's length support.
  DistServe sizes each phase at its own SLO (Alg. 1's simu_prefill / simu_decode).
* Decode instance (tp, pp): the decode-only continuous-batching curve (``serving.queueing``), TPOT
  attainment from its mean and spread (``queueing.attainment``), the KV handoff's delay spread over
  a request's ``O - 1`` gaps.
* **high-node-affinity** (Alg. 1, clusters with a fast cross-node network): prefill and decode
  chosen independently, then replicated (per-GPU goodput ``1 / (G_p/g_p + G_d/g_d)``); the KV
  crosses the NICs of the nodes the smaller instance spans, each node at ``cross_node_gbps`` (default
  its GPUs' scale-out NICs); the link's throughput caps each instance's rate.
* **low-node-affinity** (Alg. 2, slow cross-node network): prefill and decode share the stage count
  ``pp``; stage ``k`` of ``a`` prefill and ``b`` decode segments sit in one node (``a tp_p + b tp_d
  <= GPUs per node``), so the KV moves over NVLink (``min(tp_p, tp_d)`` GPUs' scale-up links);
  goodput per GPU ``min(a g_p, b g_d) / (pp (a tp_p + b tp_d))``.
* **colocated** reference (DistServe's vLLM++: the best TP/PP of one pool serving both phases): the
  colocated curve at the same attainment (TTFT and TPOT jointly, as DistServe measures vLLM).

Not modelled: pipeline bubbles of uneven prompts; the KV handoff is not queued behind others.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.dtypes import DType
from planner.catalog.model import ModelSpec
from planner.checks import Degrees, FrameworkChoice
from planner.designs.pool_physics import engine_named, machine_hw, prompt_service
from planner.errors import InfeasibleError
from planner.frozen import Frozen
from planner.normal import cdf as ndtr
from planner.perf.memory import free_kv_bytes_device, kv_cache_bytes_per_token
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving.batching import Engine, iteration
from planner.serving.queueing import attainment, serving_curve
from planner.serving.slo import SLO, Target
from planner.serving.workload import Workload, length_stats

Placement = Literal["high-node-affinity", "low-node-affinity"]


class PhaseSpace(Frozen):
    tp: Degrees = [1, 2, 4, 8]
    pp: Degrees = [1, 2, 4]


class DistServeSpec(Frozen):
    type: Literal["distserve"] = "distserve"
    hardware: str = Field(description="accelerator of every instance")
    framework: FrameworkChoice = Field(None, description="engine entry applied to the hardware (e.g. vllm-2023); "
                                       "default: engine.framework")
    weight_dtype: DType = DType.bf16
    gpus_per_node: int = Field(8, ge=1, le=512, description="GPUs a node (one scale-up domain) holds")
    cross_node_gbps: float | None = Field(None, gt=0, description="cross-node bandwidth per node, Gb/s per "
                                          "direction (DistServe's testbed: 25); default: the GPUs' NICs")
    placements: list[Placement] = ["high-node-affinity", "low-node-affinity"]
    attainment: float = Field(0.9, gt=0, lt=1, description="fraction of requests meeting TTFT and TPOT")
    prefill: PhaseSpace = PhaseSpace()
    decode: PhaseSpace = PhaseSpace()
    baseline: PhaseSpace | None = Field(None, description="also the colocated design at these layouts only (e.g. "
                                        "DistServe's vLLM baseline: tp [1] for OPT-13B)")


class Placed(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    placement: str                  # high-node-affinity, low-node-affinity or colocated
    layout: str
    gpus: int                       # GPUs of one replica unit
    goodput_per_gpu: float          # requests/s per GPU at the attainment target
    prefill_goodput: float = float("nan")    # requests/s of one prefill instance
    decode_goodput: float = float("nan")
    kv_transfer_s: float = float("nan")      # mean KV handoff of a request
    binding: str = ""


class DistServeResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: Literal["distserve"] = "distserve"
    model: str
    hardware: str
    attainment: float
    ttft_s: float
    tpot_s: float
    best: list[Placed]              # the best of each placement, and the colocated reference
    verdict: str


def _layouts(model: ModelSpec, hw, space: PhaseSpace, dtypes: DTypes) -> Layout:
    """(tp, pp) pairs whose weights fit with room for KV (DistServe: G.size / (inter x intra) < C)."""
    tp, pp = np.meshgrid(space.tp, space.pp, indexing="ij")
    lay = Layout.of(tp.ravel(), 1, pp.ravel())
    ok = (model.num_layers % lay.pp == 0) & (model.num_heads % lay.tp == 0)
    ok &= free_kv_bytes_device(model, hw, lay, dtypes) > 0
    return Layout.of(lay.tp[ok], 1, lay.pp[ok])


def _name(tp, pp) -> str:
    return f"tp{int(tp)}" + (f" pp{int(pp)}" if pp > 1 else "")


def prefill_goodput(model, hw, lay: Layout, dtypes, engine: Engine, workload: Workload, ttft_s: float,
                    target: float, points: int = 200) -> np.ndarray:
    """Largest rate per prefill instance (one per layout) with TTFT attainment >= target.

    The instance is one server whose capacity is that of a full iteration of packed prompts
    (``mu = budget / t(budget)`` tokens/s, as DistServe batches queued prompts up to a token
    budget); a request's own prompt takes ``D(L)``, alone."""
    d = np.stack([prompt_service(model, hw, Layout.of(t, 1, p), dtypes, workload)[1]
                  for t, p in zip(lay.tp, lay.pp, strict=True)])               # (C, 48) seconds
    stats = length_stats(workload)
    budget = float(max(engine.batch_limits(hw)[1], stats.mean_prompt_len))
    mu = budget / iteration(model, hw, lay, dtypes, 0.0, 16.0, budget, stats.mean_prompt_len).time_s   # tokens/s
    es = (stats.mean_prefill / mu)[:, None]                                   # server seconds per request
    cs2 = stats.second_prefill / stats.mean_prefill**2 - 1
    rho = np.linspace(1e-3, 0.999, points)[None, :]                          # (1, R)
    wait = rho / (1 - rho) * (workload.arrival.scv + cs2) / 2 * es           # (C, R) Kingman
    slack = ttft_s - d[:, None, :]                                            # (C, 1, 48)
    ok_q = 1 - rho[..., None] * np.exp(-np.maximum(slack, 0) * rho[..., None] / wait[..., None])
    frac = np.where(slack >= 0, ok_q, 0.0).mean(axis=2)                       # support points are equal-weight
    good = frac >= target
    # attainment falls with load: the last good point before the first bad one
    first_bad = np.where(good.all(axis=1), good.shape[1], np.argmin(good, axis=1))
    rate = rho / es                                                           # (C, R) requests/s
    idx = np.maximum(first_bad - 1, 0)
    return np.where(first_bad > 0, rate[np.arange(len(idx)), idx], 0.0)


def decode_curves(model, hw, lay: Layout, dtypes, engine: Engine, workload: Workload):
    """Decode-only steady-state curves of every layout (no prompt work per iteration)."""
    stats = length_stats(workload)
    dstats = stats.model_copy(update={"mean_prefill": 1e-9, "second_prefill": 1e-18})
    return serving_curve(model, hw, lay, dtypes, engine.model_copy(update={"chunked_prefill": True}), dstats,
                         workload.arrival.scv)


def decode_goodput(curve, tpot_s: np.ndarray, target: float, gaps: float, xfer_s: np.ndarray) -> np.ndarray:
    """Largest rate per decode instance (rows of ``curve``) with TPOT attainment >= target, the KV
    handoff ``xfer_s`` (broadcast against the rows) spread over ``gaps`` tokens of each request."""
    mean = curve.tpot["mean"]
    spread = np.maximum(curve.tpot["p90"] - mean, 1e-12) / 1.2815515655446004
    eff = tpot_s - np.asarray(xfer_s, float)[..., None] / max(gaps, 1.0)
    with np.errstate(invalid="ignore"):
        frac = ndtr((eff - mean) / spread)
    ok = np.isfinite(curve.rate) & (frac >= target)
    first_bad = np.where(ok.all(axis=-1), ok.shape[-1], np.argmin(ok, axis=-1))
    rate = np.broadcast_to(np.where(np.isfinite(curve.rate), curve.rate, 0.0), ok.shape)
    idx = np.maximum(first_bad - 1, 0)
    picked = np.take_along_axis(rate, idx[..., None], axis=-1)[..., 0]
    return np.where(first_bad > 0, picked, 0.0)


def _node_gbps(spec: DistServeSpec, hw) -> float:
    if spec.cross_node_gbps is not None:
        return spec.cross_node_gbps
    return hw.scale_out.bandwidth_per_direction.value * hw.efficiency.scale_out.value * 8 / 1e9 * spec.gpus_per_node


def plan_distserve(model: ModelSpec, spec: DistServeSpec, workload: Workload, slo: SLO, engine: Engine,
                   name: str) -> DistServeResult:
    th = slo.thresholds()
    if "ttft_s" not in th or "tpot_s" not in th:
        from planner.errors import InputError

        raise InputError("design distserve needs slo.ttft_s and slo.tpot_s bounds (goodput counts requests meeting "
                         "both)")
    ttft, tpot = th["ttft_s"], th["tpot_s"]
    spec = engine_named(spec, engine)
    target = slo.attainment if slo.attainment is not None else spec.attainment
    hw = machine_hw(spec.hardware, spec.framework, 1.0, engine.memory_fraction, engine.kv_pool_tokens)
    kv = DType.bf16 if spec.weight_dtype.bytes < 2 else spec.weight_dtype
    dtypes = DTypes(weight=spec.weight_dtype, kv=kv)
    stats = length_stats(workload)
    kv_bytes = kv_cache_bytes_per_token(model, dtypes.kv) * stats.mean_input
    pl, dl = _layouts(model, hw, spec.prefill, dtypes), _layouts(model, hw, spec.decode, dtypes)
    if pl.tp.size == 0 or dl.tp.size == 0:
        raise InfeasibleError(f"{model.name} does not fit any searched layout on {spec.hardware}; add larger tp/pp")
    g_p = prefill_goodput(model, hw, pl, dtypes, engine, workload, ttft, target)
    curve = decode_curves(model, hw, dl, dtypes, engine, workload)
    gaps = stats.mean_output - 1
    best = []
    if "high-node-affinity" in spec.placements:
        best.append(_high_affinity(spec, hw, pl, dl, g_p, curve, tpot, target, gaps, kv_bytes))
    if "low-node-affinity" in spec.placements:
        best.append(_low_affinity(spec, hw, pl, dl, g_p, curve, tpot, target, gaps, kv_bytes))
    both = PhaseSpace(tp=sorted(set(spec.prefill.tp) | set(spec.decode.tp)),
                      pp=sorted(set(spec.prefill.pp) | set(spec.decode.pp)))
    best.append(_colocated(model, hw, both, dtypes, engine, workload, ttft, tpot, target, "colocated"))
    if spec.baseline is not None:
        best.append(_colocated(model, hw, spec.baseline, dtypes, engine, workload, ttft, tpot, target,
                               "colocated baseline"))
    best = [b for b in best if b is not None]
    if not any(b.goodput_per_gpu > 0 for b in best):
        raise InfeasibleError(f"no layout of {model.name} on {spec.hardware} serves {target:.0%} of requests within "
                              f"TTFT {ttft:g} s and TPOT {tpot:g} s; relax the SLO or add hardware")
    top = max(best, key=lambda b: b.goodput_per_gpu)
    verdict = (f"best: {top.placement} {top.layout}, {top.goodput_per_gpu:.3g} req/s per GPU at {target:.0%} "
               f"attainment, " + ", ".join(f"{_ratio(top, b)} {b.placement} ({b.layout})" for b in best
                                            if b.placement.startswith("colocated")))
    return DistServeResult(scenario=name, model=model.name, hardware=spec.hardware, attainment=target, ttft_s=ttft,
                           tpot_s=tpot, best=sorted(best, key=lambda b: -b.goodput_per_gpu), verdict=verdict)


def _ratio(a: Placed, b: Placed) -> str:
    return f"{a.goodput_per_gpu / b.goodput_per_gpu:.2f}x" if b.goodput_per_gpu > 0 else "infinitely more than"


def _high_affinity(spec, hw, pl, dl, g_p, curve, tpot, target, gaps, kv_bytes) -> Placed | None:
    """Alg. 1: the best prefill and the best decode layout per GPU, each capped by its NIC share."""
    node_bps = _node_gbps(spec, hw) * 1e9 / 8
    nodes_p = np.ceil(pl.devices / spec.gpus_per_node)
    nodes_d = np.ceil(dl.devices / spec.gpus_per_node)
    # the KV of a pair crosses the nodes the smaller instance spans
    link = np.minimum(nodes_p[:, None], nodes_d[None, :]) * node_bps              # (P, D) bytes/s
    xfer = kv_bytes / link
    g_d = decode_goodput(curve, tpot, target, gaps, xfer)                       # (P, D)
    cap_p = np.minimum(g_p[:, None], nodes_p[:, None] * node_bps / kv_bytes) + 0 * g_d   # sending NICs, (P, D)
    cap_d = np.minimum(g_d, nodes_d[None, :] * node_bps / kv_bytes)               # receiving NICs
    with np.errstate(divide="ignore"):
        per_gpu = np.where((cap_p > 0) & (cap_d > 0),
                           1 / (pl.devices[:, None] / cap_p + dl.devices[None, :] / cap_d), 0.0)
    i, j = np.unravel_index(int(np.argmax(per_gpu)), per_gpu.shape)
    if per_gpu[i, j] <= 0:
        return None
    nic_bound = cap_p[i, j] < g_p[i] or cap_d[i, j] < g_d[i, j]
    return Placed(placement="high-node-affinity", gpus=int(pl.devices[i] + dl.devices[j]),
                  layout=f"prefill {_name(pl.tp[i], pl.pp[i])} + decode {_name(dl.tp[j], dl.pp[j])} "
                         f"({cap_d[i, j] / cap_p[i, j]:.2f} prefill per decode instance)",
                  goodput_per_gpu=float(per_gpu[i, j]), prefill_goodput=float(cap_p[i, j]),
                  decode_goodput=float(cap_d[i, j]), kv_transfer_s=float(xfer[i, j]),
                  binding="cross-node KV bandwidth" if nic_bound else "TTFT and TPOT attainment")


def _low_affinity(spec, hw, pl, dl, g_p, curve, tpot, target, gaps, kv_bytes) -> Placed | None:
    """Alg. 2: same stage count; a prefill and b decode segments of a stage share one node (NVLink)."""
    m = spec.gpus_per_node
    nvlink = hw.scale_up.bandwidth_per_direction.value * hw.efficiency.scale_up.value    # bytes/s per GPU
    same = pl.pp[:, None] == dl.pp[None, :]
    xfer = kv_bytes / pl.pp[:, None] / (np.minimum(pl.tp[:, None], dl.tp[None, :]) * nvlink)   # stages in parallel
    g_d = decode_goodput(curve, tpot, target, gaps, xfer)                          # (P, D)
    best, arg = 0.0, None
    for a in range(1, m + 1):
        for b in range(1, m + 1):
            fits = same & (a * pl.tp[:, None] + b * dl.tp[None, :] <= m)
            gpus = pl.pp[:, None] * (a * pl.tp[:, None] + b * dl.tp[None, :])
            per_gpu = np.where(fits, np.minimum(a * g_p[:, None], b * g_d) / gpus, 0.0)
            k = int(np.argmax(per_gpu))
            if per_gpu.flat[k] > best:
                best, arg = float(per_gpu.flat[k]), (a, b, *np.unravel_index(k, per_gpu.shape))
    if arg is None:
        return None
    a, b, i, j = arg
    return Placed(placement="low-node-affinity", gpus=int(pl.pp[i] * (a * pl.tp[i] + b * dl.tp[j])),
                  layout=f"pp{int(pl.pp[i])} over {int(pl.pp[i])} node(s); per node {a} prefill tp{int(pl.tp[i])} + "
                         f"{b} decode tp{int(dl.tp[j])} stage segments (KV over NVLink)",
                  goodput_per_gpu=best, prefill_goodput=float(g_p[i]), decode_goodput=float(g_d[i, j]),
                  kv_transfer_s=float(xfer[i, j]),
                  binding="prefill (TTFT)" if a * g_p[i] < b * g_d[i, j] else "decode (TPOT)")


def _colocated(model, hw, space: PhaseSpace, dtypes, engine, workload, ttft, tpot, target, label: str) -> Placed:
    """The best TP/PP in ``space`` of one pool serving both phases, at the same attainment
    (DistServe's vLLM++ over every layout; its vLLM at the paper's layout)."""
    lay = _layouts(model, hw, space, dtypes)
    if lay.tp.size == 0:
        return Placed(placement=label, layout="none fits", gpus=0, goodput_per_gpu=0.0, binding="memory")
    c = serving_curve(model, hw, lay, dtypes, engine, length_stats(workload), workload.arrival.scv)
    frac = attainment(c, SLO(ttft_s=Target(p90=ttft), tpot_s=Target(p90=tpot)))
    ok = np.isfinite(c.rate) & (c.rho < 1) & (frac >= target)
    first_bad = np.where(ok.all(axis=1), ok.shape[1], np.argmin(ok, axis=1))
    idx = np.maximum(first_bad - 1, 0)
    rate = np.where(first_bad > 0, np.where(np.isfinite(c.rate), c.rate, 0)[np.arange(len(idx)), idx], 0.0)
    per_gpu = rate / lay.devices
    k = int(np.argmax(per_gpu))
    return Placed(placement=label, layout=_name(lay.tp[k], lay.pp[k]), gpus=int(lay.devices[k]),
                  goodput_per_gpu=float(per_gpu[k]), binding="TTFT and TPOT attainment (joint)")
