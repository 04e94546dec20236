"""Sweep throughput (run: python benchmarks/bench_sweep.py [--variants 1000] [--workers 2]).

A grid of colocated searches (Llama-3.1-8B, fixed 1,000/200-token requests, TP 1-8 on one
hardware profile each: 10 hardware x 10 demand levels x 10 TTFT bounds = 1,000 variants) run in
process, on N local worker processes, and on a Dask LocalCluster of N workers if dask.distributed
is installed; prints variants/s of each. Results go to a temporary CSV.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml
from _timing import machine_line

from planner.sweep.runner import run_sweep
from planner.sweep.spec import load_sweep

HARDWARE = ["h100-sxm", "h200", "a100-80g", "b200", "mi300x", "mi325x", "mi355x", "h20", "ascend-910b",
            "ascend-910c"]


def sweep_file(folder: Path, variants: int) -> Path:
    side = max(1, round((variants / len(HARDWARE)) ** 0.5))
    doc = {"name": "bench",
           "base": {"name": "bench", "model": "llama-3.1-8b",
                    "workload": {"rate": 5, "input": {"dist": "fixed", "value": 1000},
                                 "output": {"dist": "fixed", "value": 200}},
                    "slo": {"ttft_s": {"p90": 1.0}, "tpot_s": {"p90": 0.05}},
                    "search": {"hardware": ["h100-sxm"], "tp": [1, 2, 4, 8]}},
           "grid": {"search.hardware": [[h] for h in HARDWARE],
                    "workload.rate": [round(2.0 * 1.5**k, 3) for k in range(side)],
                    "slo.ttft_s.p90": [round(0.1 * 1.3**k, 4) for k in range(side)]}}
    path = folder / "bench-sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        s = load_sweep(sweep_file(Path(tmp), a.variants))
        n = len(s.variants)
        runs = [("in process", {}), (f"{a.workers} local processes", {"workers": a.workers})]
        try:
            from distributed import LocalCluster

            cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, dashboard_address=None)
            runs.append((f"Dask LocalCluster, {a.workers} workers", {"scheduler": cluster.scheduler_address}))
        except ImportError:
            cluster = None
        for k, (label, kw) in enumerate(runs):
            t = time.perf_counter()
            r = run_sweep(s, Path(tmp) / f"out{k}.csv", progress=False, **kw)
            dt = time.perf_counter() - t
            print(f"sweep of {n:,d} variants ({r.failed} infeasible), {label}: {dt:6.1f} s = {n / dt:6.1f} variants/s")
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
