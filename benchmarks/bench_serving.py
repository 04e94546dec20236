"""Speed of the serving evaluators (run: python benchmarks/bench_serving.py).

Prints: analytic candidate evaluations per second (one candidate = a layout's whole steady-state
curve of queueing.GRID = 48 load points); simulated requests per CPU-second of the colocated and the
disaggregated (Splitwise pools) simulators, with the reference Python loop and, when numba is
installed (``pip install "planner[fast]"``), the compiled kernels; numba's compile and cache-load
time; and wall times of `planner whatif`, `planner plan` and `planner throughput --replay` including
interpreter start-up.
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
from planner.serving.sim_kernel import numba_available
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
    rate = 0.6 * np.nanmax(serving_curve(m, hw, lay, DTypes(), Engine(), stats).rate)   # per instance
    loops = ("python", "numba") if numba_available() else ("python",)
    for sim in loops:
        for n, k in ((100_000, 4), (1_000_000, 40)) if sim == "numba" else ((100_000, 4),):
            a, i, o = w.with_rate(rate * k).sample(n, 1)
            r, cpu, wall = _timed(lambda a=a, i=i, o=o, k=k, sim=sim: simulate(
                m, hw, lay, DTypes(), Engine(simulator=sim), a, i, o, instances=k, seed=1), 3 if sim == "numba" else 1)
            print(f"simulator colocated [{sim}]: {n:,} requests ({k} x Llama-3.1-70B TP8 H100 at 60% load, "
                  f"{r.iterations:,} iterations) in {cpu:.2f} CPU-s ({wall:.2f} s wall) = {n / cpu:,.0f} requests "
                  "per CPU-second")
    for sim in loops:
        for n in (100_000, 1_000_000) if sim == "numba" else (100_000,):
            r, cpu, wall, label = _pools(sim, n)
            print(f"simulator disaggregated [{sim}]: {n:,} requests ({label}, {r.iterations:,} token-machine "
                  f"iterations) in {cpu:.2f} CPU-s ({wall:.2f} s wall) = {n / cpu:,.0f} requests per CPU-second")
    if numba_available():
        print(f"numba: first simulation in a fresh process {_fresh_process(cold=True):.1f} s wall with an empty "
              f"compile cache, {_fresh_process(cold=False):.1f} s with it (interpreter start-up included)")
    for label, cmd in (
        ("planner whatif", ["whatif", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "8", "--batch",
                            "16", "--input-len", "2048", "--output-len", "256", "--json"]),
        ("planner plan chat-h100 (with 20k-request simulator check)",
         ["plan", str(ROOT / "scenarios/chat-h100.yaml"), "--json"]),
        ("planner throughput --replay (P99 SLO load by replayed runs, Llama-3.1-70B TP8)",
         ["throughput", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "8", "-i", "2048", "-o", "256",
          "--ttft-p99", "1.0", "--tpot-p99", "0.05", "--replay", "--json"]),
    ):
        t = best_of(lambda cmd=cmd: subprocess.run([sys.executable, "-m", "planner.cli", *cmd], check=True,
                                                   capture_output=True))
        print(f"{label}: {t:.2f} s wall (incl. interpreter start-up)")


def _timed(fn, repeat: int):
    """(result, CPU seconds, wall seconds) of the best of ``repeat`` runs (after a warm-up call, if
    more than one: the compiled kernels' cache load)."""
    if repeat > 1:
        fn()
    best = None
    for _ in range(repeat):
        c, t = time.process_time(), time.perf_counter()
        r = fn()
        c, t = time.process_time() - c, time.perf_counter() - t
        best = (r, c, t) if best is None or c < best[1] else best
    return best


def _pools(sim: str, n: int):
    """Splitwise pools: 60 prompt + 20 token H100s (Llama-3.1-8B TP1) at 80% of the design's
    analytic capacity, JSQ both ways, a 5 ms exposed KV transfer."""
    from planner.designs.splitwise import Candidate, Pool, SplitwiseSpec, evaluate_splitwise
    from planner.serving.simulate_pools import Machine, simulate_pools
    from planner.serving.slo import SLO, Target

    m, hw = planner.model("llama-3.1-8b"), planner.hardware("h100-sxm")
    w = Workload(rate=1.0, trace="azure-conv-2023")
    d = Candidate(name="60P+20T", prompt=Pool(hardware="h100-sxm", tp=1, count=60),
                  token=Pool(hardware="h100-sxm", tp=1, count=20))
    slo = SLO(ttft_s=Target(p90=1.0), tpot_s=Target(p90=0.03))
    cap = evaluate_splitwise(m, d, SplitwiseSpec(), w, slo, Engine(), DTypes(), {}).max_rate
    a, i, o = w.with_rate(0.8 * cap).sample(n, 1)
    one = Machine(hw, Layout.of(1, 1, 1), 0)
    r, cpu, wall = _timed(lambda: simulate_pools(m, DTypes(), Engine(simulator=sim), a, i, o,
                                                 lambda kp, kt, tok, pre: np.full(len(tok), 0.005), [one] * 60,
                                                 [one] * 20), 3 if sim == "numba" else 1)
    return r, cpu, wall, "60 prompt + 20 token Llama-3.1-8B H100s at 80% load"


def _fresh_process(cold: bool) -> float:
    """Wall time of a 2,000-request simulation in a new interpreter (numba compile or cache load)."""
    import os
    import tempfile

    code = ("import planner; from planner.perf.ops import DTypes; from planner.perf.parallel import Layout; "
            "from planner.serving.batching import Engine; from planner.serving.simulate import simulate; "
            "from planner.serving.workload import Workload; "
            "a, i, o = Workload(rate=5.0, trace='azure-conv-2023').sample(2000, 1); "
            "simulate(planner.model('llama-3.1-70b'), planner.hardware('h100-sxm'), Layout.of(8, 1, 1), DTypes(), "
            "Engine(simulator='numba'), a, i, o)")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp)
        if not cold:
            subprocess.run([sys.executable, "-c", code], check=True, env=env)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        return time.perf_counter() - t


if __name__ == "__main__":
    main()
