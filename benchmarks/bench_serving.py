"""Speed of the serving evaluators (run: python benchmarks/bench_serving.py).

Prints: analytic candidate evaluations per second (one candidate = a layout's whole steady-state
curve of queueing.GRID = 48 load points), simulated requests per second (100k requests), and wall times of
`planner whatif` and `planner plan` including interpreter start-up.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _timing import best_of, machine_line

import planner
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving.batching import Engine
from planner.serving.queueing import GRID, serving_curve
from planner.serving.simulate import simulate
from planner.serving.workload import Workload, length_stats

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    print(machine_line())
    m, hw = planner.model("llama-3.1-70b"), planner.hardware("h100-sxm")
    w = Workload(rate=10, trace="azure-conv-2023")
    stats = length_stats(w)
    for n in (64, 1024, 8192):
        tp = np.resize(np.array([1, 2, 4, 8]), n)
        lay = Layout.of(tp, 1, 1)
        t = best_of(lambda lay=lay: serving_curve(m, hw, lay, DTypes(), Engine(), stats))
        print(f"analytic: {n:5d} candidates in {t * 1e3:7.1f} ms = {n / t:10,.0f} candidates/s "
              f"({n * GRID / t:12,.0f} load points/s)")
    lay = Layout.of(8, 1, 1)
    from planner.serving.queueing import serving_curve as sc
    c = sc(m, hw, lay, DTypes(), Engine(), stats)
    rate = 0.6 * np.nanmax(c.rate) * 4
    a, i, o = w.with_rate(rate).sample(100_000, 1)
    t = time.perf_counter()
    r = simulate(m, hw, lay, DTypes(), Engine(), a, i, o, instances=4, seed=1)
    t = time.perf_counter() - t
    print(f"simulator: 100,000 requests (4 instances at 60% load, {r.iterations:,} iterations) in {t:.2f} s "
          f"= {100_000 / t:,.0f} requests/s")
    for label, cmd in (
        ("planner whatif", ["whatif", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "8", "--batch",
                            "16", "--input-len", "2048", "--output-len", "256", "--json"]),
        ("planner plan chat-h100 (with 20k-request simulator check)",
         ["plan", str(ROOT / "scenarios/chat-h100.yaml"), "--json"]),
    ):
        t = best_of(lambda cmd=cmd: subprocess.run([sys.executable, "-m", "planner.cli", *cmd], check=True,
                                                   capture_output=True))
        print(f"{label}: {t:.2f} s wall (incl. interpreter start-up)")


if __name__ == "__main__":
    main()
