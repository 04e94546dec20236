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
    """Indices of points not dominated when every objective is minimized."""
    pts = np.stack([np.asarray(o, float) for o in objectives], axis=1)
    keep = []
    for i, p in enumerate(pts):
        if not np.all(np.isfinite(p)):
            continue
        dominated = np.all(pts <= p, axis=1) & np.any(pts < p, axis=1)
        if not dominated.any():
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)
