"""Candidate enumeration and selection shared by the designs.

Candidates are parallel layouts (tp, ep, pp) evaluated as numpy arrays in one pass per hardware
and dtype; constraints are boolean masks; selection picks the best by an objective, and
``pareto_front`` the non-dominated set.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.perf.parallel import Layout, die_layout_problems

BLOCK = 512      # candidates a streaming search evaluates at once: ~100 MB peak for an MoE model

_MMAP_THRESHOLD_BYTES = 32 << 20    # arrays up to this size come from the heap, not fresh mmap'd pages
_TRIM_THRESHOLD_BYTES = 256 << 20   # the heap keeps up to this much freed memory for reuse
_heap_steady = False


def steady_heap() -> None:
    """Let the process reuse the memory a search frees. glibc's malloc serves arrays above a
    threshold (128 KB, then following the largest freed) from fresh mmap'd pages and returns the
    heap's free top to the system past a second one; a streaming search allocates and frees the
    same few hundred-kilobyte arrays for every block, so each block faults its pages in anew
    (30,000 candidates: ~790,000 minor page faults, as much kernel time as work). With both
    thresholds raised (``mallopt``: mmap 32 MB, trim 256 MB) the pages stay mapped; the peak RSS
    is the same, and the process may keep up to 256 MB of freed heap afterwards. glibc only (once
    per process); elsewhere nothing changes."""
    global _heap_steady
    if _heap_steady:
        return
    _heap_steady = True
    import sys

    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, _MMAP_THRESHOLD_BYTES)       # M_MMAP_THRESHOLD
        libc.mallopt(-1, _TRIM_THRESHOLD_BYTES)       # M_TRIM_THRESHOLD
    except (OSError, AttributeError):                 # not glibc: its own allocator's defaults
        pass


def layouts(model: ModelSpec, hw: HardwareProfile, tp: list[int], ep: list[int], pp: list[int]) -> Layout:
    """Valid layouts from the given degrees (``layout_problems_on``)."""
    lay, why = layout_problems_on(model, hw, tp, ep, pp)
    ok = why == ""
    return Layout.of(lay.tp[ok], lay.ep[ok], lay.pp[ok])


def layout_problems_on(model: ModelSpec, hw: HardwareProfile, tp: list[int], ep: list[int],
                       pp: list[int]) -> tuple[Layout, np.ndarray]:
    """Every layout of the given degrees and why each is invalid ('' where it is valid): the
    model must split (on a multi-die package its heads evenly over the dies, too) and TP/EP
    groups stay inside the scale-up domain (their collectives run every layer); pipeline stages
    may span nodes. EP only for MoE models."""
    eps = ep if model.moe is not None else [1]
    # every (tp, ep, pp), tp slowest (itertools.product order), as arrays: no per-combination tuples
    t, e, p = (g.ravel() for g in np.meshgrid(np.asarray(tp, np.int64), np.asarray(eps, np.int64),
                                                np.asarray(pp, np.int64), indexing="ij"))
    lay = Layout.of(t, e, p)
    why = np.broadcast_to(die_layout_problems(model, hw, lay), t.shape).astype(object)
    wide = (why == "") & (lay.stage_devices > hw.domain_size)
    why[wide] = [f"{d} devices per stage exceed {hw.name}'s scale-up domain of {hw.domain_size}"
                 for d in np.ravel(lay.stage_devices)[wide]]
    return lay, why


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
               weight_dtypes: list, kv_dtype=None, framework: str | None = None,
               memory_fraction: float | None = None, kv_pool_tokens: int | None = None):
    """Yield ``(profile, layouts, dtypes)`` per hardware and weight dtype: the candidate blocks every
    design evaluates as arrays (hardware without a valid layout is skipped), each profile as the
    serving framework sees it (if none is named, vLLM for the device's vendor:
    ``frameworks.default_framework``), at the engine's memory setting and KV-pool cap where given
    (``Engine.memory_fraction``, ``Engine.kv_pool_tokens``)."""
    from planner.catalog.dtypes import DType
    from planner.catalog.frameworks import as_run
    from planner.perf.ops import DTypes

    for name in hardware:
        hw = as_run(name, framework, None, memory_fraction, kv_pool_tokens)
        lay = layouts(model, hw, tp, ep, pp)
        if lay.tp.size == 0:
            continue
        for w in weight_dtypes:
            yield hw, lay, DTypes(weight=DType(w), kv=DType(kv_dtype) if kv_dtype else DType.bf16)


def blocks(lay: Layout, size: int) -> Iterator[tuple[np.ndarray, Layout]]:
    """``(candidate indices, sub-layout)`` of at most ``size`` candidates: the unit a streaming
    search evaluates at once, so its memory is O(size), not O(candidates). Every row's times are
    its own whatever else shares the array (an all-to-all charges only the rows that send), so
    the answer does not depend on the block size."""
    step = max(int(size), 1)
    for start in range(0, lay.tp.size, step):
        sel = np.arange(start, min(start + step, lay.tp.size))
        yield sel, Layout(lay.tp[sel], lay.ep[sel], lay.pp[sel])


def map_blocks(task, jobs, workers: int = 1, chunk: int = 8) -> Iterator:
    """``task`` over ``jobs`` (blocks of candidates), results in job order: in this process, or on
    ``workers`` local processes. Tasks travel in chunks of ``chunk`` jobs (a chunk pickles the task
    and its arguments once), at most four chunks per worker in flight (a slow chunk at the head
    does not leave the others idle): the jobs are drawn from ``jobs`` as the workers need them
    and results wait for the caller no longer than that, so the memory of this process stays
    O(chunk x workers), not O(jobs). Workers are forked (Linux) with
    Python's collector frozen (``gc.freeze``): they start with this process's imported modules
    and catalog in copy-on-write pages and the collector, here and there, does not write to (and
    so copy) them. The executor forks its workers before it starts its own thread, and the
    numerical library's threads are fork-safe (OpenBLAS quiesces them, ``pthread_atfork``).
    Measured step-time tables are a context variable of this process, which workers would not
    see: while tables are in use the blocks are evaluated here."""
    from planner.perf.measured import active

    if workers <= 1 or active():
        yield from map(task, jobs)
        return
    import gc
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    fork = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
    chunks, pending = batched(jobs, chunk), deque()
    frozen = gc.get_freeze_count() == 0
    if frozen:
        gc.freeze()
    try:
        with ProcessPoolExecutor(workers, mp_context=fork) as pool:
            while True:
                while len(pending) < 4 * workers and (part := next(chunks, None)):
                    pending.append(pool.submit(_run_chunk, task, part))
                if not pending:
                    return
                yield from pending.popleft().result()
    finally:
        if frozen:
            gc.unfreeze()


def batched(items, n: int) -> Iterator[list]:
    """``items`` in lists of ``n`` (the last one shorter), drawn as they are needed."""
    items = iter(items)
    while part := list(islice(items, n)):
        yield part


def _run_chunk(task, jobs: list) -> list:
    return [task(job) for job in jobs]


class RunningFront:
    """Two-objective Pareto front (both minimized) of a stream of point blocks, with payload rows.

    ``front(A + B) = front(front(A) + B)`` since dominance is transitive. Points are kept in the
    order of their ``seq`` payload column (else in arrival order) and ``pareto_front`` keeps the
    earliest of equal points, so the result is exactly the front of all points at once, whatever
    order the blocks arrive in. Memory: O(front + block)."""

    def __init__(self) -> None:
        self.a = np.empty(0)
        self.b = np.empty(0)
        self.rows: dict[str, np.ndarray] = {}

    def undominated(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Mask of the points no point already held strictly dominates (both no worse, one
        better): only these can reach the front, and dropping the others before ``add`` changes
        nothing (what they dominate or equal, the held point strictly dominates too). The held
        front is sorted by ``a`` with ``b`` falling, so the held point with the largest ``a`` not
        above a point's has the lowest ``b`` among those that could dominate it."""
        a, b = np.asarray(a, float), np.asarray(b, float)
        if self.a.size == 0:
            return np.ones(a.shape, bool)
        order = np.argsort(self.a, kind="stable")
        ha, hb = self.a[order], self.b[order]
        k = np.searchsorted(ha, a, side="right") - 1          # last held point with a_held <= a
        kk = np.maximum(k, 0)
        cover, ca = hb[kk], ha[kk]
        dominated = (k >= 0) & (cover <= b) & ((ca < a) | (cover < b))
        return ~dominated

    def add(self, a: np.ndarray, b: np.ndarray, **rows: np.ndarray) -> None:
        """Offer points ``(a[k], b[k])`` with payload columns ``rows[name][k]``."""
        if np.size(a) == 0:
            return
        keep = pareto_front(a, b)                  # the block's own front first: cheap to merge
        a, b = np.asarray(a, float)[keep], np.asarray(b, float)[keep]
        rows = {k: np.asarray(v)[keep] for k, v in rows.items()}
        if self.a.size:
            a, b = np.concatenate([self.a, a]), np.concatenate([self.b, b])
            rows = {k: np.concatenate([self.rows[k], v]) for k, v in rows.items()}
            order = np.argsort(rows["seq"], kind="stable") if "seq" in rows else np.arange(a.size)
            a, b, rows = a[order], b[order], {k: v[order] for k, v in rows.items()}
            keep = pareto_front(a, b)
            a, b, rows = a[keep], b[keep], {k: v[keep] for k, v in rows.items()}
        self.a, self.b, self.rows = a, b, rows

    def __len__(self) -> int:
        return self.a.size
