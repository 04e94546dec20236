"""Calibration: hardware factors against microbenchmarks, framework entries against their
calibration points.

``gemm_sweeps()`` replays every GEMM shape sweep in ``validation/microbenchmarks/`` through the
roofline (``op_time``) with the device's profile, so the profile's ``gemm`` plateau and
``kernel_latency`` can be checked against the measurements they were fitted on. A sweep file may
state a per-call floor of its harness (``# harness_floor_us: X`` with the evidence beside it):
shapes timed within 10% of it measure the harness, not the kernel, and are listed, not scored.

``python -m planner.calibrate vllm-2023`` grid-searches the framework's per-step overhead and its
GEMM / memory / scale-up link scales, ring-hop latency and per-sequence host time (``--sequence``)
(every combination, or ``--descent``: coordinate descent over the same grids), scoring each
setting by the mean absolute relative error over the validation points with
``role: calibration`` and ``framework: <name>``; held-out points are never read. It prints the
best settings, to be copied into ``catalog/frameworks.yaml`` with the points named in the note.
The grids are coarse on purpose: a framework entry describes an engine generation, not a fit to
the last digit.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import Framework, framework
from planner.catalog.hardware import Figure, Seconds, hardware, microbenchmarks_dir, sweep_columns
from planner.validate import Point, load_points, predict

OVERHEAD_MS = (2, 5, 10, 15, 20, 25, 30)
FINE_OVERHEAD_MS = (0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3)   # --step-only: C++ runtimes
SCALES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LINK_SCALES = (0.25, 0.5, 1.0)
RING_HOP_US = (2.5, 5, 7.5, 10, 15)
SEQUENCE_US = (0, 100, 200, 300, 400, 500)


def _harness_floor_s(path: Path) -> float:
    """The ``# harness_floor_us: X`` a sweep file states (0 if none)."""
    for line in path.read_text().splitlines():
        if line.startswith("# harness_floor_us:"):
            return float(line.split(":", 1)[1].split()[0]) * 1e-6
    return 0.0


def gemm_sweep(path: Path) -> dict:
    """Predicted vs measured throughput of the GEMM shapes in ``path`` (``<profile>-gemm-<dtype>.csv``
    with columns m, n, k, tflops), each shape timed by ``op_time`` as one kernel. Shapes whose
    measured time is within 10% of the file's stated harness floor are not scored."""
    from planner.perf.ops import DTypes, Op, OpKind
    from planner.perf.roofline import op_time

    profile, _, dtype = path.stem.partition("-gemm-")
    hw, dt = hardware(profile), DType(dtype)
    m, n, k, measured = sweep_columns(path)
    flops = 2.0 * m * n * k
    op = Op("gemm", OpKind.gemm, 1, flops=flops, weight_bytes=k * n * dt.bytes, act_bytes=m * (k + n) * dt.bytes)
    predicted = flops / op_time(hw, op, DTypes(weight=dt, kv=dt, act=dt)).time_s / 1e12
    scored = flops / (measured * 1e12) > 1.1 * _harness_floor_s(path)
    err = np.abs(predicted / measured - 1.0)[scored]
    return {"hardware": profile, "dtype": dtype, "shapes": int(scored.sum()), "floor_bound": int((~scored).sum()),
            "median_abs_rel_error": float(np.median(err)), "p90_abs_rel_error": float(np.quantile(err, 0.9)),
            "predicted_tflops": predicted, "measured_tflops": measured}


def gemm_sweeps() -> list[dict]:
    return [gemm_sweep(p) for p in sorted(microbenchmarks_dir().glob("*-gemm-*.csv"))]


def allreduce_sweep(path: Path) -> dict:
    """An all-reduce bus-bandwidth sweep (``<profile>-allreduce<n>-nccl.csv``: size_bytes,
    busbw_gbs) against the alpha-beta form of ``comm.py``: the best-fitting (busbw, latency) pair
    (least squares on log time) and how well that form describes the curve, plus the profile's own
    large-message bus bandwidth against the measured plateau. The profile's latency is that of an
    engine's one-shot all-reduce kernel, not NCCL's, so it is not compared with the fitted one."""
    from scipy.optimize import least_squares

    profile, _, rest = path.stem.partition("-allreduce")
    n = int(rest.split("-")[0])
    hw = hardware(profile)
    size, busbw = sweep_columns(path)
    factor = 2.0 * (n - 1) / n
    t = factor * size / (busbw * 1e9)

    def model(p):
        return factor * size / (p[0] * 1e9) + p[1] * 1e-6

    fit = least_squares(lambda p: np.log(model(p) / t), [busbw.max(), 20.0], bounds=([1, 0], [1e4, 1e4]))
    err = np.abs(model(fit.x) / t - 1.0)
    profile_busbw = hw.scale_up.bandwidth_per_direction.value * hw.efficiency.scale_up.value / 1e9
    return {"hardware": profile, "devices": n, "sizes": int(size.size),
            "fitted_busbw_gbs": float(fit.x[0]), "fitted_latency_us": float(fit.x[1]),
            "median_abs_rel_error": float(np.median(err)), "p90_abs_rel_error": float(np.quantile(err, 0.9)),
            "measured_plateau_gbs": float(busbw.max()), "profile_busbw_gbs": profile_busbw}


def allreduce_sweeps() -> list[dict]:
    return [allreduce_sweep(p) for p in sorted(microbenchmarks_dir().glob("*-allreduce*-nccl.csv"))]


def attention_sweep(path: Path | None = None) -> dict:
    """Fit Hockney's form ``r(L) = r_inf L / (L + L_half)`` to a FlashAttention sequence-length
    sweep (``*-attention-*.csv``: seq_len, tflops): the plateau fraction of the profile's peak and
    the half length that ``Efficiency.attention`` holds. Log-error least squares on a grid of L_half
    (the best r_inf for each is the geometric mean of r / x)."""
    path = path or next(microbenchmarks_dir().glob("h100-sxm-attention-fa3-bf16.csv"))
    length, tflops = sweep_columns(path)
    rate = tflops * 1e12
    hw = hardware(path.name.split("-attention-")[0])
    best = None
    for half in np.arange(1.0, 2048.0, 1.0):
        x = length / (length + half)
        r_inf = float(np.exp(np.mean(np.log(rate / x))))
        err = float(np.mean(np.abs(np.log(r_inf * x / rate))))
        if best is None or err < best[0]:
            best = (err, half, r_inf)
    assert best is not None
    err, half, r_inf = best
    pred = r_inf * length / (length + half)
    return {"hardware": hw.name, "points": int(length.size), "plateau": r_inf / hw.peak_flops_per_s(DType.bf16),
            "half_keys": float(half), "median_abs_rel_error": float(np.median(np.abs(pred / rate - 1)))}


def calibration_points(name: str) -> list[Point]:
    return [p for p in load_points().points if p.framework == name and p.role == "calibration"]


def score(fw: Framework, points: list[Point]) -> float:
    """Mean absolute relative error of framework entry ``fw`` on ``points``."""
    return float(np.mean([abs(predict(p, fw) - p.value) / p.value for p in points]))


def candidate(base: Framework, overhead_s: float, gemm: float | None, memory: float | None = None,
              link: float | None = None, hop_s: float | None = None, sequence_s: float | None = None,
              note: str | None = None) -> Framework:
    """``base`` with a calibrated step overhead and GEMM scale, and memory / link scales, ring-hop
    latency and per-sequence host time where given (the others kept)."""
    def fig(cls, v):
        return cls(value=v, source="calibrated", note=note)

    return base.model_copy(update={
        "step_overhead": fig(Seconds, overhead_s),
        "gemm_scale": fig(Figure, gemm) if gemm is not None else base.gemm_scale,
        "memory_scale": fig(Figure, memory) if memory else base.memory_scale,
        "link_scale": fig(Figure, link) if link else base.link_scale,
        "ring_hop_latency": fig(Seconds, hop_s) if hop_s else base.ring_hop_latency,
        "sequence_overhead": fig(Seconds, sequence_s) if sequence_s is not None else base.sequence_overhead})


def fit(name: str, *, memory: bool = False, link: bool = False, ring: bool = False,
        sequence: bool = False, step_only: bool = False, descent: bool = False) -> tuple[float, Framework]:
    """Best (error, framework) over the grid; memory and link scales, the ring-hop latency and the
    per-sequence host time are searched only if asked. ``step_only``: only the per-step host time,
    on a finer grid below 3 ms (an engine with CUDA graphs and a C++ scheduler, calibrated on
    single-request decode steps, which say nothing about GEMM efficiency). ``descent``: instead of
    every combination, coordinate descent over the same grids (each parameter in turn moved to its
    best grid value with the others held, from the first value of each grid, until no move lowers
    the error): tens of evaluations per parameter instead of the grids' product, for fits of four
    or five parameters on points that each take a simulator replay; it may stop at a local best."""
    base = framework(name)
    points = calibration_points(name)
    if not points:
        raise SystemExit(f"framework {name!r} has no calibration points in validation/measurements.yaml")
    grids = (FINE_OVERHEAD_MS if step_only else OVERHEAD_MS, (None,) if step_only else SCALES,
             SCALES if memory else (None,), LINK_SCALES if link else (None,),
             RING_HOP_US if ring else (None,), SEQUENCE_US if sequence else (None,))
    seen: dict[tuple, tuple[float, Framework]] = {}

    def evaluate(ms, g, m, lk, hop, seq) -> tuple[float, Framework]:
        key = (ms, g, m, lk, hop, seq)
        if key not in seen:
            fw = candidate(base, ms * 1e-3, g, m, lk, hop * 1e-6 if hop else None,
                           seq * 1e-6 if seq is not None else None)
            seen[key] = (score(fw, points), fw)
        return seen[key]

    if not descent:
        return min((evaluate(*combo) for combo in itertools.product(*grids)), key=lambda r: r[0])
    at = [grid[0] for grid in grids]
    while True:
        moved = False
        for axis, grid in enumerate(grids):
            here = evaluate(*at)[0]
            value = min(grid, key=lambda v: evaluate(*(at[:axis] + [v] + at[axis + 1:]))[0])
            if evaluate(*(at[:axis] + [value] + at[axis + 1:]))[0] < here:
                at[axis], moved = value, True
        if not moved:
            return evaluate(*at)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m planner.calibrate FRAMEWORK [--memory] [--link] [--ring] [--sequence] "
                         "[--step-only] [--descent]")
    err, fw = fit(argv[0], memory="--memory" in argv, link="--link" in argv, ring="--ring" in argv,
                  sequence="--sequence" in argv, step_only="--step-only" in argv, descent="--descent" in argv)
    points = calibration_points(argv[0])
    print(f"{argv[0]}: mean abs error {err:.1%} on {len(points)} points ({', '.join(p.id for p in points)})")
    for field in ("step_overhead", "gemm_scale", "memory_scale", "link_scale", "ring_hop_latency",
                  "sequence_overhead"):
        f = getattr(fw, field)
        if f is not None:
            print(f"  {field}: {f.value:g}")


if __name__ == "__main__":
    from planner.errors import InputError

    try:
        main(sys.argv[1:])
    except InputError as e:          # an unknown framework name: say so, no traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
