"""Measured step times in place of the roofline, where a table covers the query.

A table (CSV, one per hardware, like SplitwiseSim's ``perf_model.csv``) lists measured forward
step times of the scenario's model on that hardware:

    phase,batch,tokens,context,seconds        # optional column: tp (one value for the whole file)
    prefill,1,512,0,0.0412                    # 1 prompt of 512 tokens
    decode,32,1,1024,0.0219                   # 32 sequences, 1 new token each, 1024 tokens of context

* ``phase``: ``prefill`` (``batch`` prompts of ``tokens`` tokens each) or ``decode`` (``batch``
  sequences each adding ``tokens`` tokens, usually 1, over ``context`` tokens of KV);
* each phase's rows form a full grid over its distinct ``batch`` x ``tokens`` x ``context`` values
  (an axis with one value is held constant); ``seconds`` > 0.

Inside the grid the time is multilinear interpolation of the table, so the table's own points come
back exactly. Outside, it is the roofline scaled to agree at the table's edge:
``t(q) = R(q) x T(c(q)) / R(c(q))`` with ``c(q)`` the query clamped into the grid and ``R`` the
roofline - one formula that reduces to ``T(q)`` inside and is continuous at the edge. An iteration
mixing decodes and a prefill chunk takes the roofline time of the mix scaled by the ratio of the
two phases' measured to roofline times.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.csvio import number, read_rows
from planner.errors import InputError

_COLUMNS = ("phase", "batch", "tokens", "context", "seconds")
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class Grid:
    """One phase's measured times on a full (batch, tokens, context) grid."""

    axes: tuple[np.ndarray, np.ndarray, np.ndarray]
    seconds: np.ndarray                     # (len(batch), len(tokens), len(context))

    def clamp(self, q: list[np.ndarray]) -> list[np.ndarray]:
        return [np.clip(x, a[0], a[-1]) for x, a in zip(q, self.axes, strict=True)]

    def inside(self, q: list[np.ndarray]) -> np.ndarray:
        ok = True
        for x, a in zip(q, self.axes, strict=True):
            ok = ok & (x >= a[0] - 1e-9) & (x <= a[-1] + 1e-9)
        return np.asarray(ok)

    def interpolate(self, q: list[np.ndarray]) -> np.ndarray:
        """Multilinear interpolation at points already inside the grid (arrays broadcast)."""
        q = np.broadcast_arrays(*[np.asarray(x, float) for x in q])
        idx, frac = [], []
        for x, a in zip(q, self.axes, strict=True):
            if a.size == 1:
                idx.append(np.zeros(x.shape, int))
                frac.append(np.zeros(x.shape))
                continue
            i = np.clip(np.searchsorted(a, x, side="right") - 1, 0, a.size - 2)
            idx.append(i)
            frac.append((x - a[i]) / (a[i + 1] - a[i]))
        out = np.zeros(q[0].shape)
        for corner in range(8):
            bits = [(corner >> k) & 1 for k in range(3)]
            if any(b and a.size == 1 for b, a in zip(bits, self.axes, strict=True)):
                continue
            w = np.ones(q[0].shape)
            for b, f in zip(bits, frac, strict=True):
                w = w * (f if b else 1 - f)
            out = out + w * self.seconds[idx[0] + bits[0], idx[1] + bits[1], idx[2] + bits[2]]
        return out


@dataclass(frozen=True)
class MeasuredTable:
    path: str
    grids: dict[str, Grid]
    tp: int | None = None                   # the layout it was measured on (None: any)

    def points(self, phase: str) -> int:
        g = self.grids.get(phase)
        return 0 if g is None else g.seconds.size


def load_table(path: str | Path) -> MeasuredTable:
    """Read a measured step-time CSV; errors say ``file:line column: what was expected`` (exit 2)."""
    path = Path(path)
    head_line, header, body = read_rows(path, "measured step-time table")
    missing = [c for c in _COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}:{head_line}: header: expected columns {', '.join(_COLUMNS)} (and optionally tp); "
                         f"missing {', '.join(missing)}")
    col = {c: header.index(c) for c in header}
    data: dict[str, dict[tuple[float, float, float], float]] = {p: {} for p in PHASES}
    tps = set()
    for n, cells in body:
        phase = cells[col["phase"]]
        if phase not in PHASES:
            raise InputError(f"{path}:{n} phase: expected prefill or decode, got {phase!r}")
        key = tuple(number(cells[col[c]], f"{path}:{n} {c}", "a number >= 0") for c in ("batch", "tokens", "context"))
        if key in data[phase]:
            raise InputError(f"{path}:{n}: {phase} point batch={key[0]:g} tokens={key[1]:g} context={key[2]:g} "
                             f"appears twice")
        data[phase][key] = number(cells[col["seconds"]], f"{path}:{n} seconds", "a time > 0 (s)", positive=True)
        if "tp" in col:
            tps.add(int(number(cells[col["tp"]], f"{path}:{n} tp", "a positive integer", positive=True)))
    if len(tps) > 1:
        raise InputError(f"{path}: tp: one table holds one layout, got tp {sorted(tps)}")
    grids = {p: _grid(path, p, pts) for p, pts in data.items() if pts}
    if not grids:
        raise InputError(f"{path}:{head_line}: the table has no prefill or decode rows")
    return MeasuredTable(str(path), grids, tps.pop() if tps else None)


def _grid(path: Path, phase: str, pts: dict[tuple[float, float, float], float]) -> Grid:
    axes = tuple(np.array(sorted({k[d] for k in pts})) for d in range(3))
    sec = np.full(tuple(a.size for a in axes), np.nan)
    for (b, t, c), s in pts.items():
        sec[np.searchsorted(axes[0], b), np.searchsorted(axes[1], t), np.searchsorted(axes[2], c)] = s
    if np.isnan(sec).any():
        i, j, k = (int(v[0]) for v in np.nonzero(np.isnan(sec)))
        raise InputError(f"{path}: {phase} rows must form a full grid over batch x tokens x context; missing "
                         f"batch={axes[0][i]:g} tokens={axes[1][j]:g} context={axes[2][k]:g}")
    return Grid(axes, sec)  # type: ignore[arg-type]


@dataclass
class _Use:
    tables: dict[str, MeasuredTable]
    queries: int = 0
    outside: int = 0
    used: set[str] = field(default_factory=set)         # paths of the tables that timed a step
    notes: list[str] = field(default_factory=list)


_ACTIVE: contextvars.ContextVar[_Use | None] = contextvars.ContextVar("measured_tables", default=None)


@contextlib.contextmanager
def tables_in_use(tables: dict[str, MeasuredTable]) -> Iterator[_Use]:
    """Make ``tables`` (hardware name -> table) replace the roofline inside the block; the yielded
    object counts the queried step times and how many fell outside the tables."""
    use = _Use(dict(tables))
    token = _ACTIVE.set(use)
    try:
        yield use
    finally:
        _ACTIVE.reset(token)


def table_for(hw_name: str) -> MeasuredTable | None:
    use = _ACTIVE.get()
    return None if use is None else use.tables.get(hw_name)


Roofline = Callable[[object, object, object, object], np.ndarray]


def _phase_time(grid: Grid, q: list[np.ndarray], roof: Callable[[list[np.ndarray]], np.ndarray]):
    """Measured time of a pure phase at ``q``: table inside, roofline x edge ratio outside."""
    c = grid.clamp(q)
    inside = grid.inside(q)
    at_edge = grid.interpolate(c)
    t = np.where(inside, at_edge, roof(q) * at_edge / roof(c))
    return t, inside


def step_time(table: MeasuredTable, tp_match, n_decode, decode_ctx, prefill_tokens, prompt_len, tokens_per_seq,
              roofline: Roofline, mixed_roofline_s) -> np.ndarray:
    """The iteration's time with the table in place of the roofline where the layout matches.

    ``roofline(n_decode, decode_ctx, prefill_tokens, prompt_len)`` is the roofline iteration time;
    ``mixed_roofline_s`` its value for this iteration."""
    n = np.asarray(n_decode, float)
    ctx = np.asarray(decode_ctx, float)
    pre = np.asarray(prefill_tokens, float)
    plen = np.maximum(np.asarray(prompt_len, float), 1.0)
    has_dec, has_pre = n > 0, pre > 0
    t_dec = r_dec = t_pre = r_pre = 0.0
    inside = np.ones(np.broadcast(n, ctx, pre, plen).shape, bool)
    if "decode" in table.grids:
        q = [np.maximum(n, 1.0), np.full_like(n, tokens_per_seq), ctx]
        t_dec, ok = _phase_time(table.grids["decode"], q, lambda x: roofline(x[0], x[2], 0.0, 1.0))
        r_dec = roofline(q[0], q[2], 0.0, 1.0)
        inside = inside & (ok | ~has_dec)
    if "prefill" in table.grids:
        q = [np.maximum(pre / plen, 1e-9), plen, np.zeros_like(plen)]
        t_pre, ok = _phase_time(table.grids["prefill"], q, lambda x: roofline(0.0, 16.0, x[0] * x[1], x[1]))
        r_pre = roofline(0.0, 16.0, q[0] * q[1], q[1])
        inside = inside & (ok | ~has_pre)
    dec_ok = has_dec & ("decode" in table.grids)
    pre_ok = has_pre & ("prefill" in table.grids)
    mixed = np.asarray(mixed_roofline_s, float)
    ratio = (np.where(dec_ok, t_dec, 0) + np.where(pre_ok, t_pre, 0)) / np.maximum(
        np.where(dec_ok, r_dec, 0) + np.where(pre_ok, r_pre, 0), 1e-30)
    only_pre = pre_ok & ~has_dec
    only_dec = dec_ok & ~has_pre
    both = dec_ok & pre_ok
    out = np.where(only_pre, t_pre, np.where(only_dec, t_dec, np.where(both, mixed * ratio, mixed)))
    out = np.where(tp_match, out, mixed)
    use = _ACTIVE.get()
    if use is not None:
        used = np.broadcast_to(tp_match & (dec_ok | pre_ok), out.shape)
        use.queries += int(used.sum())
        if used.any():
            use.used.add(table.path)
        use.outside += int((used & ~np.broadcast_to(inside, out.shape)).sum())
    return out


def usage_notes(use: _Use) -> list[str]:
    """What a result should say about the tables it used."""
    notes = []
    for hw, t in use.tables.items():
        layout = f" at tp{t.tp}" if t.tp else ""
        if t.path not in use.used:
            notes.append(f"{hw}{layout}: the measured table {t.path} timed no step (no candidate ran on {hw}"
                         f"{layout} with pp 1): the roofline was used throughout")
            continue
        notes.append(f"{hw}{layout}: measured step times from {t.path} ({t.points('prefill')} prefill and "
                     f"{t.points('decode')} decode points) replace the roofline where they cover the query")
    if use.queries:
        share = use.outside / use.queries
        notes.append(f"{share:.0%} of the {use.queries:,} step times queried fell outside the measured tables and use "
                     f"the roofline scaled to agree at the table's edge")
    return notes
