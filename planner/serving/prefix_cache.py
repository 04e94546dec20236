"""Analytic prefix-cache hit rate of a session workload under LRU: Che's approximation.

Che et al. (2002) approximate an LRU cache of capacity ``C`` by a *characteristic time* ``T``: an
item stays cached for ``T`` after its last use and is evicted then, with ``T`` the root of
``occupancy(T) = C``. For sessions the item is a session's KV history (``h`` tokens after a turn)
and the next use is the session's next turn after a gap ``G`` (the time-to-live form of the
approximation, Fofack et al. 2014, which does not need independent references). By Little's law
the cached tokens are::

    occupancy(T) = S + lambda_s * E[ sum over non-last turns h_k min(G_k, T) + h_N T ]

(``S``: the shared system prompt, always hottest; ``lambda_s``: sessions per second at this
cache), and turn ``k + 1`` finds its history ``h_k`` cached iff ``G_k < T``. The token hit rate
is ``(turns x min(S, C) + E[sum h_k 1{G_k < T}]) / E[prompt tokens]``; with unbounded capacity it
reaches the session model's upper bound (every history and system token hits).

A hierarchy HBM -> host DRAM -> SSD -> remote pool, each tier demoting its LRU victims to the next
and promoting hits back, is one LRU stack cut at the cumulative capacities: tier ``j`` serves the
gaps in ``[T_{j-1}, T_j)``. Checked against the block-level LRU of ``planner.serving.cache_sim``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.serving.sessions import Delay, SessionStream


@dataclass(frozen=True)
class ReuseProfile:
    """What the cache model needs from a session workload, per session: the histories left by
    non-last turns (``history``, with their gaps ``gap_s`` or the gap distribution ``think``), the
    histories left by last turns, turns and prompt tokens; ``session_rate`` at this cache."""

    system: float
    history: np.ndarray          # h_k of every non-last turn of the sample
    gap_s: np.ndarray            # the gap after each of those turns (empirical gaps)
    last_history: float          # sum of h_N over the sample's sessions
    sessions: int
    turns: int
    prompt_tokens: float         # sum over the sample
    session_rate: float
    think: Delay | None = None   # if set, gaps are this distribution (independent of h)

    @classmethod
    def of(cls, stream: SessionStream, session_rate: float, think: Delay | None = None) -> ReuseProfile:
        nonlast = np.isfinite(stream.gap_next_s)
        return cls(system=float(stream.system_prompt), history=stream.history_after[nonlast].astype(float),
                   gap_s=stream.gap_next_s[nonlast], last_history=float(stream.history_after[~nonlast].sum()),
                   sessions=int(len(np.unique(stream.session))), turns=len(stream.session),
                   prompt_tokens=float(stream.input_len.sum()), session_rate=session_rate, think=think)

    def at_rate(self, session_rate: float) -> ReuseProfile:
        return ReuseProfile(self.system, self.history, self.gap_s, self.last_history, self.sessions, self.turns,
                            self.prompt_tokens, session_rate, self.think)

    # -- the two sums of the approximation, vectorized over T ----------------------------------
    def _resident(self, t: np.ndarray) -> np.ndarray:
        """E[sum over a session's turns of (token-seconds its history stays cached)] at TTL t."""
        if self.think is not None:
            nonlast = self.history.sum() * self.think.mean_min(t)
        else:
            nonlast = (self.history[None, :] * np.minimum(self.gap_s[None, :], t[:, None])).sum(axis=1)
        return (nonlast + self.last_history * t) / self.sessions

    def _reused(self, t: np.ndarray) -> np.ndarray:
        """E[history tokens a session finds cached] at TTL t."""
        if self.think is not None:
            got = self.history.sum() * self.think.cdf(t)
        else:
            got = (self.history[None, :] * (self.gap_s[None, :] < t[:, None])).sum(axis=1)
        return got / self.sessions

    def occupancy(self, t) -> np.ndarray:
        t = np.atleast_1d(np.asarray(t, float))
        return self.system + self.session_rate * self._resident(t)

    @property
    def upper_bound(self) -> float:
        """Hit rate with unbounded capacity: every system-prompt and history token."""
        return (self.turns * self.system + self.history.sum()) / self.prompt_tokens


def characteristic_time(p: ReuseProfile, capacity_tokens) -> np.ndarray:
    """``T`` with ``occupancy(T) = C`` (0 when the system prompt alone fills the cache), by
    bisection in log T (occupancy rises monotonically with T)."""
    c = np.atleast_1d(np.asarray(capacity_tokens, float))
    lo, hi = np.full(c.shape, 1e-6), np.full(c.shape, 1e-6)
    while True:                                    # grow hi until it brackets every capacity
        short = p.occupancy(hi) < c
        if not short.any() or hi.max() > 1e15:
            break
        hi = np.where(short, hi * 16, hi)
    for _ in range(60):
        mid = np.sqrt(lo * hi)
        below = p.occupancy(mid) < c
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.where(c <= p.system, 0.0, hi)


def hit_rate(p: ReuseProfile, capacity_tokens) -> np.ndarray:
    """Token hit rate of an LRU cache of ``capacity_tokens`` (array) under the session load."""
    c = np.atleast_1d(np.asarray(capacity_tokens, float))
    t = characteristic_time(p, c)
    system_hits = p.turns / p.sessions * np.minimum(c, p.system)
    return (system_hits + p._reused(t)) / (p.prompt_tokens / p.sessions)


def tier_bounds(tier_tokens: list[float], inclusive: bool = False) -> np.ndarray:
    """LRU-stack depth (tokens) where each tier's reach ends. Exclusive tiers (each demotes its
    victims to the next) add up; an inclusive tier (written through: host DRAM also holds what HBM
    holds, as LMCache and vLLM's CPU offload do) reaches only as deep as its own size."""
    t = np.asarray(tier_tokens, float)
    return np.maximum.accumulate(t) if inclusive else np.cumsum(t)


def tier_hit_rates(p: ReuseProfile, tier_tokens: list[float], inclusive: bool = False) -> np.ndarray:
    """Hit rate served by each tier of an LRU hierarchy (tiers listed fastest first)."""
    cumulative = hit_rate(p, tier_bounds(tier_tokens, inclusive))
    return np.diff(np.concatenate([[0.0], cumulative]))


def capacity_for(p: ReuseProfile, target_hit: float) -> float:
    """Smallest cache (tokens) reaching ``target_hit`` (inf above the session model's bound)."""
    if target_hit >= p.upper_bound:
        return float("inf")
    lo, hi = 0.0, max(p.system, 1.0)
    while hit_rate(p, hi)[0] < target_hit:
        hi *= 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if hit_rate(p, mid)[0] < target_hit else (lo, mid)
    return hi
