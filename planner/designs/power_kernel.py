"""POLCA's hierarchy of controllers (``designs.power_sim``) stepped one second at a time over
preallocated arrays, written so that numba can compile it (``pip install "planner[fast]"``) and
plain Python can run it unchanged, as the simulator's loops in ``serving.sim_kernel``.

``power_sim.simulate`` jumps between events with numpy; this kernel visits every step instead,
which costs nothing once compiled. It does, float for float, what the numpy path does: each rack's
power with the same operations in the same order (``_Sim.rack_power``), every row's and the
cluster's racks added in rack order (``_Sim.node_power``), POLCA's Algorithm 1 as ``_want``, the
brake within the step it fires in. The tests compare it with the numpy path, uncompiled and (when
numba imports) compiled.

numba is imported only inside :func:`kernel` (by ``sim_kernel.njit``), never on the ``whatif``/``plan``
import path.
"""

from __future__ import annotations

import math

import numpy as np


def config(i: int, row_of, applied, brake_until, level, braked, frozen) -> None:
    """Step ``i``'s capping level and braked flag per rack and frozen flag per node (``_Sim.config``)."""
    R, N = row_of.shape[0], applied.shape[0]
    W = N - R - 1
    cl = brake_until[N - 1] > i
    for k in range(W):
        frozen[R + k] = brake_until[R + k] > i or cl
    frozen[N - 1] = cl
    for r in range(R):
        up = R + row_of[r]
        braked[r] = brake_until[r] > i or brake_until[up] > i or cl
        frozen[r] = braked[r]
        level[r] = max(applied[r], applied[up], applied[N - 1])


def rack_power(i: int, n_low, n_high, other_w, other_brake_w, mean, std, bmean, z, ceiling, low_clock,
               high_clock, level, braked, out) -> None:
    """Step ``i``'s power of every rack into ``out`` (``_Sim.rack_power``, one step)."""
    for r in range(n_low.shape[0]):
        nl, nh = n_low[r], n_high[r]
        if braked[r]:
            out[r] = (nl + nh) * bmean[i] + other_brake_w[r]
            continue
        lc, hc = low_clock[level[r]], high_clock[level[r]]
        s_l, s_h = std[lc, i], std[hc, i]
        p = nl * mean[lc, i] + nh * mean[hc, i] + math.sqrt(nl * (s_l * s_l) + nh * (s_h * s_h)) * z[i, r]
        most = nl * ceiling[lc] + nh * ceiling[hc]
        if most < p:                        # np.minimum(p, most), a NaN reading kept
            p = most
        out[r] = p + other_w[r]


def node_power(rack_w, row_of, node_w) -> None:
    """Every node's power from the racks': a rack its own, a row and the cluster their racks added
    in rack order (``_Sim.node_power``)."""
    R = row_of.shape[0]
    for n in range(R, node_w.shape[0]):
        node_w[n] = 0.0
    for r in range(R):
        node_w[r] = rack_w[r]
        node_w[R + row_of[r]] += rack_w[r]
        node_w[node_w.shape[0] - 1] += rack_w[r]


def want(p: float, target: int, t1: float, t2: float, h: float) -> int:
    """POLCA Algorithm 1 on one reading (``power_sim._want``)."""
    w = 2 if p > t2 else (max(target, 1) if p > t1 else target)
    if w == 2 and p < t2 - h:
        w = 1
    if w >= 1 and p < t1 - h:
        w = 0
    return w


def controllers(row_of, n_low, n_high, other_w, other_brake_w, cap_w, policy, t1w, t2w, hw, mean, std, bmean, z,
                ceiling, low_clock, high_clock, delay: int, brake_len: int, rack_w, lv, br, brakes,
                escalations) -> None:
    """Run the hierarchy over every step of ``z`` (T, R); fills ``rack_w``/``lv``/``br`` (T, R) and
    ``brakes``/``escalations`` (N,). Arguments as ``power_sim.simulate`` and its ``Tree``; ``t1w``,
    ``t2w``, ``hw``: thresholds and hysteresis in W; ``policy``: the nodes with a budget."""
    T, R = z.shape
    N = cap_w.shape[0]
    target, applied = np.zeros(N, np.int64), np.zeros(N, np.int64)
    due, brake_until = np.full(N, -1, np.int64), np.zeros(N, np.int64)
    frozen, braked = np.zeros(N, np.bool_), np.zeros(R, np.bool_)
    level, node_w = np.zeros(R, np.int64), np.zeros(N)
    for i in range(T):
        row = rack_w[i]
        config(i, row_of, applied, brake_until, level, braked, frozen)
        rack_power(i, n_low, n_high, other_w, other_brake_w, mean, std, bmean, z, ceiling, low_clock, high_clock,
                   level, braked, row)
        node_power(row, row_of, node_w)
        fired = False
        for n in range(N):
            if policy[n] and not frozen[n] and node_w[n] > cap_w[n]:
                brake_until[n] = i + brake_len
                brakes[n] += 1
                fired = True
        if fired:                           # the brake acts within its step
            config(i, row_of, applied, brake_until, level, braked, frozen)
            rack_power(i, n_low, n_high, other_w, other_brake_w, mean, std, bmean, z, ceiling, low_clock,
                       high_clock, level, braked, row)
            node_power(row, row_of, node_w)
        for n in range(N):
            if policy[n] and not frozen[n]:
                w = want(node_w[n], target[n], t1w[n], t2w[n], hw[n])
                if w != target[n]:
                    target[n] = w
                    due[n] = i + delay
            if due[n] == i:
                if target[n] > applied[n]:
                    escalations[n] += 1
                applied[n] = target[n]
                due[n] = -1
        for r in range(R):
            lv[i, r] = level[r]
            br[i, r] = braked[r]


# ---------------------------------------------------------------------------------------------------
# selection and compilation (the convention of serving.sim_kernel: Engine.simulator)

_HELPERS = (config, rack_power, node_power, want)
_compiled: list = []


def kernel(mode: str):
    """The compiled ``controllers`` for ``Engine.simulator`` = ``mode``, or None when the numpy
    path is to run (``sim_kernel.use_numba``: "python", or "auto" without numba)."""
    from planner.serving import sim_kernel

    if not sim_kernel.use_numba(mode):
        return None
    if not _compiled:                       # once per process, cached on disk by numba
        _compiled.append(sim_kernel.njit(controllers, _HELPERS))
    return _compiled[0]
