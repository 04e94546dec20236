"""Multi-turn sessions: chat conversations and agent loops whose turns resend a growing history.

A session is a sequence of turns. Turn ``k`` sends the shared system prompt ``S`` (common to all
sessions: instructions, tool schemas), the session's history ``h_{k-1}`` (every earlier turn's new
tokens and kept answer) and ``U_k`` new tokens (the user's message or the tool's output), and
generates ``O_k`` tokens, so its prompt is ``S + h_{k-1} + U_k`` and ``h_k = h_{k-1} + U_k +
f O_k`` (``f``: the fraction of an answer kept in the history; reasoning models drop their
thinking). ``S + h_{k-1}`` is what a prefix cache can serve. Sessions start as a Poisson process;
turn gaps (arrival to next arrival) are drawn from ``think``. Parameters are given directly, taken
from a preset (``planner/data/session_presets.yaml``, with sources), or replayed from a session
trace (``planner.serving.session_trace``).

One turn per session and no system prompt is the independent-request workload of ``Workload``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from planner.errors import unknown_name
from planner.frozen import Frozen
from planner.serving.workload import _Z90, Fixed, LogNormal, Workload

PRESETS_FILE = Path(__file__).resolve().parent.parent / "data" / "session_presets.yaml"
SUPPORT_SESSIONS = 4000     # sessions drawn (fixed seed) to represent the turn mix analytically
MAX_TURNS = 1000            # most turns a session's distribution may centre on (agent traces: tens to hundreds)
_SUPPORT_SEED = 12345


class Geometric(Frozen):
    """Turn count with a constant chance ``1 - 1/mean`` of one more turn (P(N = k) = p (1-p)^(k-1))."""

    dist: Literal["geometric"] = "geometric"
    mean: float = Field(ge=1, le=MAX_TURNS)

    def support(self) -> tuple[np.ndarray, np.ndarray]:
        p = 1.0 / self.mean
        k = np.arange(1, 1 + max(1, int(math.ceil(40 * self.mean))))
        pmf = p * (1 - p) ** (k - 1)
        return k.astype(float), pmf / pmf.sum()

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.geometric(1.0 / self.mean, n).astype(np.int64)


Count = Annotated[Fixed | LogNormal | Geometric, Field(discriminator="dist")]
Tokens = Annotated[Fixed | LogNormal, Field(discriminator="dist")]


class Delay(Frozen):
    """Seconds between a session's consecutive turn arrivals: ``lognormal`` (median, P90),
    ``exponential`` (mean) or ``fixed``."""

    dist: Literal["lognormal", "exponential", "fixed"] = "lognormal"
    median_s: float | None = Field(None, gt=0)
    p90_s: float | None = Field(None, gt=0)
    mean_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> Delay:
        need = {"lognormal": ("median_s", "p90_s"), "exponential": ("mean_s",), "fixed": ("mean_s",)}[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.dist} delay needs {' and '.join(missing)}")
        if self.dist == "lognormal" and self.p90_s <= self.median_s:
            raise ValueError(f"p90_s ({self.p90_s}) must exceed median_s ({self.median_s})")
        return self

    def quantile(self, q: np.ndarray) -> np.ndarray:
        from planner.normal import ppf

        q = np.asarray(q, float)
        if self.dist == "fixed":
            return np.full(q.shape, self.mean_s)
        if self.dist == "exponential":
            return -self.mean_s * np.log1p(-q)
        sigma = math.log(self.p90_s / self.median_s) / _Z90
        return self.median_s * np.exp(sigma * ppf(q))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.quantile(rng.random(n))

    def cdf(self, t: np.ndarray) -> np.ndarray:
        """P(gap < t)."""
        from planner.normal import cdf

        t = np.asarray(t, float)
        if self.dist == "fixed":
            return (t > self.mean_s).astype(float)
        if self.dist == "exponential":
            return -np.expm1(-t / self.mean_s)
        sigma = math.log(self.p90_s / self.median_s) / _Z90
        with np.errstate(divide="ignore"):
            return cdf((np.log(np.maximum(t, 1e-300)) - math.log(self.median_s)) / sigma)

    def mean_min(self, t: np.ndarray) -> np.ndarray:
        """E[min(gap, t)] = integral of P(gap > u) over [0, t] (vectorized over t)."""
        t = np.asarray(t, float)
        if self.dist == "fixed":
            return np.minimum(t, self.mean_s)
        if self.dist == "exponential":
            return self.mean_s * -np.expm1(-t / self.mean_s)
        g = self.quantile((np.arange(2048) + 0.5) / 2048)   # stratified quantiles of the gap
        return np.minimum(g[None, :], np.ravel(t)[:, None]).mean(axis=1).reshape(t.shape)


class Sessions(Frozen):
    """Session model (see module docstring). ``preset`` fills every field not given."""

    preset: str | None = None
    description: str = ""
    turns: Count | None = None
    first_input: Tokens | None = Field(None, description="new tokens of the first turn (default: new_input)")
    new_input: Tokens | None = Field(None, description="tokens a turn adds: user message or tool output")
    output: Tokens | None = None
    think: Delay | None = None
    system_prompt: int = Field(0, ge=0, description="tokens shared by every session (instructions, tools)")
    output_kept: float = Field(1.0, ge=0, le=1, description="fraction of an answer resent in later turns")
    max_context: int | None = Field(None, ge=1, description="context window: a session ends before a turn "
                                    "whose prompt + answer would exceed it (agents stop or start afresh)")
    trace: str | None = Field(None, description="session trace CSV (session_id, timestamp, input_tokens, "
                              "output_tokens); replaces the distributions")
    sources: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, v: Any) -> Any:
        if isinstance(v, dict) and isinstance(v.get("preset"), str):   # other types: the field's type error
            presets = session_presets()
            if v["preset"] not in presets:
                raise ValueError(str(unknown_name("session preset", v["preset"], sorted(presets))))
            v = {**presets[v["preset"]], **v}
        return v

    @model_validator(mode="after")
    def _complete(self) -> Sessions:
        if self.trace is None:
            missing = [k for k in ("turns", "new_input", "output", "think") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"sessions need {', '.join(missing)} (or a preset, or a trace)")
        from planner.checks import located

        typical = getattr(self.turns, "value", None) or getattr(self.turns, "median", None)
        if typical is not None and typical > MAX_TURNS:
            raise located("turns", f"{typical:g} turns per session; expected at most {MAX_TURNS}")
        if self.turns is not None and not self.mean_turns <= MAX_TURNS:     # a heavy tail (sigma) the median hides
            raise located("turns", f"a mean of {self.mean_turns:.3g} turns per session (its tail); expected at "
                          f"most {MAX_TURNS}: give the distribution a max, or a smaller sigma / p90")
        return self

    @property
    def mean_turns(self) -> float:
        """E[turns per session] of the turn-count distribution (before ``max_context`` cuts)."""
        n, pn = self.turns.support()
        return float(pn @ n)

    def stream(self, n_sessions: int, session_rate: float, seed: int) -> SessionStream:
        """``n_sessions`` sessions starting as a Poisson process of ``session_rate`` per second."""
        if self.trace is not None:
            from planner.serving.session_trace import load_session_trace

            return load_session_trace(self.trace, self.system_prompt, self.output_kept)
        rng = np.random.default_rng(seed)
        starts = np.cumsum(rng.exponential(1.0 / session_rate, n_sessions))
        turns = np.maximum(self.turns.sample(n_sessions, rng), 1).astype(np.int64)
        sid = np.repeat(np.arange(n_sessions), turns)
        total = int(turns.sum())
        first = np.zeros(total, bool)
        first[np.concatenate([[0], np.cumsum(turns)[:-1]])] = True
        new = self.new_input.sample(total, rng).astype(float)
        new[first] = (self.first_input or self.new_input).sample(int(first.sum()), rng)
        out = self.output.sample(total, rng).astype(float)
        gap = np.where(first, 0.0, self.think.sample(total, rng))
        return _assemble(sid, first, starts[sid], gap, new, out, self.system_prompt, self.output_kept,
                         self.max_context)


@dataclass(frozen=True)
class SessionStream:
    """Turns of many sessions, sorted by arrival. ``reuse``: the prompt's prefix (system prompt +
    history) a cache can serve; ``history_after``: the session's history after this turn;
    ``gap_next_s``: seconds to the session's next turn (inf after its last)."""

    session: np.ndarray
    turn: np.ndarray
    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    reuse: np.ndarray
    history_after: np.ndarray
    gap_next_s: np.ndarray
    system_prompt: int

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self.arrival_s) > 1 else 0.0


def _assemble(sid, first, start_s, gap_s, new, out, system: int, kept: float,
              max_context: int | None = None) -> SessionStream:
    """Cumulate per-turn draws (grouped by session, turns in order) into prompts and histories; a
    session ends before the first turn whose prompt + answer would exceed ``max_context``."""
    added = new + kept * out
    history_after = _grouped_cumsum(added, first)
    history_before = history_after - added
    arrival = start_s + _grouped_cumsum(gap_s, first)
    if max_context is not None:
        over = (system + history_before + new + out > max_context).astype(float)
        keep = (_grouped_cumsum(over, first) == 0) | first     # a session keeps at least its first turn
        sid, first, arrival, new, out = sid[keep], first[keep], arrival[keep], new[keep], out[keep]
        history_after, history_before = history_after[keep], history_before[keep]
    starts = np.flatnonzero(first)
    turn = np.arange(len(sid)) - np.repeat(starts, np.diff(np.append(starts, len(sid))))
    last = np.append(first[1:], True)
    gap_next = np.where(last, np.inf, np.append(arrival[1:], np.inf) - arrival)
    order = np.argsort(arrival, kind="stable")
    return SessionStream(
        session=sid[order], turn=turn[order], arrival_s=arrival[order],
        input_len=(system + history_before + new)[order].round().astype(np.int64),
        output_len=np.maximum(out[order], 1).round().astype(np.int64),
        reuse=(system + history_before)[order].round().astype(np.int64),
        history_after=history_after[order].round().astype(np.int64), gap_next_s=gap_next[order], system_prompt=system)


def _grouped_cumsum(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    c = np.cumsum(x)
    starts = np.flatnonzero(first)
    offset = np.repeat(c[starts] - x[starts], np.diff(np.append(starts, len(x))))
    return c - offset


@lru_cache(maxsize=1)
def session_presets() -> dict[str, dict]:
    from planner.yamlio import load_yaml

    data, _ = load_yaml(PRESETS_FILE)
    return data


class TierTime(Frozen):
    """One KV tier as the turns see it: an idle session's history is within the tier's cumulative
    reach for ``ttl_s`` after its last turn; a hit from it loads at ``load_s_per_token``."""

    ttl_s: float = Field(ge=0)
    load_s_per_token: float = Field(0.0, ge=0)


class SessionWorkload(Workload):
    """A ``Workload`` whose requests are the turns of sessions. ``rate`` is turns (requests) per
    second; sessions start at ``rate / E[turns]``. ``prefix_hit`` is set by the KV-cache model
    (``planner.serving.prefix_cache``) for a deployment; until then it is what the scenario says."""

    sessions: Sessions
    cache_tiers: tuple[TierTime, ...] = Field((), description="set by the planner, fastest tier first: how "
                                              "long an idle session's KV stays within each tier's reach (Che's "
                                              "characteristic time) and what a hit from it costs to load; gives "
                                              "each turn its own hit and load")

    @model_validator(mode="after")
    def _check(self) -> SessionWorkload:
        if self.rate is None and self.sessions.trace is None:
            raise ValueError("give a rate (turns per second)")
        if self.arrival.process != "poisson" or self.trace or self.input or self.output:
            raise ValueError("a session workload takes its lengths and timing from 'sessions' "
                             "(drop trace/input/output/arrival)")
        return self

    @property
    def mean_turns(self) -> float:
        s = self.stream()
        return len(s.session) / len(np.unique(s.session))

    @property
    def request_rate(self) -> float:
        if self.rate is not None:
            return self.rate
        s = self.stream()
        return (len(s.arrival_s) - 1) / s.duration_s

    @property
    def session_rate(self) -> float:
        return self.request_rate / self.mean_turns

    def stream(self, n_sessions: int = SUPPORT_SESSIONS, seed: int = _SUPPORT_SEED) -> SessionStream:
        rate = self.rate / self.sessions.mean_turns if self.sessions.trace is None else 1.0
        return _cached_stream(self.sessions.model_dump_json(), n_sessions, rate, seed)

    def independent(self) -> Workload | None:
        """The equivalent independent-request ``Workload`` when every session is one turn with no
        system prompt (then lengths, supports and samples are exactly the plain workload's)."""
        x = self.sessions
        if x.trace is None and isinstance(x.turns, Fixed) and x.turns.value == 1 and x.system_prompt == 0 \
                and x.max_context is None:
            return Workload(rate=self.rate, input=x.first_input or x.new_input, output=x.output,
                            prefix_hit=self.prefix_hit)
        return None

    @property
    def cache_ttl_s(self) -> float | None:
        """How long an idle session's KV stays cached anywhere (the slowest tier's reach)."""
        return self.cache_tiers[-1].ttl_s if self.cache_tiers else None

    def support_hits(self):
        """Each turn's expected hit fraction when the cache keeps an idle session ``cache_ttl_s``:
        the system prompt plus, if the gap since the session's previous turn was shorter, its
        history (the turn-level form of ``prefix_cache.hit_rate``); else ``prefix_hit`` for all."""
        if not self.cache_tiers or self.independent() is not None:
            return self.prefix_hit
        s = self.stream()
        return self._turn_cache(s, self._tier_shares(s, self.sessions.trace is None))[0]

    def support_loads(self):
        """Each turn's expected time to load its history from the tier its gap reaches (0 in HBM)."""
        if not self.cache_tiers or self.independent() is not None:
            return 0.0
        s = self.stream()
        return self._turn_cache(s, self._tier_shares(s, self.sessions.trace is None))[1]

    def sample_cache(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(hit fraction, tier load seconds) of each turn of ``sample(n, seed)``, drawn: a turn finds
        its history in the tier its own gap since the session's previous turn reaches (Che's
        characteristic times), so cold first turns and expired sessions keep their full prefill."""
        if not self.cache_tiers or self.independent() is not None:
            return super().sample_cache(n, seed)
        s, idx = self._sample_stream(n, seed)
        hit, load = self._turn_cache(s, self._tier_shares(s, expected=False))
        return hit[idx], load[idx]

    def _tier_shares(self, s: SessionStream, expected: bool) -> np.ndarray:
        """(tiers, turns): the chance each tier serves a turn's history. ``expected``: over the gap
        distribution (smooth, for the analytic moments); else by the turn's own gap."""
        ttl = np.array([t.ttl_s for t in self.cache_tiers])
        if expected:
            reach = np.repeat(self.sessions.think.cdf(ttl)[:, None], len(s.session), axis=1)
        else:
            reach = (_gap_before(s)[None, :] < ttl[:, None]).astype(float)
        return np.diff(np.concatenate([np.zeros((1, reach.shape[1])), reach]), axis=0)

    def _turn_cache(self, s: SessionStream, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hit fraction, load seconds) per turn: the system prompt (always in HBM, the hottest
        blocks) plus the history each tier serves; first turns have no history."""
        history = np.where(s.reuse <= s.system_prompt, 0.0, s.reuse - s.system_prompt)
        per_token = np.array([t.load_s_per_token for t in self.cache_tiers])
        hits = np.minimum(s.reuse, s.system_prompt) + history * shares.sum(axis=0)
        return np.minimum(hits / s.input_len, 0.999), history * (per_token @ shares)

    def joint_support(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The turns of ``SUPPORT_SESSIONS`` sessions (fixed seed), equally weighted."""
        if (w := self.independent()) is not None:
            return w.joint_support()
        s = self.stream()
        return s.input_len.astype(float), s.output_len.astype(float), np.full(len(s.input_len), 1 / len(s.input_len))

    def sample(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` turns in arrival order (sessions drawn until there are enough)."""
        if (w := self.independent()) is not None:
            return w.sample(n, seed)
        s, idx = self._sample_stream(n, seed)
        return s.arrival_s[idx] - s.arrival_s[0], s.input_len[idx], s.output_len[idx]

    def _sample_stream(self, n: int, seed: int) -> tuple[SessionStream, np.ndarray]:
        s = self.stream(n_sessions=max(1, int(np.ceil(n / self.mean_turns * 1.2)) + 10), seed=seed)
        while len(s.arrival_s) < n and self.sessions.trace is None:
            s = self.stream(n_sessions=2 * len(np.unique(s.session)), seed=seed)
        return s, np.arange(n) % len(s.arrival_s)


def _gap_before(s: SessionStream) -> np.ndarray:
    """Seconds since the session's previous turn (inf for first turns)."""
    gap = np.full(len(s.session), np.inf)
    idx = np.flatnonzero(np.isfinite(s.gap_next_s))
    gap[_next_turn_index(s)[idx]] = s.gap_next_s[idx]
    return gap


def _next_turn_index(s: SessionStream) -> np.ndarray:
    """For each turn, the index (in arrival order) of its session's next turn (itself if last)."""
    order = np.lexsort((s.arrival_s, s.session))
    nxt = np.arange(len(order))
    same = s.session[order][1:] == s.session[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


@lru_cache(maxsize=16)
def _cached_stream(sessions_json: str, n_sessions: int, rate: float, seed: int) -> SessionStream:
    return Sessions.model_validate_json(sessions_json).stream(n_sessions, rate, seed)
