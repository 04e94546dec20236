"""Speed of the search (run: python benchmarks/bench_search.py).

Prints: roofline candidate evaluations per second (one evaluation = TTFT, TPOT and memory of one
(hardware, tp, batch, lengths) candidate; target >= 100,000/s), the bundled aggregated-vs-
disaggregated search of Llama-3.1-70B on H100+H200 and on all catalog hardware (in process and
as a CLI call with interpreter start-up), and `planner whatif` wall time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from _timing import best_of, machine_line

import planner
from planner.perf.estimate import evaluate
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.run import run_scenario
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    print(machine_line())
    m, hw = planner.model("llama-3.1-70b"), planner.hardware("h100-sxm")
    rng = np.random.default_rng(0)
    for n in (10_000, 100_000):
        tp = rng.choice([1, 2, 4, 8], n)
        batch, inp, out = rng.integers(1, 256, n), rng.integers(128, 8192, n), rng.integers(16, 2048, n)
        t = best_of(lambda tp=tp, batch=batch, inp=inp, out=out: evaluate(m, hw, Layout.of(tp, 1, 1), batch, inp, out,
                                                                         DTypes()))
        print(f"roofline: {n:7,d} candidates in {t:.3f} s = {n / t:12,.0f} evaluations/s")
    scn = load_scenario(ROOT / "scenarios/llama70b-slo-search.yaml")
    t = best_of(lambda: run_scenario(scn))
    print(f"llama70b-slo-search (H100 + H200, aggregated vs disaggregated): {t:.3f} s in process")
    everything = scn.model_copy(update={"search": scn.search.model_copy(update={"hardware": planner.list_hardware()})})
    t = best_of(lambda: run_scenario(everything))
    print(f"same search on all {len(planner.list_hardware())} catalog profiles: {t:.3f} s in process")
    for label, cmd in (
        ("planner plan llama70b-slo-search --json",
         ["plan", str(ROOT / "scenarios/llama70b-slo-search.yaml"), "--json"]),
        ("planner whatif (Llama-3.1-70B, H100, TP8)", ["whatif", "--model", "llama-3.1-70b", "--hardware", "h100-sxm",
                                                      "--tp", "8", "--batch", "16", "--input-len", "2048",
                                                      "--output-len", "256", "--json"]),
    ):
        t = best_of(lambda cmd=cmd: subprocess.run([sys.executable, "-m", "planner.cli", *cmd], check=True,
                                                   capture_output=True), repeat=5)
        print(f"{label}: {t:.2f} s wall including interpreter start-up")


if __name__ == "__main__":
    main()
