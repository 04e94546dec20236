"""Second-by-second power of a hierarchy of budgets (racks in rows in a cluster) under POLCA's
threshold policy, applied at every level at once.

Every node (each rack, each row, the cluster) has a power cap, two thresholds T1 < T2 (fractions
of its cap) and a power brake. Each node runs POLCA's Algorithm 1 on its own power reading:
above T1 it asks for capping level 1 (low-priority servers to T1's clock), above T2 for level 2
(low priority deeper, high priority lightly), below a threshold minus the hysteresis it relaxes;
a request lands ``delay`` steps later (out-of-band actuation). A server runs at the deepest level
any node above it asks for. When a node's power exceeds its cap the brake halts every GPU under
it for ``brake`` steps; the brake is modelled as acting within the step it fires in (the PDU
signals it and the GPUs drop within seconds, inside the UPS ride-through, POLCA Sec. 6), so the
delivered power never stays above a cap that the braked servers can meet.

The simulation is exact per step but jumps between events: with the clocks fixed, every rack's
power over the next chunk of seconds is one numpy expression, and the chunk is scanned for the
first step where any node's policy would act (a threshold crossing, a cap crossing, a due
action, a brake ending). Only those steps run one at a time.

Rack power with ``n_low`` low- and ``n_high`` high-priority inference servers at clocks ``l, h``:
``n_low m_l(t) + n_high m_h(t) + sqrt(n_low s_l(t)^2 + n_high s_h(t)^2) z_r(t) + other_r``
(per-server mean ``m`` and burst std ``s`` from the serving model, independent normal ``z`` per
rack and second, ``other_r`` the constant draw of other workloads in the rack). Braked servers
draw their braked mean, without bursts (the GPUs are all but halted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FULL, T1_LOW, T2_LOW, T2_HIGH, BRAKE = range(5)     # rows of the per-clock series
LOW_CLOCK = np.array([FULL, T1_LOW, T2_LOW])        # capping level -> low-priority clock
HIGH_CLOCK = np.array([FULL, FULL, T2_HIGH])        # capping level -> high-priority clock


@dataclass(frozen=True)
class Tree:
    """Racks (``R``), rows and one cluster; nodes are numbered racks, then rows, then the cluster."""

    row_of: np.ndarray          # (R,) row of each rack
    n_low: np.ndarray           # (R,) low-priority inference servers
    n_high: np.ndarray          # (R,) high-priority inference servers
    other_w: np.ndarray         # (R,) constant power of other workloads (training) in the rack
    other_brake_w: np.ndarray   # (R,) their power while braked
    cap_w: np.ndarray           # (N,) budgets; inf = no budget at that node
    t1: np.ndarray              # (N,) thresholds, fractions of the cap
    t2: np.ndarray
    hysteresis: float

    @property
    def racks(self) -> int:
        return self.row_of.size

    @property
    def rows(self) -> int:
        return int(self.row_of.max()) + 1

    def membership(self) -> np.ndarray:
        """(R, N) 1 where rack r is under node n (itself, its row, the cluster)."""
        R, W = self.racks, self.rows
        A = np.zeros((R, R + W + 1))
        A[np.arange(R), np.arange(R)] = 1
        A[np.arange(R), R + self.row_of] = 1
        A[:, -1] = 1
        return A

    def level_of_node(self) -> np.ndarray:
        """(N,) 0 rack, 1 row, 2 cluster."""
        return np.repeat([0, 1, 2], [self.racks, self.rows, 1])


@dataclass(frozen=True)
class Outcome:
    rack_w: np.ndarray          # (T, R) delivered rack power
    level: np.ndarray           # (T, R) capping level the rack's servers run at (0-2)
    braked: np.ndarray          # (T, R) bool
    brakes: np.ndarray          # (N,) brake events per node
    escalations: np.ndarray     # (N,) capping actions that deepened a node's level


def _want(p, target, t1, t2, h):
    """POLCA Algorithm 1 on a power reading ``p`` (W) given the node's current target level."""
    want = np.where(p > t2, 2, np.where(p > t1, np.maximum(target, 1), target))
    want = np.where((want == 2) & (p < t2 - h), 1, want)
    return np.where((want >= 1) & (p < t1 - h), 0, want)


def _trajectory(p, target0, t1, t2, h):
    """Targets after each step of a (w, N) reading series, vectorized over steps.

    With ``t1 < t2 - h`` Algorithm 1 sorts a reading into five zones: above T2 -> 2; between T1
    and T2 - h -> 1; below T1 - h -> 0 (decisive); in [T2 - h, T2] -> max(previous, 1) and in
    [T1 - h, T1] -> min(previous, 1) (holding). So the target is the last decisive value ``v``
    (``target0`` before any), turned to 1 by a later holding step of the other side."""
    w = p.shape[0]
    dec = np.where(p > t2, 2, np.where((p > t1) & (p < t2 - h), 1, np.where(p < t1 - h, 0, -1)))
    steps = np.arange(w)[:, None]
    last = np.maximum.accumulate(np.where(dec >= 0, steps, -1), axis=0)
    at, cols, seen = np.maximum(last, 0), np.arange(p.shape[1]), last >= 0
    v = np.where(seen, dec[at, cols], target0)
    c3 = np.cumsum((p >= t2 - h) & (p <= t2), axis=0)
    c1 = np.cumsum((p >= t1 - h) & (p <= t1), axis=0)

    def since(c):
        return c - np.where(seen, c[at, cols], 0) > 0

    return np.where(v == 1, 1, np.where(v == 0, np.where(since(c3), 1, 0), np.where(since(c1), 1, 2)))


def _thresholds(tree: Tree) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(N,) which nodes have a budget (and so a policy and a brake), and T1, T2, hysteresis in W."""
    policy = np.isfinite(tree.cap_w)
    cap = np.where(policy, tree.cap_w, 0.0)
    return policy, cap * tree.t1, cap * tree.t2, cap * tree.hysteresis


class _Sim:
    def __init__(self, tree: Tree, mean, std, braked_mean, z, delay: int, brake: int, ceiling=None):
        self.t, self.mean, self.std, self.bmean, self.z = tree, mean, std, braked_mean, z
        self.ceiling = np.full(5, np.inf) if ceiling is None else np.asarray(ceiling, float)
        self.delay, self.brake_len = delay, brake
        self.up = tree.racks + tree.row_of                  # (R,) each rack's row node
        R, W = tree.racks, tree.rows
        self.even_rows = R % W == 0 and np.array_equal(tree.row_of, np.repeat(np.arange(W), R // W))
        N = R + W + 1
        self.policy, self.t1w, self.t2w, self.hw = _thresholds(tree)
        self.target = np.zeros(N, int)
        self.applied = np.zeros(N, int)
        self.due = np.full(N, -1)
        self.brake_until = np.zeros(N, int)
        self.brakes = np.zeros(N, int)
        self.escalations = np.zeros(N, int)

    def config(self, i: int):
        """Per rack: capping level and braked flag at step ``i``; per node: frozen (it or a node
        above it brakes: its reading is the brake's, not the load's)."""
        braking = self.brake_until > i
        R, W = self.t.racks, self.t.rows
        rack_braked = braking[:R] | braking[self.up] | braking[-1]
        level = np.maximum(np.maximum(self.applied[:R], self.applied[self.up]), self.applied[-1])
        frozen = braking.copy()
        frozen[:R] = rack_braked
        frozen[R:R + W] |= braking[-1]
        return level, rack_braked, frozen

    def rack_power(self, a: int, b: int, level, braked, racks=slice(None)) -> np.ndarray:
        """(b - a, R) rack power with the clocks fixed over steps [a, b); with ``racks`` (an index
        array; ``level`` and ``braked`` then per listed rack) only those racks' columns."""
        tr = self.t
        lc, hc = LOW_CLOCK[level], HIGH_CLOCK[level]
        m_l, m_h = self.mean[lc, a:b].T, self.mean[hc, a:b].T        # (w, R)
        s_l, s_h = self.std[lc, a:b].T, self.std[hc, a:b].T
        nl, nh = tr.n_low[racks], tr.n_high[racks]
        run = nl * m_l + nh * m_h + np.sqrt(nl * s_l**2 + nh * s_h**2) * self.z[a:b, racks]
        run = np.minimum(run, nl * self.ceiling[lc] + nh * self.ceiling[hc]) + tr.other_w[racks]
        if not braked.any():
            return run
        halt = (nl + nh) * self.bmean[a:b, None] + tr.other_brake_w[racks]
        return np.where(braked, halt, run)

    def node_power(self, rack_w) -> np.ndarray:
        """(w, N) power of every node from (w, R) rack power: a rack its own, a row and the cluster
        their racks added one by one in rack order (cumsum: a fixed order that the compiled kernel
        repeats; BLAS's order changes with the shape of the product)."""
        tr, w = self.t, rack_w.shape[0]
        R, W = tr.racks, tr.rows
        out = np.empty((w, R + W + 1))
        out[:, :R] = rack_w
        if self.even_rows:                  # rows of R / W racks in rack order: one cumsum
            out[:, R:R + W] = np.cumsum(rack_w.reshape(w, W, R // W), axis=2)[:, :, -1]
        else:
            for k in range(W):
                out[:, R + k] = np.cumsum(rack_w[:, tr.row_of == k], axis=1)[:, -1]
        out[:, -1] = np.cumsum(rack_w, axis=1)[:, -1]
        return out

    def scan(self, node_w, a: int, frozen):
        """The controllers over a chunk with the clocks fixed: (first step, relative to ``a``,
        where a brake fires or an action lands, or None; targets and dues just before it)."""
        w = node_w.shape[0]
        live = self.policy & ~frozen
        traj = np.where(live, _trajectory(node_w, self.target, self.t1w, self.t2w, self.hw), self.target)
        prev = np.vstack([self.target[None, :], traj[:-1]])
        changed = traj != prev                                   # (w, N): an action scheduled here
        steps = np.arange(w)[:, None]
        nxt = np.minimum.accumulate(np.where(changed, steps, w)[::-1], axis=0)[::-1]   # next change >= j
        after = np.vstack([nxt[1:], np.full((1, nxt.shape[1]), w)])                    # next change > j
        fire = changed & (after > steps + self.delay) & (steps + self.delay < w)
        fire_at = np.where(fire.any(axis=0), np.argmax(fire, axis=0) + self.delay, w)
        pend = (self.due >= a) & (self.due - a < w)
        pend_ok = pend & (nxt[0] > self.due - a)            # no new action before the pending one lands
        fire_at = np.minimum(fire_at, np.where(pend_ok, self.due - a, w))
        over = (node_w > self.t.cap_w) & live
        brake_at = np.where(over.any(axis=0), np.argmax(over, axis=0), w)
        k = int(min(fire_at.min(), brake_at.min()))
        cut = k if k < w else w                                   # state just before step ``cut``
        target = traj[cut - 1] if cut > 0 else self.target.copy()
        if cut == 0:
            return k, target, self.due.copy()
        last = np.where(changed[:cut].any(axis=0), cut - 1 - np.argmax(changed[:cut][::-1], axis=0), -1)
        due = np.where(last >= 0, a + last + self.delay, self.due)
        return (k if k < w else None), target, due

    def process(self, i: int, rack_w_row, level, braked, frozen):
        """Run step ``i``'s brake and controller; return the step's delivered rack power."""
        node_w = self.node_power(rack_w_row[None, :])[0]
        trig = self.policy & ~frozen & (node_w > self.t.cap_w)
        if trig.any():
            self.brake_until[trig] = i + self.brake_len
            self.brakes[trig] += 1
            level, braked, frozen = self.config(i)
            rack_w_row = self.rack_power(i, i + 1, level, braked)[0]
            node_w = self.node_power(rack_w_row[None, :])[0]
        live = self.policy & ~frozen
        want = _want(node_w, self.target, self.t1w, self.t2w, self.hw)
        change = live & (want != self.target)
        self.target[change] = want[change]
        self.due[change] = i + self.delay
        fire = self.due == i
        self.escalations[fire & (self.target > self.applied)] += 1
        self.applied[fire] = self.target[fire]
        self.due[fire] = -1
        return rack_w_row, level, braked


def simulate(tree: Tree, mean: np.ndarray, std: np.ndarray, braked_mean: np.ndarray, z: np.ndarray,
             delay_steps: int, brake_steps: int, ceiling: np.ndarray | None = None,
             simulator: str = "python") -> Outcome:
    """Step the policy over ``T`` steps. ``mean``/``std``: (5, T) per-server power at each clock
    (rows FULL, T1_LOW, T2_LOW, T2_HIGH, BRAKE), ``braked_mean`` (T,), ``z``: (T, R) normals,
    ``ceiling`` (5,): the most one server can draw at each clock (bursts are clipped there).
    ``simulator``: as ``Engine.simulator``; numba runs the compiled per-step kernel
    (``designs.power_kernel``), python the event-jumping numpy path below; the same numbers."""
    from planner.designs import power_kernel

    run = power_kernel.kernel(simulator)
    if run is not None:
        return _simulate_kernel(run, tree, mean, std, braked_mean, z, delay_steps, max(1, brake_steps), ceiling)
    T, R = z.shape
    s = _Sim(tree, mean, std, braked_mean, z, delay_steps, max(1, brake_steps), ceiling)
    rack_w = np.empty((T, R))
    lv_hist = np.zeros((T, R), np.int8)
    br_hist = np.zeros((T, R), bool)
    a, chunk = 0, 32
    while a < T:
        level, braked, frozen = s.config(a)
        ending = s.brake_until[s.brake_until > a]              # a brake ending changes the clocks there
        b = int(min(T, a + chunk, ending.min() if ending.size else T))
        w = s.rack_power(a, b, level, braked)
        k, s.target, s.due = s.scan(s.node_power(w), a, frozen)
        if k is None:
            rack_w[a:b], lv_hist[a:b], br_hist[a:b] = w, level, braked
            chunk = min(chunk * 2, 16384)
            a = b
            continue
        stop = a + k
        rack_w[a:stop], lv_hist[a:stop], br_hist[a:stop] = w[:k], level, braked
        row, level, braked = s.process(stop, w[k], level, braked, frozen)
        rack_w[stop], lv_hist[stop], br_hist[stop] = row, level, braked
        chunk = 32
        a = stop + 1
    return Outcome(rack_w, lv_hist, br_hist, s.brakes, s.escalations)


def _simulate_kernel(run, tree: Tree, mean, std, braked_mean, z, delay: int, brake: int, ceiling) -> Outcome:
    """``simulate`` by the per-step kernel ``run`` (``power_kernel.controllers``, compiled or not)."""
    T, R = z.shape
    N = tree.cap_w.size
    policy, t1w, t2w, hw = _thresholds(tree)
    rack_w, lv, br = np.empty((T, R)), np.zeros((T, R), np.int8), np.zeros((T, R), bool)
    brakes, escalations = np.zeros(N, np.int64), np.zeros(N, np.int64)
    f64, i64 = np.float64, np.int64
    ceil = np.full(5, np.inf) if ceiling is None else np.asarray(ceiling, f64)
    arrays = [np.ascontiguousarray(x, dt) for x, dt in (
        (tree.row_of, i64), (tree.n_low, i64), (tree.n_high, i64), (tree.other_w, f64), (tree.other_brake_w, f64),
        (tree.cap_w, f64), (policy, bool), (t1w, f64), (t2w, f64), (hw, f64), (mean, f64), (std, f64),
        (braked_mean, f64), (z, f64), (ceil, f64), (LOW_CLOCK, i64), (HIGH_CLOCK, i64))]
    run(*arrays, int(delay), int(brake), rack_w, lv, br, brakes, escalations)
    return Outcome(rack_w, lv, br, brakes, escalations)


def uncapped_row_power(tree: Tree, mean: np.ndarray, std: np.ndarray, z: np.ndarray,
                       ceiling: np.ndarray | None = None, row: int = 0, block: int = 8192) -> np.ndarray:
    """(T,) power of row ``row`` with no policy and no brake: every server at full clock, the row's
    racks summed in index order. Only that row's racks are computed, ``block`` steps at a time, so
    the memory is (block, racks in the row) whatever the cluster's size."""
    s = _Sim(tree, mean, std, mean[BRAKE], z, 0, 1, ceiling)
    racks = np.flatnonzero(tree.row_of == row)
    T = z.shape[0]
    out = np.empty(T)
    level, braked = np.zeros(racks.size, int), np.zeros(racks.size, bool)
    for a in range(0, T, block):
        b = min(T, a + block)
        out[a:b] = np.cumsum(s.rack_power(a, b, level, braked, racks), axis=1)[:, -1]
    return out
