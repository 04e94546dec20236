"""Request traces: CSV files with an arrival time, input tokens and output tokens per row.

Column names of the Azure LLM inference traces (``TIMESTAMP``, ``ContextTokens``,
``GeneratedTokens``) and common alternatives are recognised. Timestamps may be seconds or
``YYYY-MM-DD HH:MM:SS[.fraction]``; they are returned as seconds from the first request. A file
without a timestamp column is a length distribution (a benchmark dataset's per-sample token
counts): its arrival times are NaN, and a workload using it must give its own rate and arrival
process. Bundled traces are addressed by name (``azure-code-2023``, ``azure-conv-2023``, the
MLPerf datasets' ``mlperf-*``).
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
_INPUT = ("ContextTokens", "input_tokens", "input_len", "input_length", "prompt_tokens", "input")
_OUTPUT = ("GeneratedTokens", "output_tokens", "output_len", "output_length", "completion_tokens", "output")


@dataclass(frozen=True)
class Trace:
    name: str
    arrival_s: np.ndarray   # seconds since the first request, sorted
    input_len: np.ndarray
    output_len: np.ndarray

    @property
    def timed(self) -> bool:
        """Whether the file gave arrival times (else it is a length distribution only)."""
        return bool(np.isfinite(self.arrival_s).all())

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
    """Load a bundled trace by name or a CSV file by path. The columns are parsed in C (numpy's CSV
    reader, vectorized float and ``datetime64`` conversion); only a file that fails to parse is
    read again row by row, to name the offending line."""
    path = Path(name_or_path)
    if not path.suffix:
        if name_or_path not in bundled_traces():
            raise unknown_name("trace", name_or_path, bundled_traces())
        path = TRACES_DIR / f"{name_or_path}.csv"
    from planner.yamlio import read_text

    text = read_text(path, "trace")            # UTF-8 text, or an error naming the file and line
    header = [h.strip() for h in next(csv.reader(text.splitlines()[:1]), [])]
    if not header:
        raise InputError(f"{path}: trace needs a header and at least one row")
    timed = any(n in header for n in _TIME)     # without: a length distribution, arrival times NaN
    cols = [_column(header, names, what, path) for names, what in
            ((_TIME, "timestamp"), (_INPUT, "input-token"), (_OUTPUT, "output-token")) if timed or names is not _TIME]
    try:
        t, inp, out = _parse_columns(path, cols)
    except ValueError:
        t, inp, out = _parse_rows(path, cols)      # slow path: find and name the bad line
    if inp.size == 0:
        raise InputError(f"{path}: trace needs a header and at least one row")
    if not timed:
        return Trace(path.stem, np.full(inp.size, np.nan), inp, out)
    if not np.isfinite(t).all():
        raise InputError(f"{path}:{int(np.flatnonzero(~np.isfinite(t))[0]) + 2}: timestamp is not a finite number")
    if (inp < 0).any() or (out < 0).any():
        bad = int(np.flatnonzero((inp < 0) | (out < 0))[0])
        raise InputError(f"{path}:{bad + 2}: token counts must be >= 0")
    order = np.argsort(t, kind="stable")
    arrival = t[order]
    return Trace(path.stem, arrival - arrival[0], inp[order], out[order])


def _parse_columns(path: Path, cols: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds, input tokens, output tokens) by numpy's C reader; ``ValueError`` on a bad cell.
    ``cols``: the timestamp, input and output columns, or the last two alone (seconds then empty)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # an empty file: caught below as no rows
        raw = np.loadtxt(path, delimiter=",", dtype=str, skiprows=1, usecols=cols, ndmin=2, quotechar='"',
                         encoding="utf-8")
    inp, out = (np.char.strip(raw[:, k]) for k in range(len(cols) - 2, len(cols)))
    counts = [c.astype(float) for c in (inp, out)]
    if not all(np.isfinite(c).all() for c in counts):
        raise ValueError("a token count is not a finite number")    # the slow path names its line
    if len(cols) == 2:
        return np.empty(0), counts[0].astype(np.int64), counts[1].astype(np.int64)
    stamps = np.char.strip(raw[:, 0])
    try:
        seconds = stamps.astype(float)
    except ValueError:
        ns = stamps.astype("datetime64[ns]").astype(np.int64)    # 'YYYY-MM-DD HH:MM:SS[.fraction]', UTC
        if (ns == np.iinfo(np.int64).min).any():                 # NaT: an empty cell
            raise ValueError("empty timestamp") from None
        seconds = (ns - ns.min()) / 1e9                           # from the first; only differences matter
    return seconds, counts[0].astype(np.int64), counts[1].astype(np.int64)


def _parse_rows(path: Path, cols: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row-by-row parse, raising ``InputError`` at the first line that is not a timestamp (where
    ``cols`` has one) and two token counts."""
    ti, ii, oi = cols if len(cols) == 3 else (None, *cols)
    from planner.yamlio import read_text

    rows = list(csv.reader(read_text(path, "trace").splitlines()))
    t, inp, out = [], [], []
    expected = "a timestamp and two token counts" if ti is not None else "two token counts"
    for lineno, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            if ti is not None:
                t.append(_seconds(row[ti]))
            inp.append(int(float(row[ii])))
            out.append(int(float(row[oi])))
        except (ValueError, IndexError, OverflowError):     # "inf" parses as a float, not as a count
            raise InputError(f"{path}:{lineno}: expected {expected}, got {','.join(row)!r}") from None
    return np.asarray(t, dtype=float), np.asarray(inp, dtype=np.int64), np.asarray(out, dtype=np.int64)
