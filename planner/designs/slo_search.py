"""SLO-aware search, aggregated vs disaggregated (the question NVIDIA's aiconfigurator answers):
for fixed input/output lengths and TTFT / TPOT bounds, which deployment gives the most output
tokens/s per accelerator, on each hardware, with prefill and decode together (aggregated, the
colocated steady state) or on separate instances (disaggregated: a prefill pool sized for the
TTFT bound, a decode pool for the TPOT bound, KV shipped over the NICs)?

Every (hardware, layout, dtype) is evaluated as numpy arrays in one pass; per-GPU throughput of a
disaggregated pair is ``1 / (1 / r_prefill + 1 / r_decode)`` (accelerator-seconds per request
add), and the two pools are chosen independently since each bound binds one pool only.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.dtypes import DType
from planner.catalog.model import ModelSpec
from planner.frozen import Frozen
from planner.perf.memory import kv_cache_bytes_per_token
from planner.perf.parallel import Layout, on_dies
from planner.search import BLOCK, RunningFront, batched, blocks, candidates, map_blocks, pareto_front, steady_heap
from planner.serving.batching import Engine, iteration
from planner.serving.queueing import GRID, load_grid, serving_curve, slo_ok
from planner.serving.slo import SLO
from planner.serving.workload import Workload, length_stats


class SloSearchSpec(Frozen):
    type: Literal["slo-search"] = "slo-search"
    modes: list[Literal["aggregated", "disaggregated"]] = ["aggregated", "disaggregated"]
    prefill_utilization: list[float] = Field([0.2, 0.4, 0.6, 0.8, 0.9], description="prefill pool loads tried")


class Config(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    mode: str
    hardware: str
    weight_dtype: str
    layout: str                      # "tp8" or "prefill tp2 x4 + decode tp8"
    tokens_per_s_per_gpu: float      # output tokens
    tokens_per_s_per_user: float     # 1 / TPOT
    ttft_s: float
    tpot_s: float
    requests_per_s_per_gpu: float


class SloSearchResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: Literal["slo-search"] = "slo-search"
    model: str
    candidates: int                  # layouts x dtypes x hardware evaluated (each a full load curve)
    best: list[Config]               # best per (hardware, mode)
    pareto: list[Config]             # tokens/s/GPU vs tokens/s/user, all hardware and modes
    verdict: str
    certainty: dict | None = None      # sizes at P50 and at the scenario's confidence (planner.confidence)


def plan_slo_search(model: ModelSpec, spec: SloSearchSpec, workload: Workload, slo: SLO, engine: Engine,
                    hardware: list[str], tp: list[int], ep: list[int], pp: list[int], weight_dtypes: list[DType],
                    kv_dtype: DType | None, name: str, block: int = BLOCK, workers: int = 1) -> SloSearchResult:
    """Streaming search: candidates are evaluated ``block`` at a time and each block is reduced at
    once to the best point per (hardware, mode) and the running Pareto front, so memory is
    O(block + front) whatever the number of candidates; labels are formatted for survivors only.
    ``workers`` > 1 evaluates blocks on that many local processes."""
    assert GRID <= _MAX_GRID
    steady_heap()
    stats = length_stats(workload)
    ttft_max = min(v for _, v in slo.ttft_s.items()) if slo.ttft_s.items() else np.inf
    tpot_max = min(v for _, v in slo.tpot_s.items()) if slo.tpot_s.items() else np.inf
    acc = _Reducer()
    count = 0
    share = set(spec.modes) == {"aggregated", "disaggregated"}

    def jobs():
        nonlocal count
        for hw, lay, dtypes in candidates(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype, engine.framework,
                                          engine.memory_fraction, engine.kv_pool_tokens):
            count += lay.tp.size
            groups = {g: acc.groups[g] for g in (acc.group("aggregated", hw.name, dtypes.weight.value),
                                                 acc.group("disaggregated", hw.name, dtypes.weight.value))}
            pre = _best_prefill(model, hw, lay, dtypes, stats, workload, spec, ttft_max) \
                if "disaggregated" in spec.modes else None
            for index, sub in blocks(lay, block):
                yield groups, index, hw, sub, dtypes, pre

    task = functools.partial(_evaluate_blocks, model=model, engine=engine, stats=stats, workload=workload, slo=slo,
                             spec=spec, tpot_max=tpot_max, share=share)
    # a task reduces 8 blocks into one reduction (its front drops most of a later block's points
    # before they are sorted), merged here in order: the same answer on any number of processes
    for part in map_blocks(task, batched(jobs(), 8), workers, chunk=1):
        acc.merge(part)
    if not acc.best:
        from planner.errors import InfeasibleError

        raise InfeasibleError(f"no configuration of {model.name} on {', '.join(hardware)} meets TTFT <= {ttft_max:g} s "
                              f"and TPOT <= {tpot_max:g} s")
    best = sorted((acc.config(r) for r in acc.best_rows()), key=lambda c: -c.tokens_per_s_per_gpu)
    pareto = sorted((acc.config(r) for r in acc.front_rows()), key=lambda c: -c.tokens_per_s_per_gpu)
    top = best[0]
    verdict = f"best: {top.mode} {top.hardware} {top.layout} {top.weight_dtype}, {top.tokens_per_s_per_gpu:,.0f} " \
              f"output tokens/s per GPU at {top.tokens_per_s_per_user:.0f} tokens/s per user"
    return SloSearchResult(scenario=name, model=model.name, candidates=count, best=best, pareto=pareto,
                           verdict=verdict)


def _evaluate_blocks(jobs, model, engine, stats, workload, slo, spec, tpot_max, share) -> _Reducer:
    """The points of some blocks of candidates, reduced together (one task: picklable for a
    process pool). ``share``: both modes are searched, so where the engine chunks prefills their
    curves share one iteration grid."""
    steady_heap()                    # once per process: pool workers too
    part = _Reducer()
    for groups, index, hw, sub, dtypes, pre in jobs:
        part.groups.update(groups)
        agg, dis = groups
        on = engine.on(hw)               # the engine as it runs on this device (a mapping by device)
        # with chunked prefill both modes' curves run on the same iteration grid: compute it once
        # powers are not part of this search's answer: the roofline skips them (power=False)
        load = load_grid(model, hw, sub, dtypes, on, stats, power=False) if share and on.chunked_prefill else None
        if "aggregated" in spec.modes:
            _aggregated(part, agg, index, model, hw, sub, dtypes, on, stats, workload, slo, load)
        if pre is not None:
            _disaggregated(part, dis, index, model, hw, sub, dtypes, on, stats, pre, tpot_max, load)
    return part


def _aggregated(acc: _Reducer, group: int, index: np.ndarray, model, hw, lay, dtypes, engine, stats, workload, slo,
                load) -> None:
    """Every SLO-meeting load point of the colocated steady state of each layout in the block."""
    devices = lay.devices.astype(float)
    c = serving_curve(model, hw, lay, dtypes, engine, stats, workload.arrival.scv, load=load, power=False,
                      percentiles=slo.bound_percentiles(also=("p90",)))
    i, j, at = _points(slo_ok(c, slo))
    rate, dev = at(c.rate), devices.take(i)
    acc.add(group, lay, index, i, j, None, np.nan, rate * stats.mean_output / dev, 1 / at(c.tpot["mean"]),
            at(c.ttft["p90"]), at(c.tpot["p90"]), rate / dev)


def _points(ok: np.ndarray):
    """(candidate, load point, gather) of the points ``ok`` (candidates, GRID) holds, in the order of
    ``np.nonzero``; ``gather(values)`` picks those points of a (candidates, GRID) array (the same
    numbers as ``values[i, j]``, by flat index: several times faster than indexing by two arrays)."""
    flat = np.flatnonzero(ok)
    i, j = np.divmod(flat, ok.shape[1])
    return i, j, lambda values: np.ravel(values).take(flat)


_MAX_GRID = 64     # load points per candidate the point ranks leave room for
_FLOATS = ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "tpot_s", "requests_per_s_per_gpu")


class _Reducer:
    """Best point per (hardware, mode) and the running Pareto front (tokens/s/GPU vs tokens/s/user,
    both maximized) of a stream of operating-point blocks. A point is numbers only - its group
    (mode, hardware, dtype), its layout degrees, and for disaggregated pairs the prefill layout and
    pool ratio - and becomes a ``Config`` (with its label) only if it survives. Each point carries
    ``seq``, its rank in a single pass over all points (per hardware and dtype: every aggregated
    point, then every disaggregated one; candidates in order; load points in order), and ties go
    to the lower rank, so the answer is the one-pass answer whatever the block order."""

    def __init__(self, groups: dict[int, tuple[str, str, str]] | None = None) -> None:
        self.groups: dict[int, tuple[str, str, str]] = dict(groups or {})    # id -> (mode, hardware, dtype)
        self.best: dict[tuple[str, str], dict] = {}     # (hardware, mode) -> row
        self.first: dict[tuple[str, str], int] = {}     # (hardware, mode) -> rank of its first point
        self.front = RunningFront()

    def group(self, mode: str, hw: str, dtype: str) -> int:
        g = len(self.groups)
        self.groups[g] = (mode, hw, dtype)
        return g

    def add(self, group: int, lay: Layout, index: np.ndarray, i: np.ndarray, j: np.ndarray,
            prefill: tuple[int, int, int] | None, ratio, *values) -> None:
        """Points (candidate ``i`` of the block whose candidates are ``index`` in the group, load
        point ``j``); ``values`` in the order of ``_FLOATS``."""
        n = np.size(i)
        if n == 0:
            return
        cols = {f: np.broadcast_to(np.asarray(v, dtype=float), n) for f, v in zip(_FLOATS, values, strict=True)}
        seq = (np.int64(group) << 40) + index[i].astype(np.int64) * _MAX_GRID + j
        ratio = np.broadcast_to(np.asarray(ratio, dtype=float), n)
        ptp, pep, ppp = prefill or (0, 0, 0)

        def rows(sel) -> dict[str, np.ndarray]:
            m = np.size(seq[sel])
            return {"seq": seq[sel], "group": np.full(m, group), "tp": lay.tp[i[sel]], "ep": lay.ep[i[sel]],
                    "pp": lay.pp[i[sel]], "ratio": ratio[sel], **{f: v[sel] for f, v in cols.items()},
                    "ptp": np.full(m, ptp), "pep": np.full(m, pep), "ppp": np.full(m, ppp)}

        mode, hw, _ = self.groups[group]
        value = cols["tokens_per_s_per_gpu"]
        k = int(np.argmax(value))          # first of equal maxima: points of a block come in seq order
        self._offer((hw, mode), {f: v[0] for f, v in rows(slice(k, k + 1)).items()}, int(seq[0]))
        # only points no held front point dominates can join the front: the others need no payload
        keep = np.flatnonzero(self.front.undominated(-value, -cols["tokens_per_s_per_user"]))
        keep = keep[pareto_front(-value[keep], -cols["tokens_per_s_per_user"][keep])]   # in order, as ``add`` keeps
        self.front.add(-value[keep], -cols["tokens_per_s_per_user"][keep], **rows(keep))

    def _offer(self, key: tuple[str, str], row: dict, first: int) -> None:
        """``row`` becomes the best of ``key`` if it has more tokens/s/GPU (or as many, earlier)."""
        held, v = self.best.get(key), "tokens_per_s_per_gpu"
        if held is None or row[v] > held[v] or (row[v] == held[v] and row["seq"] < held["seq"]):
            self.best[key] = row
        self.first[key] = min(first, self.first.get(key, first))

    def merge(self, other: _Reducer) -> None:
        """Fold in the reduction of other points (another block, maybe from another process)."""
        for key, row in other.best.items():
            self._offer(key, row, other.first[key])
        if len(other.front):
            self.front.add(other.front.a, other.front.b, **other.front.rows)

    def best_rows(self) -> list[dict]:
        """Best row per (hardware, mode), keys in the order of their first point."""
        return [self.best[key] for key in sorted(self.best, key=self.first.__getitem__)]

    def front_rows(self) -> list[dict]:
        r = self.front.rows
        return [{f: v[k] for f, v in r.items()} for k in range(len(self.front))]

    def config(self, row: dict) -> Config:
        mode, hw, dtype = self.groups[int(row["group"])]
        decode = _layout_name(row["tp"], row["ep"], row["pp"])
        layout = decode if mode == "aggregated" else \
            f"prefill {_layout_name(row['ptp'], row['pep'], row['ppp'])} + decode {decode} " \
            f"({row['ratio']:.2f} prefill GPUs per decode GPU)"
        return Config(mode=mode, hardware=hw, weight_dtype=dtype, layout=layout,
                      **{f: float(row[f]) for f in _FLOATS})


def _layout_name(t, e, p) -> str:
    return f"tp{t}" + (f" ep{e}" if e > 1 else "") + (f" pp{p}" if p > 1 else "")


def _prefill_points(model, hw, lay, dtypes, stats, workload, spec, ttft_max) -> tuple[np.ndarray, np.ndarray]:
    """(prefill requests/s per GPU meeting the TTFT bound, TTFT) of each layout at each tried
    utilisation, shape (candidates, utilisations): M/G/1 with Kingman's mean wait and an
    exponential tail for the P90, plus the KV transfer over the instance's NICs."""
    I = stats.mean_prefill  # noqa: E741
    devices = lay.devices.astype(float)
    s = iteration(model, hw, lay, dtypes, 0.0, 16.0, I, I, power=False).time_s          # (C,)
    # an instance with attention data-parallel replicas prefills one prompt on each side by side:
    # as many M/G/1 servers, each at the utilisation tried (``perf.ops._prompt_skew``)
    replicas = on_dies(hw, lay)[1].attention_dp.astype(float)
    nic = hw.scale_out.bandwidth_per_direction.value * hw.efficiency.scale_out.value * devices
    xfer = kv_cache_bytes_per_token(model, dtypes.kv) * stats.mean_input / nic
    rho = np.asarray(spec.prefill_utilization)[None, :]
    cs2 = stats.second_prefill / I**2 - 1
    wait = rho / (1 - rho) * (workload.arrival.scv + cs2) / 2 * s[:, None]               # Kingman M/G/1
    wait90 = np.where(rho > 0.1, wait / rho * np.log(rho / 0.1), 0.0)
    ttft = wait90 + s[:, None] + xfer[:, None]
    return np.where(ttft <= ttft_max, rho * replicas[:, None] / s[:, None] / devices[:, None], 0.0), ttft


def _best_prefill(model, hw, lay, dtypes, stats, workload, spec, ttft_max) -> tuple | None:
    """(prefill requests/s per GPU, its TTFT, its layout) of the best prefill instance within the
    TTFT bound over all layouts (ties: the first layout, then the lowest load), or None if none
    meets it. One pass over all of a hardware's layouts at once: arrays of (layouts,
    utilisations), a few thousand numbers (one roofline call instead of one per block: this runs
    in the process that hands blocks to the workers)."""
    r_pre, ttft = _prefill_points(model, hw, lay, dtypes, stats, workload, spec, ttft_max)
    ip, jp = np.unravel_index(np.argmax(r_pre), r_pre.shape)     # the first of equal maxima
    if not r_pre[ip, jp] > 0:
        return None
    return float(r_pre[ip, jp]), float(ttft[ip, jp]), (int(lay.tp[ip]), int(lay.ep[ip]), int(lay.pp[ip]))


def _disaggregated(acc: _Reducer, group: int, index: np.ndarray, model, hw, lay, dtypes, engine, stats, pre, tpot_max,
                   load) -> None:
    """The best prefill instance paired with every decode operating point of the block within the
    TPOT bound: accelerator-seconds per request add, ``1 / (1 / r_prefill + 1 / r_decode)``."""
    best_pre, best_ttft, pre_layout = pre
    dstats = stats.model_copy(update={"mean_prefill": 1e-9, "second_prefill": 1e-18})
    devices = lay.devices.astype(float)
    c = serving_curve(model, hw, lay, dtypes, engine.model_copy(update={"chunked_prefill": True}), dstats, load=load,
                      power=False, percentiles=("p90",), ttft=False)
    i, j, at = _points(np.isfinite(c.tpot["p90"]) & (c.tpot["p90"] <= tpot_max))
    r_dec = at(c.rate) / devices.take(i)
    per_gpu = 1 / (1 / best_pre + 1 / r_dec)
    ratio = r_dec / best_pre                        # prefill GPUs per decode GPU
    acc.add(group, lay, index, i, j, pre_layout, ratio, per_gpu * stats.mean_output, 1 / at(c.tpot["mean"]),
            best_ttft, at(c.tpot["p90"]), per_gpu)
