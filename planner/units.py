"""Units: constants and conversions at the edges.

Inside the planner everything is SI base units: seconds, bytes, FLOP, FLOP/s, bytes/s, watts,
joules, US dollars. Data files may write quantities with units, e.g. ``3.35 TB/s``, ``80 GB``,
``400 Gb/s``, ``989.4 TFLOPS``, ``700 W``, ``5 us``. Prefixes are **decimal** (k = 1e3, G = 1e9,
T = 1e12), as vendors quote them; binary prefixes (KiB, GiB, TiB) are accepted and mean 2**10k.
A lower-case ``b`` means bits (``Gb/s``), an upper-case ``B`` bytes (``GB/s``).
"""

from __future__ import annotations

import re

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
GIB = 2.0**30
HOUR_S = 3600.0

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "h": 3600.0}

# dimension -> regex of the unit part (after an optional prefix) and its SI factor
_UNITS: dict[str, dict[str, float]] = {
    "bytes": {"B": 1.0},
    "bytes/s": {"B/s": 1.0, "b/s": 0.125, "bps": 0.125},
    "flop/s": {"FLOPS": 1.0, "FLOP/s": 1.0, "OPS": 1.0, "OP/s": 1.0},
    "W": {"W": 1.0},
    "s": {},
    "usd/h": {"USD/h": 1.0, "$/h": 1.0},
    "usd": {"USD": 1.0, "$": 1.0},
    "1": {},
}

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def parse_quantity(text: str | int | float, dimension: str) -> float:
    """Return the SI value of ``text`` (a number or ``"<number> <unit>"``) in ``dimension``.

    A bare number is taken to be in SI already. Raises ``ValueError`` naming the expected unit.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a quantity in {dimension}, got {text!r}")
    if isinstance(text, (int, float)):
        return float(text)
    m = _NUMBER.match(str(text).replace(",", "").replace("_", ""))
    if not m:
        raise ValueError(f"expected a number with a unit of {dimension}, got {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    if not unit:
        return value
    if dimension == "s" and unit in _TIME:
        return value * _TIME[unit]
    for base, factor in _UNITS.get(dimension, {}).items():
        if unit.endswith(base):
            prefix = unit[: len(unit) - len(base)].strip()
            if prefix in _DECIMAL:
                return value * _DECIMAL[prefix] * factor
            if prefix in _BINARY:
                return value * _BINARY[prefix] * factor
    examples = {
        "bytes": "80 GB", "bytes/s": "3.35 TB/s or 400 Gb/s", "flop/s": "989.4 TFLOPS",
        "W": "700 W", "s": "5 us", "usd/h": "4.9 USD/h", "usd": "25000 USD", "1": "0.8",
    }
    raise ValueError(f"unit {unit!r} is not a unit of {dimension} (e.g. {examples.get(dimension, '')})")


MAX_DEGREE = 1 << 20
"""The largest parallel degree (devices per TP/EP/PP/CP group) the planner takes: a million
devices, far past any scale-up or scale-out domain, which keeps layout arithmetic (degrees times
each other and times token counts) inside 64-bit integers."""
