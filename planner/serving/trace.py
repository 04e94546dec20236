"""Request traces: CSV files with an arrival time, input tokens and output tokens per row.

Column names of the Azure LLM inference traces (``TIMESTAMP``, ``ContextTokens``,
``GeneratedTokens``) and common alternatives are recognised. Timestamps may be seconds or
``YYYY-MM-DD HH:MM:SS[.fraction]``; they are returned as seconds from the first request.
Bundled traces are addressed by name (``azure-code-2023``, ``azure-conv-2023``).
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from planner.errors import InputError, unknown_name

TRACES_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"
_TIME = ("TIMESTAMP", "timestamp", "arrival_time", "arrival_s", "time")
_INPUT = ("ContextTokens", "input_tokens", "input_len", "prompt_tokens", "input")
_OUTPUT = ("GeneratedTokens", "output_tokens", "output_len", "completion_tokens", "output")


@dataclass(frozen=True)
class Trace:
    name: str
    arrival_s: np.ndarray   # seconds since the first request, sorted
    input_len: np.ndarray
    output_len: np.ndarray

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self.arrival_s) > 1 else 0.0

    @property
    def mean_rate(self) -> float:
        return (len(self.arrival_s) - 1) / self.duration_s if self.duration_s > 0 else float("nan")


def bundled_traces() -> list[str]:
    return sorted(p.stem for p in TRACES_DIR.glob("*.csv"))


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    base, _, frac = text.strip().partition(".")
    stamp = dt.datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return stamp.timestamp() + (float("0." + frac) if frac else 0.0)


def _column(header: list[str], names: tuple[str, ...], what: str, path: Path) -> int:
    for n in names:
        if n in header:
            return header.index(n)
    raise InputError(f"{path}:1: trace has no {what} column (looked for {', '.join(names)}; found {', '.join(header)})")


@lru_cache(maxsize=16)
def load_trace(name_or_path: str) -> Trace:
    """Load a bundled trace by name or a CSV file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        if name_or_path not in bundled_traces():
            raise unknown_name("trace", name_or_path, bundled_traces())
        path = TRACES_DIR / f"{name_or_path}.csv"
    from planner.yamlio import read_text

    lines = read_text(path, "trace").splitlines()
    rows = list(csv.reader(lines))
    if len(rows) < 2:
        raise InputError(f"{path}: trace needs a header and at least one row")
    header = [h.strip() for h in rows[0]]
    ti, ii, oi = (_column(header, names, what, path) for names, what in
                  ((_TIME, "timestamp"), (_INPUT, "input-token"), (_OUTPUT, "output-token")))
    t, inp, out = [], [], []
    for lineno, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            t.append(_seconds(row[ti]))
            inp.append(int(float(row[ii])))
            out.append(int(float(row[oi])))
        except (ValueError, IndexError, OverflowError):
            raise InputError(f"{path}:{lineno}: expected a timestamp and two token counts, got {','.join(row)!r}") \
                from None
        if not np.isfinite(t[-1]):
            raise InputError(f"{path}:{lineno}: timestamp {row[ti]!r} is not a finite number")
        if inp[-1] < 0 or out[-1] < 0:
            raise InputError(f"{path}:{lineno}: token counts must be >= 0, got {','.join(row)!r}")
    order = np.argsort(np.asarray(t), kind="stable")
    arrival = np.asarray(t)[order]
    return Trace(path.stem, arrival - arrival[0], np.asarray(inp)[order], np.asarray(out)[order])
