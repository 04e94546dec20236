"""Session traces: one CSV row per turn, with the session it belongs to.

Columns (header names; extra columns are ignored):

* ``session_id`` - any text naming the session (required, non-empty);
* ``timestamp`` - the turn's arrival, seconds (any origin), non-decreasing within a session;
* ``input_tokens`` - the turn's whole prompt (system prompt + history + new tokens), >= 0;
* ``output_tokens`` - tokens generated, >= 0.

A turn's reusable prefix is its session's previous prompt plus the kept share of the previous
answer, when the prompt still starts with it (the prompt is at least that long); a shorter prompt
means the history was rewritten (compacted), and only the system prompt is reusable. Errors name
the file, line and column (1-based) of the offending field.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from planner.errors import InputError
from planner.yamlio import read_text

COLUMNS = ("session_id", "timestamp", "input_tokens", "output_tokens")


def _fields(line: str) -> tuple[list[str], list[int]]:
    """Comma-separated fields and the 1-based column each starts at (no quoting in these files)."""
    parts = line.split(",")
    cols, at = [], 1
    for p in parts:
        cols.append(at)
        at += len(p) + 1
    return [p.strip() for p in parts], cols


@lru_cache(maxsize=8)
def load_session_trace(path_text: str, system_prompt: int = 0, output_kept: float = 1.0):
    """Parse a session trace into a ``SessionStream`` (turns sorted by arrival)."""
    from planner.serving.sessions import SessionStream

    path = Path(path_text)
    lines = read_text(path, "session trace").splitlines()
    if not lines:
        raise InputError(f"{path}:1:1: empty session trace; expected a header {','.join(COLUMNS)}")
    header, hcols = _fields(lines[0])
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}:1:1: session trace header lacks {', '.join(missing)} (has {', '.join(header)})")
    idx = [header.index(c) for c in COLUMNS]
    sid, t, inp, out, last_t = [], [], [], [], {}
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        f, cols = _fields(line)
        if len(f) < len(header):
            raise InputError(f"{path}:{lineno}:{len(line) + 1}: expected {len(header)} fields, got {len(f)}")
        s = f[idx[0]]
        if not s:
            raise InputError(f"{path}:{lineno}:{cols[idx[0]]}: session_id is empty")
        ts = _number(f[idx[1]], path, lineno, cols[idx[1]], "timestamp")
        i = _number(f[idx[2]], path, lineno, cols[idx[2]], "input_tokens", nonnegative=True)
        o = _number(f[idx[3]], path, lineno, cols[idx[3]], "output_tokens", nonnegative=True)
        if s in last_t and ts < last_t[s]:
            raise InputError(f"{path}:{lineno}:{cols[idx[1]]}: timestamp {ts:g} is earlier than the previous turn "
                             f"of session {s!r} ({last_t[s]:g}); turns of a session must not go back in time")
        last_t[s] = ts
        sid.append(s)
        t.append(ts)
        inp.append(i)
        out.append(o)
    if not sid:
        raise InputError(f"{path}:2:1: session trace has no turns")
    return _stream(np.asarray(sid), np.asarray(t), np.asarray(inp), np.asarray(out), system_prompt, output_kept,
                   SessionStream)


def _number(text: str, path: Path, line: int, col: int, what: str, nonnegative: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"{path}:{line}:{col}: {what} must be a number, got {text!r}") from None
    if not np.isfinite(v) or (nonnegative and v < 0):
        raise InputError(f"{path}:{line}:{col}: {what} must be a finite number >= 0, got {text!r}")
    return v


def _stream(sid, t, inp, out, system, kept, cls):
    """Group turns by session (stable in time), derive reusable prefixes and gaps."""
    _, code = np.unique(sid, return_inverse=True)
    order = np.lexsort((t, code))
    code, t, inp, out = code[order], t[order], inp[order], out[order]
    first = np.append(True, code[1:] != code[:-1])
    prev_ctx = np.append(0.0, inp[:-1] + kept * out[:-1])
    extends = ~first & (inp >= prev_ctx)
    reuse = np.where(extends, prev_ctx, np.minimum(system, inp))
    history_after = inp + kept * out - system
    last = np.append(first[1:], True)
    gap_next = np.where(last, np.inf, np.append(t[1:], np.inf) - t)
    turn = np.arange(len(code)) - np.repeat(np.flatnonzero(first), np.diff(np.append(np.flatnonzero(first), len(code))))
    by_time = np.argsort(t, kind="stable")
    return cls(session=code[by_time], turn=turn[by_time], arrival_s=t[by_time] - t.min(),
               input_len=np.maximum(inp[by_time], 1).round().astype(np.int64),
               output_len=np.maximum(out[by_time], 1).round().astype(np.int64),
               reuse=reuse[by_time].round().astype(np.int64),
               history_after=np.maximum(history_after[by_time], 0).round().astype(np.int64),
               gap_next_s=gap_next[by_time], system_prompt=int(system))
