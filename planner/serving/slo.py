"""Service-level objectives: TTFT, TPOT and end-to-end latency at P50/P90/P99, and attainment.

TPOT here is a request's mean time between output tokens after the first,
``(E2E - TTFT) / (output - 1)`` (as vLLM's and NVIDIA's benchmark tools report it).
Attainment is the fraction of requests meeting every per-request threshold given.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from planner.frozen import Frozen

PERCENTILES = ("p50", "p90", "p99")
_Q = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


class Target(Frozen):
    """Upper bounds (seconds) on percentiles of one latency metric."""

    p50: float | None = Field(None, gt=0, allow_inf_nan=False)
    p90: float | None = Field(None, gt=0, allow_inf_nan=False)
    p99: float | None = Field(None, gt=0, allow_inf_nan=False)

    def items(self) -> list[tuple[str, float]]:
        return [(p, getattr(self, p)) for p in PERCENTILES if getattr(self, p) is not None]

    @model_validator(mode="after")
    def _ordered(self) -> Target:
        bounds = [v for _, v in self.items()]
        if bounds != sorted(bounds):
            raise ValueError(f"percentile bounds must not decrease from p50 to p99, got {bounds}")
        return self


class SLO(Frozen):
    """Latency targets. ``attainment``: the fraction of requests that must meet the per-request
    thresholds (the tightest percentile bound of each metric), e.g. 0.9 as in DistServe."""

    ttft_s: Target = Target()
    tpot_s: Target = Target()
    e2e_s: Target = Target()
    attainment: float | None = Field(None, gt=0, le=1)

    def bound_percentiles(self, also: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The latency percentiles these targets bound (every one under an attainment target), and
        ``also`` (a search that reports P90 whatever is bounded), in ``PERCENTILES`` order."""
        if self.attainment is not None:
            return PERCENTILES
        return tuple(p for p in PERCENTILES if p in also or any(getattr(getattr(self, m), p) is not None
                                                                for m in ("ttft_s", "tpot_s", "e2e_s")))

    def thresholds(self) -> dict[str, float]:
        """Per-request threshold per metric: its tightest bound."""
        out = {}
        for metric in ("ttft_s", "tpot_s", "e2e_s"):
            items = getattr(self, metric).items()
            if items:
                out[metric] = min(v for _, v in items)
        return out


def percentiles(samples: np.ndarray) -> dict[str, float]:
    return {p: float(np.quantile(samples, _Q[p])) for p in PERCENTILES} | {"mean": float(np.mean(samples))}


def check(slo: SLO, measured: dict[str, dict[str, float]]) -> list[str]:
    """The violated targets, as ``metric.pXX: value > bound`` strings (empty: all met)."""
    bad = []
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for p, bound in getattr(slo, metric).items():
            value = measured[metric][p]
            if value > bound:
                bad.append(f"{metric}.{p}: {value:.4g} > {bound:.4g}")
    return bad


def attainment(slo: SLO, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray) -> float:
    ok = np.ones(len(ttft), dtype=bool)
    th = slo.thresholds()
    for metric, values in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e)):
        if metric in th:
            ok &= values <= th[metric]
    return float(ok.mean()) if len(ok) else float("nan")


def judge(slo: SLO, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray, output_len: np.ndarray
          ) -> tuple[dict[str, dict[str, float]], float, list[str]]:
    """Simulated requests against the SLO: (percentiles per metric, attainment, violations).
    TPOT percentiles are over requests with more than one output token."""
    measured = {"ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot[output_len > 1]), "e2e_s": percentiles(e2e)}
    bad = check(slo, measured)
    att = attainment(slo, ttft, tpot, e2e)
    if slo.attainment is not None and att < slo.attainment:
        bad.append(f"attainment: {att:.3f} < {slo.attainment}")
    return measured, att, bad
