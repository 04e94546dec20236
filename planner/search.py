"""Candidate enumeration and selection shared by the designs.

Candidates are parallel layouts (tp, ep, pp) evaluated as numpy arrays in one pass per hardware
and dtype; constraints are boolean masks; selection picks the best by an objective, and
``pareto_front`` the non-dominated set.
"""

from __future__ import annotations

import itertools

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.perf.parallel import Layout, layout_problems


def layouts(model: ModelSpec, hw: HardwareProfile, tp: list[int], ep: list[int], pp: list[int]) -> Layout:
    """Valid layouts from the given degrees: TP/EP groups stay inside the scale-up domain (their
    collectives run every layer); pipeline stages may span nodes. EP only for MoE models."""
    eps = ep if model.moe is not None else [1]
    combos = np.array(list(itertools.product(tp, eps, pp)), dtype=np.int64).reshape(-1, 3)
    lay = Layout.of(combos[:, 0], combos[:, 1], combos[:, 2])
    ok = (layout_problems(model, lay) == "") & (lay.stage_devices <= hw.domain_size)
    return Layout.of(combos[ok, 0], combos[ok, 1], combos[ok, 2])


def pareto_front(*objectives: np.ndarray) -> np.ndarray:
    """Indices of the points no other point dominates, every objective minimized (non-finite
    points excluded). Two objectives: sort and sweep, O(n log n); more: vectorized dominance
    tests in blocks."""
    pts = np.stack([np.asarray(o, float) for o in objectives], axis=1)
    idx = np.flatnonzero(np.all(np.isfinite(pts), axis=1))
    pts = pts[idx]
    if len(pts) == 0:
        return idx
    if pts.shape[1] == 2:
        order = np.lexsort((pts[:, 1], pts[:, 0]))       # by first objective, ties by the second
        second = pts[order, 1]
        best_before = np.minimum.accumulate(np.concatenate([[np.inf], second[:-1]]))
        keep = second < best_before
        # equal points: keep one of each duplicate run
        return np.sort(idx[order[keep]])
    keep = np.ones(len(pts), dtype=bool)
    for start in range(0, len(pts), 256):
        block = pts[start:start + 256]
        le = np.all(pts[None, :, :] <= block[:, None, :], axis=2)
        lt = np.any(pts[None, :, :] < block[:, None, :], axis=2)
        keep[start:start + 256] = ~np.any(le & lt, axis=1)
    return idx[keep]


def candidates(model: ModelSpec, hardware: list[str], tp: list[int], ep: list[int], pp: list[int],
               weight_dtypes: list, kv_dtype=None, framework: str | None = None):
    """Yield ``(profile, layouts, dtypes)`` per hardware and weight dtype: the candidate blocks every
    design evaluates as arrays (hardware without a valid layout is skipped), each profile as the
    serving framework sees it (``frameworks.DEFAULT_FRAMEWORK`` if none is named)."""
    from planner.catalog.dtypes import DType
    from planner.catalog.frameworks import with_framework
    from planner.catalog.hardware import hardware as get_hardware
    from planner.perf.ops import DTypes

    for name in hardware:
        hw = with_framework(get_hardware(name), framework)
        lay = layouts(model, hw, tp, ep, pp)
        if lay.tp.size == 0:
            continue
        for w in weight_dtypes:
            yield hw, lay, DTypes(weight=DType(w), kv=DType(kv_dtype) if kv_dtype else DType.bf16)
