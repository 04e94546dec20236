"""Workloads: arrival process, input/output length distributions, prefix-cache hits.

Every distribution gives (a) seeded samples for the simulator and (b) a weighted *support*
(values, probabilities) from which the analytic model takes moments and quantiles, so both
evaluators see the same distribution.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from planner.checks import located
from planner.errors import InputError
from planner.frozen import Frozen
from planner.serving.demand import Demand
from planner.serving.trace import Trace, load_trace

_SUPPORT_POINTS = 512  # stratified quantiles representing a continuous distribution
_Z90 = 1.2815515655446004


class Fixed(Frozen):
    dist: Literal["fixed"] = "fixed"
    value: int = Field(gt=0, description="tokens")

    def support(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array([float(self.value)]), np.array([1.0])

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


class LogNormal(Frozen):
    """Log-normal token count given by its median and either its P90 or ``sigma`` (of ln),
    clipped to [min, max], or with ``truncate`` redrawn inside it (a truncated log-normal)."""

    dist: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0)
    p90: float | None = Field(None, gt=0)
    sigma: float | None = Field(None, gt=0, le=10, description="standard deviation of ln(tokens); 10 already "
                                "puts the P90 at 370,000 x the median")
    min: int = Field(1, ge=1)
    max: int | None = Field(None, ge=1)
    truncate: bool = False

    @model_validator(mode="after")
    def _check(self) -> LogNormal:
        if (self.p90 is None) == (self.sigma is None):
            raise ValueError("give exactly one of p90 or sigma")
        if self.p90 is not None and self.p90 <= self.median:
            raise ValueError(f"p90 ({self.p90}) must exceed the median ({self.median})")
        if self.p90 is not None and self._sigma > 10:
            raise ValueError(f"p90 ({self.p90:g}) over the median ({self.median:g}) is a log-normal sigma of "
                             f"{self._sigma:.3g}; expected at most 10")
        if self.max is not None and self.max < self.min:
            raise ValueError("max must be >= min")
        if self.truncate:
            lo, hi = self._window()
            if not hi - lo > 1e-12:
                raise ValueError(f"truncated to [{self.min}, {self.max}], the distribution keeps a probability of "
                                 f"{max(hi - lo, 0.0):.3g} (median {self.median:g}): widen min..max or move the "
                                 "median into it")
        return self

    def _window(self) -> tuple[float, float]:
        """(F(min), F(max)) of the untruncated distribution."""
        from planner.normal import cdf as ndtr

        def z(x: float) -> float:
            return (math.log(x) - math.log(self.median)) / self._sigma

        return float(ndtr(z(self.min))), float(ndtr(z(self.max))) if self.max is not None else 1.0

    @property
    def _sigma(self) -> float:
        return self.sigma if self.sigma is not None else math.log(self.p90 / self.median) / _Z90

    def _clip(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.round(x), self.min, self.max if self.max is not None else np.inf)

    def _quantile(self, q: np.ndarray) -> np.ndarray:
        from planner.normal import ppf as ndtri

        if self.truncate:   # map q into [F(min), F(max)] of the untruncated distribution
            lo, hi = self._window()
            q = lo + (hi - lo) * q
        return self._clip(self.median * np.exp(self._sigma * ndtri(q)))

    def support(self) -> tuple[np.ndarray, np.ndarray]:
        q = (np.arange(_SUPPORT_POINTS) + 0.5) / _SUPPORT_POINTS
        return self._quantile(q), np.full(_SUPPORT_POINTS, 1.0 / _SUPPORT_POINTS)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.truncate:
            return self._quantile(rng.random(n)).astype(np.int64)
        return self._clip(rng.lognormal(math.log(self.median), self._sigma, n)).astype(np.int64)


class FromTrace(Frozen):
    """The empirical lengths of a trace (bundled name or CSV path)."""

    dist: Literal["trace"] = "trace"
    trace: str

    def _values(self, column: str) -> np.ndarray:
        t = load_trace(self.trace)
        return np.maximum(getattr(t, column), 1).astype(float)


Length = Annotated[Fixed | LogNormal | FromTrace, Field(discriminator="dist")]


class Arrival(Frozen):
    """``poisson``: exponential gaps; ``gamma``: Gamma gaps with coefficient of variation ``cv``
    (cv > 1 is burstier than Poisson); ``trace``: replay the trace's timestamps, rescaled to the
    workload rate if one is given."""

    process: Literal["poisson", "gamma", "trace"] = "poisson"
    cv: float = Field(1.0, ge=0.01, le=100, description="coefficient of variation of inter-arrival gaps (gamma; "
                      "0.01: nearly even gaps, 100: extreme bursts)")

    @model_validator(mode="after")
    def _cv_needs_gamma(self) -> Arrival:
        if "cv" in self.model_fields_set and self.process != "gamma":
            raise located("cv", f"cv only shapes gamma arrivals; with process {self.process!r} it would be "
                          "ignored (use process: gamma, or drop cv)")
        return self

    @property
    def scv(self) -> float:
        """Squared coefficient of variation of the gaps (1 for Poisson)."""
        return 1.0 if self.process == "poisson" else self.cv**2


def _untimed(trace: str | None) -> bool:
    """Whether ``trace`` loads and has no arrival times (a file that does not load is reported
    where it is used)."""
    if trace is None:
        return False
    try:
        return not load_trace(trace).timed
    except InputError:
        return False


class Workload(Frozen):
    """Requests: their rate, arrival process and token lengths.

    ``trace: NAME`` is shorthand for input and output lengths sampled jointly from that trace (and
    its timestamps, when ``arrival.process`` is ``trace``). ``prefix_hit`` is the fraction of
    prompt tokens found in the prefix cache: they cost no prefill compute but still occupy KV.
    """

    rate: float | None = Field(None, ge=1e-6, allow_inf_nan=False,
                               description="requests per second, at least 1e-6 (one request in 11.6 days; "
                               "default: the trace's mean rate)")
    arrival: Arrival = Arrival()
    trace: str | None = None
    input: Length | None = None
    output: Length | None = None
    prefix_hit: float = Field(0.0, ge=0, lt=1)
    demand: Demand | None = Field(None, description="rate over time (horizon design): CSV or parametric")

    @model_validator(mode="after")
    def _check(self) -> Workload:
        if self.trace is None and (self.input is None or self.output is None):
            raise ValueError("give input and output length distributions, or a trace")
        if self.rate is None and self.trace is None:
            raise ValueError("give a rate (requests per second)")
        if self.rate is None and _untimed(self.trace):
            raise located("rate", f"trace {self.trace!r} has no timestamps (a length distribution): give the "
                          "workload a rate")
        if self.arrival.process == "trace" and _untimed(self.trace):
            raise located("arrival", f"arrival.process 'trace' replays the trace's timestamps, and {self.trace!r} "
                          "has none (a length distribution): use poisson or gamma arrivals")
        if self.arrival.process == "trace" and self.trace is None:
            raise ValueError("arrival.process 'trace' needs a trace")
        if (self.trace is not None and self.input is not None and self.output is not None
                and self.rate is not None and self.arrival.process != "trace"):
            raise located("trace", "the trace is unused: input and output lengths and the rate are given and "
                          "arrivals are not replayed (drop trace, or one of input/output to take it from the trace)")
        return self

    # -- derived -------------------------------------------------------------------------------
    def _trace(self) -> Trace | None:
        return load_trace(self.trace) if self.trace else None

    @property
    def request_rate(self) -> float:
        if self.rate is not None:
            return self.rate
        return self._trace().mean_rate  # type: ignore[union-attr]   (timed: the validator says so)

    def with_rate(self, rate: float) -> Workload:
        return self.model_copy(update={"rate": rate})

    def support_hits(self):
        """Prefix-hit fraction of each request of ``joint_support`` (one figure for all here)."""
        return self.prefix_hit

    def support_loads(self):
        """Seconds each request of ``joint_support`` spends loading its hits from slower KV tiers
        (none here: hits are in HBM)."""
        return 0.0

    def sample_cache(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(prefix-hit fraction, tier load seconds) of each of the ``n`` requests of ``sample(n, seed)``."""
        return np.full(n, self.prefix_hit), np.zeros(n)

    def joint_support(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input lengths, output lengths, probabilities) of the request mix."""
        t = self._trace()
        if t is not None and self.input is None and self.output is None:
            i, o = np.maximum(t.input_len, 1).astype(float), np.maximum(t.output_len, 1).astype(float)
            return i, o, np.full(len(i), 1.0 / len(i))
        iv, ip = self._marginal(self.input, "input_len")
        ov, op = self._marginal(self.output, "output_len")
        return (np.repeat(iv, len(ov)), np.tile(ov, len(iv)), np.outer(ip, op).ravel())

    def _marginal(self, spec, column: str) -> tuple[np.ndarray, np.ndarray]:
        if spec is None:
            values = np.maximum(getattr(self._trace(), column), 1).astype(float)
        elif isinstance(spec, FromTrace):
            values = spec._values(column)
        else:
            return spec.support()
        return values, np.full(len(values), 1.0 / len(values))

    def sample(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` requests: (arrival times s, input tokens, output tokens), reproducible by seed."""
        rng = np.random.default_rng(seed)
        t = self._trace()
        if t is not None and self.input is None and self.output is None:
            replay = self.arrival.process == "trace"   # replay rows in order, with their timestamps
            idx = np.arange(n) % len(t.input_len) if replay else rng.integers(0, len(t.input_len), n)
            inp, out = np.maximum(t.input_len[idx], 1), np.maximum(t.output_len[idx], 1)
        else:
            inp, out = self._sample_one(self.input, "input_len", n, rng), self._sample_one(self.output, "output_len",
                                                                                         n, rng)
        return self._arrivals(n, rng), inp.astype(np.int64), out.astype(np.int64)

    def _sample_one(self, spec, column, n, rng):
        if spec is None or isinstance(spec, FromTrace):
            values = getattr(self._trace() if spec is None else load_trace(spec.trace), column)
            return np.maximum(values[rng.integers(0, len(values), n)], 1)
        return spec.sample(n, rng)

    def _arrivals(self, n: int, rng: np.random.Generator) -> np.ndarray:
        rate = self.request_rate
        if self.arrival.process == "trace":
            t = self._trace()
            reps = int(np.ceil(n / len(t.arrival_s)))
            span = t.duration_s + 1.0 / t.mean_rate
            stamps = np.concatenate([t.arrival_s + k * span for k in range(reps)])[:n]
            return stamps * (t.mean_rate / rate)
        if self.arrival.process == "gamma":
            shape = 1.0 / self.arrival.cv**2
            gaps = rng.gamma(shape, 1.0 / (shape * rate), n)
        else:
            gaps = rng.exponential(1.0 / rate, n)
        return np.cumsum(gaps)


class LengthStats(Frozen):
    """Moments of the request mix the analytic model needs (prefill tokens net of prefix hits)."""

    mean_input: float
    mean_prefill: float
    second_prefill: float       # E[prefill tokens^2]
    mean_output: float
    mean_decode_ctx: float      # context of a decoding sequence, length-biased by output length
    mean_full_len: float        # prompt + output of a decoding sequence, length-biased likewise
    prefill_quantiles: tuple[float, float, float]   # P50, P90, P99 of prefill tokens
    output_quantiles: tuple[float, float, float]
    mean_prompt_len: float      # prompt length a prefill token belongs to (token-weighted)
    mean_inv_decode: float      # E[1 / (O - 1)] over requests with O > 1 (TPOT averages over O - 1 gaps)
    mean_load_s: float = 0.0    # time to load a request's hits from slower KV tiers (before overlap)
    load_quantiles: tuple[float, float, float] = (0.0, 0.0, 0.0)   # its P50, P90, P99


QUANTILES = (0.5, 0.9, 0.99)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q) -> np.ndarray:
    order = np.argsort(values)
    cdf = np.cumsum(weights[order])
    cdf /= cdf[-1]
    return values[order][np.minimum(np.searchsorted(cdf, q), len(values) - 1)]


_STATS: dict[int, tuple[Workload, LengthStats]] = {}


def length_stats(w: Workload) -> LengthStats:
    """``length_stats_of`` the workload's joint support, kept per workload object (a frozen model:
    the searches evaluate one workload hundreds of times, and a fine joint support takes ~0.1 s).
    The entry holds the workload, so its id is not reused while it is kept."""
    held = _STATS.get(id(w))
    if held is not None and held[0] is w:
        return held[1]
    i, o, p = w.joint_support()
    stats = length_stats_of(i, o, p, w.support_hits(), w.support_loads())
    if len(_STATS) >= 64:
        _STATS.clear()
    _STATS[id(w)] = (w, stats)
    return stats


def length_stats_of(i: np.ndarray, o: np.ndarray, p: np.ndarray, prefix_hit: float = 0.0,
                    load_s: float = 0.0) -> LengthStats:
    """Moments of a request mix given as (input lengths, output lengths, probabilities); ``load_s``:
    each request's time to load its hits from slower KV tiers."""
    p = p / p.sum()
    load = np.broadcast_to(np.asarray(load_s, float), np.shape(i))
    pre = np.maximum(np.round(i * (1 - prefix_hit)), 1)
    ctx = i + (o - 1) / 2
    return LengthStats(
        mean_input=float(p @ i), mean_prefill=float(p @ pre), second_prefill=float(p @ pre**2),
        mean_output=float(p @ o), mean_decode_ctx=float((p * o) @ ctx / (p @ o)),
        mean_full_len=float((p * o) @ (i + o) / (p @ o)),
        prefill_quantiles=tuple(float(x) for x in weighted_quantile(pre, p, QUANTILES)),
        output_quantiles=tuple(float(x) for x in weighted_quantile(o, p, QUANTILES)),
        mean_prompt_len=float((p * pre) @ i / (p @ pre)),
        mean_inv_decode=float((p * (o > 1)) @ (1 / np.maximum(o - 1, 1)) / max(p @ (o > 1), 1e-12)),
        mean_load_s=float(p @ load),
        load_quantiles=tuple(float(x) for x in weighted_quantile(load, p, QUANTILES)),
    )
