"""Small CSV tables users bring (load traces, measured step times): rows with line numbers and
checked numeric cells, errors as ``file:line column: what was expected`` (exit 2)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from planner.errors import InputError
from planner.yamlio import read_text


def read_rows(path: Path, what: str) -> tuple[int, list[str], list[tuple[int, list[str]]]]:
    """(header line number, header cells, [(line number, cells)]) of a CSV; blank lines and lines
    starting with ``#`` are skipped."""
    text = read_text(path, f"the {what}")
    rows = [(n, [c.strip() for c in next(csv.reader([line]))])
            for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip().startswith("#")]
    if not rows:
        raise InputError(f"{path}:1: empty {what}; expected a header line")
    (head_line, header), body = rows[0], rows[1:]
    for n, cells in body:
        if len(cells) < len(header):
            raise InputError(f"{path}:{n}: expected {len(header)} columns ({', '.join(header)}), got {len(cells)}")
    return head_line, header, body


def number(text: str, where: str, what: str, positive: bool = False) -> float:
    """A finite number >= 0 (> 0 if ``positive``) or an ``InputError`` saying ``where: expected what``."""
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"{where}: expected {what}, got {text!r}") from None
    if not math.isfinite(v) or v < 0 or (positive and v <= 0):
        raise InputError(f"{where}: expected {what}, got {text!r}")
    return v
