"""The purchase mix over a demand curve: reserved commitments, on-demand and spot, as a MILP.

Given the instances needed in each period ``n_t`` (periods of ``w_t`` hours), choose reserved
counts ``R_k`` (one per commitment option and start time, active for its term from its start) and, per
period, reserved instances in use ``u_t``, on-demand ``o_t`` and spot ``s_t`` (integers), and
optionally batch work ``b_t`` (instance-equivalents, continuous) run in the period:

    minimize   sum_k p_k R_k H_k  +  sum_t w_t [ (p_o + e_t^o) o_t + (p_s' + e_t^s) s_t + e_t^r u_t ]
    subject to u_t <= sum_{k active at t} R_k
               u_t + o_t + a s_t >= n_t + b_t                  (capacity: a = spot availability)
               a s_t <= m (n_t + b_t)                          (spot share cap m)
               sum_{t in window j} w_t b_t >= W_j              (batch work of each window)
               R_k >= c_k z_k,  R_k <= N z_k,  z_k binary      (minimum commitment c_k)

Reserved instances of all options are interchangeable within a period (``u_t`` is one pool), so
if any reserved option pays its own power, every reserved instance in use is charged energy.
``H_k`` is the hours of the horizon the commitment covers (the part of its term beyond the
horizon is reported, not optimized). Spot's price is raised for preemptions: each one wastes a
restart (scale-up delay) of paid time, ``p_s' = p_s (1 + preemptions_per_h x restart_h)``.
``e_t`` is the energy of a running instance in period ``t`` for options that pay their own power
(owned or colocated hardware; cloud prices include it): devices x power at the period's
utilisation x PUE x the period's $/kWh.

With batch work, per-period instance-hours are continuous: on-demand and spot VMs are billed by
the second (AWS, GCP), so batch may rent an instance for part of a period, and the reserved
instances in use follow. The SLO traffic's need ``n_t`` stays whole; reserved counts stay integer.

Periods with the same need, energy prices and active commitments have the same sub-problem, so
without batch work they are merged (weights summed): a year of hourly periods becomes a few
hundred classes, which keeps the MILP small.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.errors import InfeasibleError


@dataclass(frozen=True)
class Reserved:
    name: str
    usd_per_instance_h: float
    term_h: float
    min_instances: int = 0
    pays_energy: bool = False
    start_h: float = 0.0             # when the commitment starts (staggered purchases under growth)


@dataclass(frozen=True)
class Spot:
    usd_per_instance_h: float
    availability: float = 1.0        # fraction of requested spot capacity running on average
    preemptions_per_h: float = 0.0   # per instance
    restart_h: float = 0.0           # paid time lost per preemption (provisioning + weight load)
    max_share: float = 1.0           # of each period's load
    pays_energy: bool = False

    @property
    def effective_usd_per_instance_h(self) -> float:
        return self.usd_per_instance_h * (1 + self.preemptions_per_h * self.restart_h)


@dataclass(frozen=True)
class PurchaseProblem:
    need: np.ndarray                 # (P,) instances needed for the SLO traffic
    hours: np.ndarray                # (P,) hours per period
    start_h: np.ndarray              # (P,) start of each period
    on_demand_usd_per_instance_h: float
    reserved: list[Reserved] = field(default_factory=list)
    spot: Spot | None = None
    energy_usd_per_instance_h: np.ndarray | None = None    # (P,) for options that pay energy
    on_demand_pays_energy: bool = False
    batch_window: np.ndarray | None = None   # (P,) window index of each period
    batch_instance_h: np.ndarray | None = None   # (windows,) batch work to finish in each window
    max_instances: int = 100_000


@dataclass(frozen=True)
class PurchasePlan:
    reserved: dict[str, int]
    used_reserved: np.ndarray        # (P,)
    on_demand: np.ndarray
    spot: np.ndarray
    batch: np.ndarray                # (P,) instance-equivalents of batch work run
    cost_reserved: np.ndarray        # (P,) $ in each period
    cost_on_demand: np.ndarray
    cost_spot: np.ndarray
    cost_energy: np.ndarray
    committed_beyond_horizon_usd: float

    @property
    def total_usd(self) -> float:
        return float(sum(x.sum() for x in (self.cost_reserved, self.cost_on_demand, self.cost_spot,
                                            self.cost_energy)))


class _Rows:
    """Sparse constraint rows ``lo <= a x <= hi`` built one dict ``{column: coefficient}`` at a time."""

    def __init__(self, columns: int):
        self.columns, self.r, self.c, self.v, self.lo, self.hi = columns, [], [], [], [], []

    def add(self, coef: dict[int, float], lo: float, hi: float) -> None:
        row = len(self.lo)
        for col, val in coef.items():
            self.r.append(row)
            self.c.append(col)
            self.v.append(val)
        self.lo.append(lo)
        self.hi.append(hi)

    def constraint(self):
        from scipy.optimize import LinearConstraint
        from scipy.sparse import csr_array

        a = csr_array((self.v, (self.r, self.c)), shape=(len(self.lo), self.columns))
        return LinearConstraint(a, np.array(self.lo), np.array(self.hi))


def _classes(p: PurchaseProblem, active: np.ndarray, energy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(representative period of each class, class index of each period)."""
    if p.batch_window is not None:
        idx = np.arange(len(p.need))
        return idx, idx
    key = np.column_stack([p.need, energy, active.T])
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def solve_purchase(p: PurchaseProblem) -> PurchasePlan:
    """Cheapest purchase mix (see the module docstring); ``InfeasibleError`` if none exists."""
    from scipy.optimize import Bounds

    from planner.designs.milp import milp

    P, K = len(p.need), len(p.reserved)
    horizon_end = float(p.start_h[-1] + p.hours[-1]) if P else 0.0
    energy = p.energy_usd_per_instance_h if p.energy_usd_per_instance_h is not None else np.zeros(P)
    active = np.array([(p.start_h >= r.start_h) & (p.start_h < r.start_h + r.term_h)
                       for r in p.reserved]).reshape(K, P)
    rep, cls = _classes(p, active, energy)
    C = len(rep)
    w = np.bincount(cls, weights=p.hours, minlength=C)          # hours per class
    n = p.need[rep].astype(float)
    e = energy[rep]
    spot = p.spot
    S = 1 if spot is not None else 0
    B = 1 if p.batch_window is not None else 0
    # variable layout: R (K) | z (K) | u (C) | o (C) | s (C*S) | b (C*B)
    iR, iz, iu, io = 0, K, 2 * K, 2 * K + C
    i_s, ib = io + C, io + C + C * S
    nv = ib + C * B
    cost = np.zeros(nv)
    covered_h = np.array([float((p.hours * active[k]).sum()) for k in range(K)])
    cost[iR:iR + K] = [r.usd_per_instance_h * h for r, h in zip(p.reserved, covered_h, strict=True)]
    res_energy = any(r.pays_energy for r in p.reserved)
    cost[iu:iu + C] = w * (e if res_energy else 0.0)
    cost[io:io + C] = w * (p.on_demand_usd_per_instance_h + (e if p.on_demand_pays_energy else 0.0))
    if spot is not None:
        cost[i_s:i_s + C] = w * (spot.effective_usd_per_instance_h + (e if spot.pays_energy else 0.0))
    A = _Rows(nv)
    big = float(p.max_instances)
    act = active.astype(float)
    for c in range(C):
        A.add({iu + c: 1.0, **{iR + k: -act[k, rep[c]] for k in range(K)}}, -np.inf, 0.0)   # u <= sum R
        cap = {iu + c: 1.0, io + c: 1.0}                                                      # u + o + a s - b >= n
        if spot is not None:
            cap[i_s + c] = spot.availability
        if B:
            cap[ib + c] = -1.0
        A.add(cap, n[c], np.inf)
        if spot is not None and spot.max_share < 1:                                           # a s - m b <= m n
            A.add({i_s + c: spot.availability, **({ib + c: -spot.max_share} if B else {})}, -np.inf,
                  spot.max_share * n[c])
    for k, res in enumerate(p.reserved):                   # minimum commitment, through z_k
        A.add({iR + k: 1.0, iz + k: -float(res.min_instances)}, 0.0, np.inf)
        A.add({iR + k: 1.0, iz + k: -big}, -np.inf, 0.0)
    if B:
        assert p.batch_instance_h is not None and p.batch_window is not None
        for j, work in enumerate(p.batch_instance_h):
            sel = np.flatnonzero(p.batch_window == j)
            A.add({ib + int(t): float(p.hours[t]) for t in sel}, float(work), np.inf)
    upper = np.full(nv, big)
    upper[iz:iz + K] = 1
    integrality = np.ones(nv)
    integrality[ib:] = 0
    if B:    # per-second billing: batch may rent part of an instance-hour (see the module docstring)
        integrality[iu:] = 0
    res = milp(cost, integrality=integrality, bounds=Bounds(np.zeros(nv), upper),
               constraints=[A.constraint()])
    if not res.success:
        raise InfeasibleError(f"no purchase mix covers the demand within max_instances={p.max_instances} "
                              f"({res.message}); raise it or lower the demand")
    x = res.x
    R = np.round(x[iR:iR + K]).astype(int)
    u = np.round(x[iu:iu + C]).astype(int)[cls]
    o = np.round(x[io:io + C]).astype(int)[cls]
    s = np.round(x[i_s:i_s + C]).astype(int)[cls] if spot is not None else np.zeros(P, int)
    b = np.maximum(x[ib:ib + C], 0.0)[cls] if B else np.zeros(P)
    cost_res = sum(res_k.usd_per_instance_h * R[k] * p.hours * active[k] for k, res_k in enumerate(p.reserved))
    cost_res = np.asarray(cost_res, dtype=float) if K else np.zeros(P)
    running_energy = (u * res_energy + o * p.on_demand_pays_energy + s * bool(spot and spot.pays_energy))
    beyond = sum(r.usd_per_instance_h * R[k] * max(r.start_h + r.term_h - horizon_end, 0.0)
                 for k, r in enumerate(p.reserved))
    return PurchasePlan(
        reserved={r.name: int(R[k]) for k, r in enumerate(p.reserved)}, used_reserved=u, on_demand=o, spot=s,
        batch=b, cost_reserved=cost_res, cost_on_demand=o * p.on_demand_usd_per_instance_h * p.hours,
        cost_spot=s * (spot.effective_usd_per_instance_h if spot else 0.0) * p.hours,
        cost_energy=running_energy * energy * p.hours, committed_beyond_horizon_usd=float(beyond))
