"""Presentation: rich tables and JSON for the CLI (this module: the console, JSON and the shared
table helpers), one module per view - ``plan`` (every design's plan), ``whatif``, ``validation``,
``horizon``, ``sessions`` - with ``export`` (CSV), ``plots`` / ``horizon_plot`` (matplotlib, an
optional extra) and ``outputs`` (the output files a plan will write, checked before it runs).
No physics here."""

from __future__ import annotations

import json
import math
import sys
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=2)
def _console(stderr: bool):
    from rich.console import Console  # rich loads only when something is drawn (fast --json)

    stream = sys.stderr if stderr else sys.stdout
    # wide enough for the per-operator tables when piped (rich defaults to 80 columns)
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 150)


class _Lazy:
    def __init__(self, stderr: bool):
        self._stderr = stderr

    def __getattr__(self, name: str):
        return getattr(_console(self._stderr), name)


out = _Lazy(False)
err = _Lazy(True)


def print_json(data: Any) -> None:
    """One JSON object on stdout and nothing else. NaN and infinities (no value, unbounded)
    become ``null``: they are not JSON, and strict parsers reject them."""
    sys.stdout.write(json.dumps(_finite(data), indent=2, default=str, allow_nan=False) + "\n")


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def si(value: float, unit: str, digits: int = 3) -> str:
    """``1.234e12, 'B/s'`` -> ``1.23 TB/s`` (decimal prefixes, as vendors quote)."""
    if value == 0:
        return f"0 {unit}"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    for factor, prefix in ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def figure_table(title: str, rows: list[tuple[str, str, str, str]]):
    """A catalog entry's sourced figures: ``(figure path, value as shown, source, note)`` per row
    (``hardware show``, ``frameworks show``)."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("figure", "value (SI)", "source", "note"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


def key_value_table(title: str, rows: list[tuple[str, str]]):
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for k, v in rows:
        table.add_row(k, v)
    return table
