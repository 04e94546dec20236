"""Demand over time: request rate per period (hour) from a CSV or a parametric profile.

A *demand* says how the offered rate moves over hours, days, weeks and months; the workload's
length distribution still says what one request costs. Two ways in:

* ``csv: FILE`` with a ``timestamp`` (seconds or ``YYYY-MM-DD HH:MM:SS``) or ``hour`` column, a
  ``requests_per_s`` (or ``rate``) column, and optionally ``mean_input_tokens`` /
  ``mean_output_tokens`` per row. Each row is one period lasting until the next row's time (the
  last one as long as the one before). Rows must be strictly increasing in time.
* a parametric profile: ``peak_rate`` at the busiest weekday hour, a cosine daily cycle between
  ``trough_ratio x peak`` and the peak (peak at ``peak_hour``), weekends scaled by
  ``weekend_factor``, optional bursts (extra multipliers on given hours), and compound growth of
  ``growth_per_month`` (30.4 days), over ``hours`` hours.

Defaults and where they come from (README "Capacity over time"):

* burstiness *within* an hour: the bundled Azure LLM inference traces 2023 (Patel et al., ISCA
  2024). Per-minute request counts relative to the hour's mean have a coefficient of variation of
  0.22 (conversation) and 1.04 (coding), against 0.055 and 0.08 for Poisson arrivals at those
  rates; :func:`minute_factors` returns that empirical sequence, which the autoscaling simulation
  replays inside every hour.
* daily and weekly shape: the week-long Azure LLM inference trace 2024 (DynamoLLM, Stojkovic et
  al., arXiv 2408.00741) and BurstGPT (Wang et al., arXiv 2401.17644, 121-213 days of Azure
  OpenAI traffic) both show daily cycles and quieter weekends, but neither paper's text gives a
  peak/trough or weekend ratio we could read (their figures only). ``trough_ratio = 0.4`` is the
  diurnal trough this planner's POLCA design already assumes and ``weekend_factor = 0.7`` is an
  assumption; both are parameters to set from your own traffic.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import Field, model_validator

from planner.errors import InputError
from planner.frozen import Frozen
from planner.yamlio import read_text

HOURS_PER_MONTH = 730.5          # 365.25 x 24 / 12
_TIME = ("timestamp", "TIMESTAMP", "time")
_HOUR = ("hour", "hours")
_RATE = ("requests_per_s", "rate", "req_per_s", "rps")
_INPUT = ("mean_input_tokens", "input_tokens", "mean_input")
_OUTPUT = ("mean_output_tokens", "output_tokens", "mean_output")


@dataclass(frozen=True)
class DemandSeries:
    """Periods of a demand curve (arrays of equal length)."""

    start_h: np.ndarray          # hours since the first period
    duration_h: np.ndarray       # length of each period, hours
    rate: np.ndarray             # mean requests/s in the period
    mean_input: np.ndarray | None = None    # tokens, when the CSV gives them
    mean_output: np.ndarray | None = None
    clock_h0: float = 0.0        # hour of day (UTC) at which the first period starts

    def __len__(self) -> int:
        return len(self.rate)


class Burst(Frozen):
    """A multiplier on the rate for ``hours`` hours starting at hour ``at`` (a launch, an outage
    elsewhere, a news event)."""

    at: float = Field(ge=0, description="hour since the start")
    hours: float = Field(1.0, gt=0)
    factor: float = Field(2.0, gt=0)


class Demand(Frozen):
    """``workload.demand``: a CSV (``csv: FILE``) or a parametric profile (``peak_rate: ...``)."""

    csv: str | None = Field(None, description="CSV with timestamp|hour, requests_per_s[, mean tokens]")
    peak_rate: float | None = Field(None, gt=0, description="requests/s at the busiest weekday hour")
    trough_ratio: float = Field(0.4, gt=0, le=1, description="quietest / busiest hour of a weekday")
    peak_hour: float = Field(14.0, ge=0, lt=24, description="hour of day of the peak")
    weekend_factor: float = Field(0.7, gt=0, le=2, description="weekend rate / weekday rate, same hour")
    growth_per_month: float = Field(0.0, gt=-1, description="compound growth, e.g. 0.1 for 10%/month")
    hours: int = Field(168, ge=1, le=87_660, description="length of the parametric profile")
    bursts: list[Burst] = []
    burst_trace: str | None = Field("azure-conv-2023", description="trace whose per-minute rate "
                                    "fluctuations are replayed inside each hour (autoscaling); null: none")

    @model_validator(mode="after")
    def _one_source(self) -> Demand:
        if (self.csv is None) == (self.peak_rate is None):
            raise ValueError("give either csv (a demand file) or peak_rate (a parametric profile)")
        return self

    def series(self) -> DemandSeries:
        """The periods of this demand (hourly for a parametric profile)."""
        if self.csv is not None:
            return load_demand_csv(self.csv)
        return parametric(self)


def parametric(d: Demand) -> DemandSeries:
    """Hourly rates: ``peak x day(h) x week(h) x growth(h) x bursts(h)``, with the day a cosine
    between ``trough_ratio`` and 1 peaking at ``peak_hour``; hour 0 is Monday 00:00."""
    assert d.peak_rate is not None
    h = np.arange(d.hours, dtype=float)
    hod = h % 24
    day = d.trough_ratio + (1 - d.trough_ratio) * 0.5 * (1 + np.cos(2 * np.pi * (hod - d.peak_hour) / 24))
    weekend = (h // 24) % 7 >= 5
    rate = d.peak_rate * day * np.where(weekend, d.weekend_factor, 1.0)
    rate = rate * (1 + d.growth_per_month) ** (h / HOURS_PER_MONTH)
    for b in d.bursts:
        rate = np.where((h >= b.at) & (h < b.at + b.hours), rate * b.factor, rate)
    return DemandSeries(h, np.ones_like(h), rate)


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    for n in names:
        if n in header:
            return header.index(n)
    return None


def _seconds(text: str) -> float:
    from planner.serving.trace import _seconds as parse

    return parse(text)


@lru_cache(maxsize=8)
def load_demand_csv(path_text: str) -> DemandSeries:
    """Read a demand CSV; every problem raises ``InputError`` as ``file:line column: problem``."""
    path = Path(path_text)
    rows = list(csv.reader(read_text(path, "demand file").splitlines()))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise InputError(f"{path}:1: demand file is empty (expected a header and at least one row)")
    header = [h.strip() for h in rows[0]]
    ti, hi, ri = _column(header, _TIME), _column(header, _HOUR), _column(header, _RATE)
    if ti is None and hi is None:
        raise InputError(f"{path}:1 timestamp: no time column (expected one of {', '.join(_TIME + _HOUR)}; "
                         f"found {', '.join(header)})")
    if ri is None:
        raise InputError(f"{path}:1 requests_per_s: no rate column (expected one of {', '.join(_RATE)}; "
                         f"found {', '.join(header)})")
    if len(rows) < 2:
        raise InputError(f"{path}:2: demand file has a header but no rows")
    cols = {"time": ti if ti is not None else hi, "rate": ri,
            "input": _column(header, _INPUT), "output": _column(header, _OUTPUT)}
    names = {k: header[i] for k, i in cols.items() if i is not None}
    values: dict[str, list[float]] = {k: [] for k in names}
    for lineno, row in enumerate(rows[1:], start=2):
        for key, i in cols.items():
            if i is None:
                continue
            values[key].append(_cell(row, i, key, names[key], path, lineno, hours=hi is not None and ti is None))
        t = values["time"]
        if len(t) > 1 and t[-1] <= t[-2]:
            what = "duplicated" if t[-1] == t[-2] else "earlier than the row before"
            raise InputError(f"{path}:{lineno} {names['time']}: time {row[cols['time']].strip()!r} is {what} "
                             "(rows must be sorted by time, one per period)")
    t = np.asarray(values["time"])
    hours = (t - t[0]) / (1.0 if hi is not None and ti is None else 3600.0)
    dur = np.diff(hours)
    dur = np.append(dur, dur[-1] if dur.size else 1.0)
    arr = {k: np.asarray(v) for k, v in values.items()}
    clock = 0.0 if hi is not None and ti is None else float(t[0] / 3600 % 24)
    return DemandSeries(hours, dur, arr["rate"], arr.get("input"), arr.get("output"), clock)


def _cell(row: list[str], i: int, key: str, name: str, path: Path, lineno: int, hours: bool) -> float:
    if i >= len(row) or not row[i].strip():
        raise InputError(f"{path}:{lineno} {name}: missing value")
    text = row[i].strip()
    try:
        v = float(text) if (key != "time" or hours) else _seconds(text)
    except ValueError:
        expected = "a number of hours" if key == "time" and hours else (
            "seconds or YYYY-MM-DD HH:MM:SS" if key == "time" else "a number")
        raise InputError(f"{path}:{lineno} {name}: expected {expected}, got {text!r}") from None
    if not math.isfinite(v):
        raise InputError(f"{path}:{lineno} {name}: expected a finite number, got {text!r}")
    if key == "rate" and v < 0:
        raise InputError(f"{path}:{lineno} {name}: requests/s must be >= 0, got {text}")
    if key in ("input", "output") and v <= 0:
        raise InputError(f"{path}:{lineno} {name}: mean tokens must be > 0, got {text}")
    return v


@lru_cache(maxsize=4)
def minute_factors(trace: str) -> np.ndarray:
    """Per-minute request counts of ``trace`` divided by their mean (full minutes only): the
    empirical fluctuation of the rate within an hour (mean 1)."""
    from planner.serving.trace import load_trace

    t = load_trace(trace)
    if not t.timed:
        raise InputError(f"trace {trace!r} has no timestamps (a length distribution): it gives no per-minute "
                         "rate fluctuation")
    a = t.arrival_s
    counts = np.bincount((a // 60).astype(int))[:-1].astype(float)   # drop the partial last minute
    if counts.size == 0 or counts.mean() <= 0:
        return np.ones(1)
    return counts / counts.mean()
