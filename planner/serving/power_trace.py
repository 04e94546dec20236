"""A measured load or power time series from a CSV file, replayed instead of a synthetic shape.

Format (one header line, then one row per sample; lines starting with ``#`` are comments):

    time_s,requests_per_s        # or: time_s,power_w
    0,812.5
    1,790.0

* ``time_s``: seconds, strictly increasing (the first sample is the trace's start);
* exactly one of ``requests_per_s`` (the load offered to the whole row, requests/s) or
  ``power_w`` (the row's measured power, W), finite and >= 0. Other columns are ignored.

``resample`` puts the series on the simulator's step grid by linear interpolation between samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.csvio import number, read_rows
from planner.errors import InputError

KINDS = ("requests_per_s", "power_w")


@dataclass(frozen=True)
class LoadTrace:
    path: str
    kind: str                  # "requests_per_s" or "power_w"
    time_s: np.ndarray         # from 0
    value: np.ndarray

    @property
    def duration_s(self) -> float:
        return float(self.time_s[-1])

    def resample(self, step_s: float) -> np.ndarray:
        """Values at ``0, step_s, 2 step_s, ...`` up to the trace's end (linear interpolation)."""
        grid = np.arange(int(self.duration_s // step_s) + 1) * step_s
        return np.interp(grid, self.time_s, self.value)


def load_trace(path: str | Path) -> LoadTrace:
    """Read and check a trace; errors say ``file:line column: what was expected`` (exit 2)."""
    path = Path(path)
    head_line, header, body = read_rows(path, "load trace")
    kinds = [k for k in KINDS if k in header]
    if "time_s" not in header or len(kinds) != 1:
        raise InputError(f"{path}:{head_line}: header: expected a 'time_s' column and exactly one of "
                         f"{' or '.join(KINDS)}, got {', '.join(header)}")
    it, iv = header.index("time_s"), header.index(kinds[0])
    times, values = [], []
    for n, cells in body:
        t = number(cells[it], f"{path}:{n} time_s", "seconds >= 0")
        if times and t <= times[-1]:
            raise InputError(f"{path}:{n} time_s: expected a time after {times[-1]:g} s (strictly increasing), "
                             f"got {t:g}")
        times.append(t)
        values.append(number(cells[iv], f"{path}:{n} {kinds[0]}", "a finite number >= 0"))
    if len(times) < 2:
        last = body[-1][0] if body else head_line
        raise InputError(f"{path}:{last}: a trace needs at least two samples")
    t = np.array(times)
    return LoadTrace(str(path), kinds[0], t - t[0], np.array(values))
