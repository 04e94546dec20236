"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable

import numpy as np


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Fastest of `repeat` wall-clock runs of fn, in seconds (the least disturbed by other load)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def machine_line() -> str:
    """What the numbers were measured on."""
    return (f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {np.__version__}")
