"""The slo-search as it was before streaming (every SLO-meeting point of every candidate kept in
memory as columns, then reduced once), kept unchanged as the oracle the streaming search in
planner/designs/slo_search.py must equal. Its result types are the module's own."""

from __future__ import annotations

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.model import ModelSpec
from planner.designs.slo_search import Config, SloSearchResult, SloSearchSpec
from planner.perf.memory import kv_cache_bytes_per_token
from planner.perf.parallel import on_dies
from planner.search import candidates, pareto_front
from planner.serving.batching import Engine, iteration
from planner.serving.queueing import serving_curve, slo_ok
from planner.serving.slo import SLO
from planner.serving.workload import Workload, length_stats


def plan_slo_search(model: ModelSpec, spec: SloSearchSpec, workload: Workload, slo: SLO, engine: Engine,
                    hardware: list[str], tp: list[int], ep: list[int], pp: list[int], weight_dtypes: list[DType],
                    kv_dtype: DType | None, name: str) -> SloSearchResult:
    stats = length_stats(workload)
    ttft_max = min(v for _, v in slo.ttft_s.items()) if slo.ttft_s.items() else np.inf
    tpot_max = min(v for _, v in slo.tpot_s.items()) if slo.tpot_s.items() else np.inf
    table = _Table()          # every SLO-meeting operating point, as columns (no per-point objects)
    count = 0
    for hw, lay, dtypes in candidates(model, hardware, tp, ep, pp, weight_dtypes, kv_dtype, engine.framework):
        count += lay.tp.size
        names = np.array([f"tp{t}" + (f" ep{e}" if e > 1 else "") + (f" pp{p}" if p > 1 else "")
                          for t, e, p in zip(lay.tp, lay.ep, lay.pp, strict=True)], dtype=object)
        devices = lay.devices.astype(float)
        if "aggregated" in spec.modes:
            c = serving_curve(model, hw, lay, dtypes, engine, stats, workload.arrival.scv)
            i, j = np.nonzero(slo_ok(c, slo))
            table.add("aggregated", hw.name, dtypes.weight.value, names[i],
                      c.rate[i, j] * stats.mean_output / devices[i], 1 / c.tpot["mean"][i, j],
                      c.ttft["p90"][i, j], c.tpot["p90"][i, j], c.rate[i, j] / devices[i])
        if "disaggregated" in spec.modes:
            _disaggregated(table, model, hw, lay, names, devices, dtypes, engine, stats, workload, spec,
                           ttft_max, tpot_max)
    if table.empty:
        from planner.errors import InfeasibleError

        raise InfeasibleError(f"no configuration of {model.name} on {', '.join(hardware)} meets TTFT <= {ttft_max:g} s "
                              f"and TPOT <= {tpot_max:g} s")
    cols = table.columns()
    best_rows = []
    for key in dict.fromkeys(zip(cols["hardware"], cols["mode"], strict=True)):
        sel = np.flatnonzero((cols["hardware"] == key[0]) & (cols["mode"] == key[1]))
        best_rows.append(int(sel[np.argmax(cols["tokens_per_s_per_gpu"][sel])]))
    front = pareto_front(-cols["tokens_per_s_per_gpu"], -cols["tokens_per_s_per_user"])
    best = sorted((table.config(r) for r in best_rows), key=lambda c: -c.tokens_per_s_per_gpu)
    pareto = sorted((table.config(int(r)) for r in front), key=lambda c: -c.tokens_per_s_per_gpu)
    top = best[0]
    verdict = f"best: {top.mode} {top.hardware} {top.layout} {top.weight_dtype}, {top.tokens_per_s_per_gpu:,.0f} " \
              f"output tokens/s per GPU at {top.tokens_per_s_per_user:.0f} tokens/s per user"
    return SloSearchResult(scenario=name, model=model.name, candidates=count, best=best, pareto=pareto,
                           verdict=verdict)


class _Table:
    """Columns of operating points, appended in blocks of numpy arrays."""

    FIELDS = ("mode", "hardware", "weight_dtype", "layout", "tokens_per_s_per_gpu", "tokens_per_s_per_user",
              "ttft_s", "tpot_s", "requests_per_s_per_gpu")

    def __init__(self) -> None:
        self.blocks: list[list[np.ndarray]] = []

    def add(self, mode, hw, dtype, layout, *values) -> None:
        n = np.size(values[0])
        if n:
            self.blocks.append([np.full(n, mode, dtype=object), np.full(n, hw, dtype=object),
                                np.full(n, dtype, dtype=object), np.broadcast_to(np.asarray(layout, dtype=object), n),
                                *(np.broadcast_to(np.asarray(v, dtype=float), n) for v in values)])

    @property
    def empty(self) -> bool:
        return not self.blocks

    def columns(self) -> dict[str, np.ndarray]:
        if not hasattr(self, "_cols"):
            self._cols = {f: np.concatenate([b[k] for b in self.blocks]) for k, f in enumerate(self.FIELDS)}
        return self._cols

    def config(self, row: int) -> Config:
        c = self.columns()
        return Config(**{f: (c[f][row] if c[f].dtype == object else float(c[f][row])) for f in self.FIELDS})


def _disaggregated(table: _Table, model, hw, lay, names, devices, dtypes, engine, stats, workload, spec, ttft_max,
                   tpot_max) -> None:
    """Best prefill layout for the TTFT bound, paired with every decode operating point within the
    TPOT bound."""
    I, O = stats.mean_prefill, stats.mean_output  # noqa: E741
    s = iteration(model, hw, lay, dtypes, 0.0, 16.0, I, I).time_s                       # (C,)
    nic = hw.scale_out.bandwidth_per_direction.value * hw.efficiency.scale_out.value * devices
    xfer = kv_cache_bytes_per_token(model, dtypes.kv) * stats.mean_input / nic
    rho = np.asarray(spec.prefill_utilization)[None, :]
    cs2 = stats.second_prefill / I**2 - 1
    wait = rho / (1 - rho) * (workload.arrival.scv + cs2) / 2 * s[:, None]               # Kingman M/G/1
    wait90 = np.where(rho > 0.1, wait / rho * np.log(rho / 0.1), 0.0)
    ttft = wait90 + s[:, None] + xfer[:, None]
    # one M/G/1 server per attention data-parallel replica (session 10: a prompt is prefilled on one)
    replicas = on_dies(hw, lay)[1].attention_dp.astype(float)
    r_pre = np.where(ttft <= ttft_max, rho * replicas[:, None] / s[:, None] / devices[:, None], 0.0)  # req/s per GPU
    if r_pre.max() <= 0:
        return
    ip, jp = np.unravel_index(np.argmax(r_pre), r_pre.shape)
    best_pre, best_ttft = float(r_pre[ip, jp]), float(ttft[ip, jp])
    dstats = stats.model_copy(update={"mean_prefill": 1e-9, "second_prefill": 1e-18})
    c = serving_curve(model, hw, lay, dtypes, engine.model_copy(update={"chunked_prefill": True}), dstats)
    i, j = np.nonzero(np.isfinite(c.tpot["p90"]) & (c.tpot["p90"] <= tpot_max))
    r_dec = c.rate[i, j] / devices[i]
    per_gpu = 1 / (1 / best_pre + 1 / r_dec)
    ratio = r_dec / best_pre                        # prefill GPUs per decode GPU
    layout = np.array([f"prefill {names[ip]} + decode {names[k]} ({r:.2f} prefill GPUs per decode GPU)"
                       for k, r in zip(i, ratio, strict=True)], dtype=object)
    table.add("disaggregated", hw.name, dtypes.weight.value, layout, per_gpu * O, 1 / c.tpot["mean"][i, j],
              best_ttft, c.tpot["p90"][i, j], per_gpu)
