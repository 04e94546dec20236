"""Calibration: hardware factors against microbenchmarks, framework entries against their
calibration points.

The hardware side (every microbenchmark sweep replayed through the roofline) is
``planner.microbench``; ``python -m planner.calibrate --attention`` prints the prefill-attention
fit of every bundled FlashAttention sweep (the figures the profiles' ``attention`` block holds).

``python -m planner.calibrate vllm-2023`` grid-searches the framework's per-step overhead and its
GEMM / memory / scale-up link scales, ring-hop latency, per-sequence host time (``--sequence``) and
per-request front-end time in TTFT (``--request``)
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

import numpy as np

from planner.catalog.frameworks import Framework, framework
from planner.catalog.hardware import Figure, Seconds
from planner.validate import Point, load_points, predict

OVERHEAD_MS = (2, 5, 10, 15, 20, 25, 30, 40, 50, 60)
FINE_OVERHEAD_MS = (0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3)   # --step-only: below the coarse grid
SCALES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LINK_SCALES = (0.25, 0.5, 1.0)
RING_HOP_US = (2.5, 5, 7.5, 10, 15)
SEQUENCE_US = (0, 100, 200, 300, 400, 500)
REQUEST_MS = (0, 5, 10, 20, 30, 40, 50, 75, 100)


def calibration_points(name: str) -> list[Point]:
    return [p for p in load_points().points if p.framework == name and p.role == "calibration"]


def score(fw: Framework, points: list[Point]) -> float:
    """Mean absolute relative error of framework entry ``fw`` on ``points``."""
    return float(np.mean([abs(predict(p, fw) - p.value) / p.value for p in points]))


def candidate(base: Framework, overhead_s: float, gemm: float | None, memory: float | None = None,
              link: float | None = None, hop_s: float | None = None, sequence_s: float | None = None,
              note: str | None = None, request_s: float | None = None) -> Framework:
    """``base`` with a calibrated step overhead and GEMM scale, and memory / link scales, ring-hop
    latency, per-sequence host time and per-request front-end time where given (the others kept)."""
    def fig(cls, v):
        return cls(value=v, source="calibrated", note=note)

    return base.model_copy(update={
        "step_overhead": fig(Seconds, overhead_s),
        "gemm_scale": fig(Figure, gemm) if gemm is not None else base.gemm_scale,
        "memory_scale": fig(Figure, memory) if memory else base.memory_scale,
        "link_scale": fig(Figure, link) if link else base.link_scale,
        "ring_hop_latency": fig(Seconds, hop_s) if hop_s else base.ring_hop_latency,
        "sequence_overhead": fig(Seconds, sequence_s) if sequence_s is not None else base.sequence_overhead,
        "request_overhead": fig(Seconds, request_s) if request_s is not None else base.request_overhead})


def fit(name: str, *, memory: bool = False, link: bool = False, ring: bool = False,
        sequence: bool = False, step_only: bool = False, descent: bool = False,
        request: bool = False) -> tuple[float, Framework]:
    """Best (error, framework) over the grid; memory and link scales, the ring-hop latency, the
    per-sequence host time and the per-request front-end time (TTFT only) are searched only if
    asked. ``step_only``: no GEMM scale, the per-step host time on the coarse grid refined below
    3 ms (an engine calibrated on single-request decode steps, which say nothing about GEMM
    efficiency: a C++ runtime with CUDA graphs, or vllm-ascend; with ``sequence`` / ``request``, an
    engine whose kernels are the profile's and whose own cost is host time, as MindIE). ``descent``:
    instead of every combination, coordinate descent over the same grids (each parameter in turn
    moved to its best grid value with the others held, from the first value of each grid, until no
    move lowers the error): tens of evaluations per parameter instead of the grids' product, for
    fits of four or five parameters on points that each take a simulator replay; it may stop at a
    local best."""
    base = framework(name)
    points = calibration_points(name)
    if not points:
        raise SystemExit(f"framework {name!r} has no calibration points in validation/measurements.yaml")
    grids = (sorted({*FINE_OVERHEAD_MS, *OVERHEAD_MS}) if step_only else OVERHEAD_MS, (None,) if step_only else SCALES,
             SCALES if memory else (None,), LINK_SCALES if link else (None,),
             RING_HOP_US if ring else (None,), SEQUENCE_US if sequence else (None,),
             REQUEST_MS if request else (None,))
    seen: dict[tuple, tuple[float, Framework]] = {}

    def evaluate(ms, g, m, lk, hop, seq, req) -> tuple[float, Framework]:
        key = (ms, g, m, lk, hop, seq, req)
        if key not in seen:
            fw = candidate(base, ms * 1e-3, g, m, lk, hop * 1e-6 if hop else None,
                           seq * 1e-6 if seq is not None else None,
                           request_s=req * 1e-3 if req is not None else None)
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
                         "[--request] [--step-only] [--descent]  |  python -m planner.calibrate --attention"
                         "  |  python -m planner.calibrate --moe-chain")
    if argv[0] == "--moe-chain":
        from planner.catalog.hardware import microbenchmarks_dir
        from planner.microbench import moe_chain_fit

        for path in sorted(microbenchmarks_dir().glob("*-moe-mlp-*.csv")):
            f = moe_chain_fit(path)
            bound = "" if f["memory_bound"] else " (some calls compute-bound: the form does not hold)"
            print(f"{f['file']}: {f['format']} expert chain on {f['hardware']}: weights at {f['memory_fraction']:.3f} "
                  f"of HBM + {f['fixed_us']:.1f} us per layer; median error {f['median_abs_rel_error']:.1%} over "
                  f"{f['points']} calls{bound}")
        return
    if argv[0] == "--attention":
        from planner.microbench import attention_sweeps

        for f in attention_sweeps():
            how = "fitted" if f["half_keys_fitted"] else "stated in the file"
            print(f"{f['file']}: plateau {f['plateau']:.3f} of the {f['hardware']} die's BF16 peak, half length "
                  f"{f['half_keys']:.0f} keys ({how}); median error {f['median_abs_rel_error']:.1%} over "
                  f"{f['points']} lengths")
        return
    err, fw = fit(argv[0], memory="--memory" in argv, link="--link" in argv, ring="--ring" in argv,
                  sequence="--sequence" in argv, step_only="--step-only" in argv, descent="--descent" in argv,
                  request="--request" in argv)
    points = calibration_points(argv[0])
    print(f"{argv[0]}: mean abs error {err:.1%} on {len(points)} points ({', '.join(p.id for p in points)})")
    for field in ("step_overhead", "gemm_scale", "memory_scale", "link_scale", "ring_hop_latency",
                  "sequence_overhead", "request_overhead"):
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
