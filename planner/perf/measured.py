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
    counting: bool = True                               # False while rows already counted are recomputed


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


@contextlib.contextmanager
def uncounted() -> Iterator[None]:
    """Step times queried inside use the tables as usual but are not counted: for a search that
    recomputes rows it has already counted (its survivors, with their powers)."""
    use = _ACTIVE.get()
    was = use.counting if use is not None else True
    if use is not None:
        use.counting = False
    try:
        yield
    finally:
        if use is not None:
            use.counting = was


def active() -> bool:
    """Whether measured tables are in use here (a context variable: worker processes do not see
    them, so a search that would fan out runs in this process instead)."""
    return _ACTIVE.get() is not None


def table_for(hw_name: str) -> MeasuredTable | None:
    use = _ACTIVE.get()
    return None if use is None else use.tables.get(hw_name)


PhaseRoofline = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _phase_time(grid: Grid, q: list[np.ndarray], roof: Callable[[list[np.ndarray]], np.ndarray]):
    """Measured time of a pure phase at ``q``: table inside, roofline x edge ratio outside."""
    c = grid.clamp(q)
    inside = grid.inside(q)
    at_edge = grid.interpolate(c)
    t = np.where(inside, at_edge, roof(q) * at_edge / roof(c))
    return t, inside


def prefill_time(table: MeasuredTable, batch, tokens, roofline_prefill: PhaseRoofline):
    """(time, inside) of a prefill of ``batch`` prompts of ``tokens`` tokens;
    ``roofline_prefill(batch, tokens)`` is the roofline's time of the same step."""
    q = [np.asarray(batch, float), np.asarray(tokens, float), np.zeros_like(np.asarray(tokens, float))]
    return _phase_time(table.grids["prefill"], q, lambda x: roofline_prefill(x[0], x[1]))


def decode_time(table: MeasuredTable, batch, tokens_per_seq, context, roofline_decode: PhaseRoofline):
    """(time, inside) of a decode step of ``batch`` sequences over ``context`` tokens;
    ``roofline_decode(batch, context)`` is the roofline's time of the same step."""
    b = np.asarray(batch, float)
    q = [b, np.full_like(b, tokens_per_seq), np.asarray(context, float)]
    return _phase_time(table.grids["decode"], q, lambda x: roofline_decode(x[0], x[2]))


def _count(table: MeasuredTable, used: np.ndarray, inside: np.ndarray) -> None:
    use = _ACTIVE.get()
    if use is not None and use.counting:
        use.queries += int(used.sum())
        use.outside += int((used & ~inside).sum())
        if used.any():
            use.used.add(table.path)


def step_time(table: MeasuredTable, tp_match, n_decode, decode_ctx, prefill_tokens, prompt_len, tokens_per_seq,
              roofline_decode: PhaseRoofline, roofline_prefill: PhaseRoofline, mixed_roofline_s) -> np.ndarray:
    """An engine iteration's time with the table in place of the roofline where the layout matches;
    ``mixed_roofline_s`` is the roofline's time of this (possibly mixed) iteration."""
    n = np.asarray(n_decode, float)
    ctx = np.asarray(decode_ctx, float)
    pre = np.asarray(prefill_tokens, float)
    plen = np.maximum(np.asarray(prompt_len, float), 1.0)
    has_dec, has_pre = n > 0, pre > 0
    t_dec = r_dec = t_pre = r_pre = 0.0
    inside = np.ones(np.broadcast(n, ctx, pre, plen).shape, bool)
    if "decode" in table.grids:
        t_dec, ok = decode_time(table, np.maximum(n, 1.0), tokens_per_seq, ctx, roofline_decode)
        r_dec = roofline_decode(np.maximum(n, 1.0), ctx)
        inside = inside & (ok | ~has_dec)
    if "prefill" in table.grids:
        t_pre, ok = prefill_time(table, np.maximum(pre / plen, 1e-9), plen, roofline_prefill)
        r_pre = roofline_prefill(np.maximum(pre / plen, 1e-9), plen)
        inside = inside & (ok | ~has_pre)
    dec_ok = has_dec & ("decode" in table.grids)
    pre_ok = has_pre & ("prefill" in table.grids)
    mixed = np.asarray(mixed_roofline_s, float)
    ratio = (np.where(dec_ok, t_dec, 0) + np.where(pre_ok, t_pre, 0)) / np.maximum(
        np.where(dec_ok, r_dec, 0) + np.where(pre_ok, r_pre, 0), 1e-30)
    out = np.where(pre_ok & ~has_dec, t_pre, np.where(dec_ok & ~has_pre, t_dec,
                                                      np.where(dec_ok & pre_ok, mixed * ratio, mixed)))
    out = np.where(tp_match, out, mixed)
    _count(table, np.broadcast_to(tp_match & (dec_ok | pre_ok), out.shape), np.broadcast_to(inside, out.shape))
    return out


def batch_phase_times(table: MeasuredTable, tp_match, batch, input_len, output_len, tokens_per_seq: float,
                      tokens_per_step: float, roofline_decode: PhaseRoofline, roofline_prefill: PhaseRoofline,
                      ttft_s, tpot_s, simpson) -> tuple[np.ndarray, np.ndarray]:
    """``estimate``'s TTFT (one prefill of the whole batch) and TPOT (decode steps averaged over the
    output with the ``simpson`` (fraction, weight) rule the roofline path uses) from the table where
    the layout matches."""
    ttft, tpot = np.asarray(ttft_s, float), np.asarray(tpot_s, float)
    used = np.broadcast_to(np.asarray(tp_match), np.broadcast(ttft, tpot, tp_match).shape)
    if "prefill" in table.grids:
        t, ok = prefill_time(table, batch, input_len, roofline_prefill)
        ttft = np.where(tp_match, t, ttft)
        _count(table, np.broadcast_to(used, np.shape(t)), np.broadcast_to(ok, np.shape(t)))
    if "decode" in table.grids:
        acc = 0.0
        for frac, w in simpson:
            ctx = np.asarray(input_len, float) + frac * np.maximum(np.asarray(output_len, float) - 1, 0)
            t, ok = decode_time(table, batch, tokens_per_seq, ctx, roofline_decode)
            acc = acc + w * t
            _count(table, np.broadcast_to(used, np.shape(t)), np.broadcast_to(ok, np.shape(t)))
        tpot = np.where(tp_match, acc / tokens_per_step, tpot)
    return ttft, tpot


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
