"""``planner validate``: predict every published measurement in ``validation/measurements.yaml``
from the catalog's hardware profiles, models and framework entries only, and summarize the error
per vendor and metric, calibration and held-out points apart."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from planner.catalog.frameworks import Framework, framework
from planner.catalog.hardware import hardware
from planner.errors import PlannerError
from planner.frozen import Frozen
from planner.yamlio import load_yaml, validation_error

Metric = Literal["prefill_s", "decode_step_s", "batch_latency_s", "offline_output_tokens_per_s",
                 "prefill_tokens_per_s_per_device", "ttft_s", "tpot_s", "output_tokens_per_s"]
LATENCY = {"prefill_s", "decode_step_s", "batch_latency_s", "ttft_s", "tpot_s"}


class Point(Frozen):
    """One published measurement. No field can carry a correction factor: predictions use the
    catalog only."""

    id: str
    vendor: Literal["nvidia", "amd", "huawei"]
    hardware: str
    model: str
    tp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    weight_dtype: str = "bf16"
    kv_dtype: str | None = None
    framework: str
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    batch: int | None = Field(None, ge=1)
    concurrency: int | None = Field(None, ge=1)
    mtp_tokens: int = Field(0, ge=0, description="MTP draft tokens per decode step, as deployed by the source")
    mtp_acceptance: float = Field(0.0, ge=0, lt=1, description="acceptance rate the source reports for them")
    metric: Metric
    value: float = Field(gt=0)
    source: str
    role: Literal["calibration", "held_out"]
    note: str | None = None


class Dataset(Frozen):
    sources: dict[str, str]
    points: list[Point]


def default_path() -> Path:
    here = Path(__file__).resolve().parent
    for p in (here / "_data" / "validation" / "measurements.yaml", here.parent / "validation" / "measurements.yaml"):
        if p.exists():
            return p
    raise PlannerError("validation/measurements.yaml not found")


def load_points(path: Path | None = None) -> Dataset:
    path = path or default_path()
    data, lines = load_yaml(path)
    try:
        ds = Dataset.model_validate(data)
    except ValidationError as e:
        raise validation_error(path, e, lines, Dataset) from None
    for p in ds.points:
        if p.source not in ds.sources:
            raise PlannerError(f"{path}: point {p.id} cites unknown source {p.source!r}")
    return ds


def predict(p: Point, fw: Framework | None = None) -> float:
    """The model's value for point ``p`` (SI units), from catalog data only (``fw`` replaces the
    point's framework entry: used by ``planner.calibrate`` to score candidate entries)."""
    from planner.catalog.model_catalog import model as get_model
    from planner.perf.estimate import estimate
    from planner.serving.closed_loop import throughput

    fw = fw or framework(p.framework)
    hw = fw.apply(hardware(p.hardware))
    # a published run is replayed as measured, even past the config's nominal window (BLOOM's ALiBi
    # positions extrapolate beyond its 2,048 training tokens)
    model = get_model(p.model).model_copy(update={"max_context": None})
    kw = dict(tp=p.tp, pp=p.pp, ep=p.ep, weight_dtype=p.weight_dtype, kv_dtype=p.kv_dtype)
    if p.metric in ("offline_output_tokens_per_s", "ttft_s", "tpot_s", "output_tokens_per_s"):
        r = throughput(model, hw, input_len=p.input_len, output_len=p.output_len, concurrency=p.concurrency,
                       engine=fw.engine(), **kw)
        return {"ttft_s": r.ttft_s, "tpot_s": r.tpot_s}.get(p.metric, r.output_tokens_per_s)
    out_len = 2 if p.metric == "decode_step_s" else p.output_len
    e = estimate(model, hw, batch=p.batch or 1, input_len=p.input_len, output_len=out_len,
                 mtp_tokens=p.mtp_tokens, mtp_acceptance=p.mtp_acceptance, **kw)
    if p.metric == "prefill_s":
        return e.ttft_s
    if p.metric == "decode_step_s":
        return e.tpot_s
    if p.metric == "batch_latency_s":
        return e.e2e_s
    return (p.batch or 1) * p.input_len / e.ttft_s / e.accelerators      # prefill tokens/s per device


def decode_at_tpot_bound(p: Point, tpot_bound_s: float, max_batch_per_device: int = 256) -> dict:
    """Decode throughput per device at a TPOT bound, the way serving papers quote it: the largest
    batch per device (same deployment as point ``p``) whose predicted TPOT meets the bound and
    fits in memory, and ``batch / TPOT`` there. All batches are evaluated in one vectorized call."""
    from planner.catalog.model_catalog import model
    from planner.perf.estimate import evaluate, resolve_dtypes
    from planner.perf.parallel import Layout
    from planner.perf.speculation import Speculation

    m, hw = model(p.model), framework(p.framework).apply(hardware(p.hardware))
    lay = Layout.of(p.tp, p.ep, p.pp)
    devices = int(np.ravel(lay.devices)[0])
    per_dev = np.arange(1, max_batch_per_device + 1)
    r = evaluate(m, hw, lay, per_dev * devices, p.input_len, p.output_len,
                 resolve_dtypes(m, p.weight_dtype, p.kv_dtype), Speculation(p.mtp_tokens, p.mtp_acceptance))
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
    metric: str
    kind: str            # latency | throughput
    role: str
    measured: float
    predicted: float
    rel_error: float     # (predicted - measured) / measured


def validate(path: Path | None = None, progress=None) -> dict:
    """Every point predicted against its measurement; ``progress(done, total)`` is called per point."""
    ds = load_points(path)
    rows = []
    for k, p in enumerate(ds.points):
        if progress is not None:
            progress(k, len(ds.points))
        pred = predict(p)
        rows.append(Row(id=p.id, vendor=p.vendor, framework=p.framework, metric=p.metric,
                        kind="latency" if p.metric in LATENCY else "throughput", role=p.role, measured=p.value,
                        predicted=pred, rel_error=(pred - p.value) / p.value))
    from planner.calibrate import allreduce_sweeps, gemm_sweeps

    sweeps = [{k: v for k, v in s.items() if not k.endswith("_tflops")} for s in gemm_sweeps()]
    return {"points": [r.model_dump() for r in rows], "summary": _summary(rows, "vendor"),
            "summary_by_framework": _summary(rows, "framework"), "microbenchmarks": sweeps,
            "collectives": allreduce_sweeps()}


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
