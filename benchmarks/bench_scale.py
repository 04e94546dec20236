"""Search at scale (run: python benchmarks/bench_scale.py [--sizes 1000,10000,100000,1000000]).

Each size runs in a fresh process: slo-search (aggregated + disaggregated) of Qwen3-235B-A22B,
and the colocated search, over wide layout spaces (every hardware profile, tp/ep powers of two,
pp 1..94, weight dtypes), printing candidates, seconds, candidates/s, the process's peak RSS and the
search's CPU seconds (less disturbed than wall time by other work on a shared machine), and the
peaks of the process tree's summed PSS and RSS sampled every 50 ms (``_memory``: PSS splits
pages shared between processes, so its sum is what the search costs the machine; summed RSS
counts the pages workers share copy-on-write with the parent once per process).
Spaces beyond the catalog's distinct candidates list hardware profiles more than once: the same
work per candidate, counted as separate candidates. ``--workers N`` runs each search on N local
processes (the answer is the same); then the RSS printed is the parent's, the workers' largest
beside it, and the CPU seconds include the workers'.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from _memory import run_sampled
from _timing import machine_line

MODEL = "qwen3-235b-a22b"
DTYPES = ["bf16", "fp8", "int8", "fp4", "int4", "fp16", "fp32"]


def space(size: int) -> dict:
    """Search lists giving about ``size`` candidates (pp range grown first, then dtypes, then copies)."""
    import planner
    from planner.search import layouts

    m = planner.model(MODEL)
    tp, ep = [1, 2, 4, 8, 16, 32, 64], [1, 2, 4, 8, 16, 32, 64, 128]
    per_pp = {}
    for h in planner.list_hardware():
        hw = planner.hardware(h)
        lay = layouts(m, hw, tp, ep, list(range(1, m.num_layers + 1)))
        for p in lay.pp.tolist():
            per_pp[p] = per_pp.get(p, 0) + 1
    hardware, dtypes, pp, count = planner.list_hardware(), DTYPES[:1], [], 0
    for p in sorted(per_pp):
        if count >= size:
            break
        pp.append(p)
        count += per_pp[p]
    while count * (len(dtypes) + 1) // len(dtypes) <= size and len(dtypes) < len(DTYPES):
        count = count * (len(dtypes) + 1) // len(dtypes)
        dtypes = DTYPES[:len(dtypes) + 1]
    copies = max(1, round(size / count))
    return {"hardware": hardware * copies, "tp": tp, "ep": ep, "pp": pp, "weight_dtype": dtypes}


def run_one(size: int, design: str, workers: int = 1) -> dict:
    import planner
    from planner.catalog.dtypes import DType
    from planner.designs.colocated import search_colocated
    from planner.designs.slo_search import SloSearchSpec, plan_slo_search
    from planner.perf.cost import CostModel
    from planner.serving.batching import Engine
    from planner.serving.slo import SLO
    from planner.serving.workload import Workload

    s = space(size)
    wl = Workload(rate=50, input={"dist": "fixed", "value": 4000}, output={"dist": "fixed", "value": 500})
    slo = SLO(ttft_s={"p90": 2.0}, tpot_s={"p90": 0.05})
    m, dts = planner.model(MODEL), [DType(d) for d in s["weight_dtype"]]
    t, cpu = time.perf_counter(), time.process_time()
    if design == "slo-search":
        r = plan_slo_search(m, SloSearchSpec(), wl, slo, Engine(), s["hardware"], s["tp"], s["ep"], s["pp"], dts,
                            None, "bench", workers=workers)
        n = r.candidates
    else:
        # profiles without a public rental price: an assumed $2/device-hour (prices only rank here)
        cost = CostModel(usd_per_h={h: 2.0 for h in set(s["hardware"]) if planner.hardware(h).price.rent is None})
        r = search_colocated(m, wl, slo, Engine(), cost, s["hardware"], s["tp"], s["ep"], s["pp"], dts, top=9,
                             workers=workers)
        n = r.candidates
    dt, cpu = time.perf_counter() - t, time.process_time() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)      # pool workers, once they have exited
    cpu += kids.ru_utime + kids.ru_stime
    return {"design": design, "candidates": n, "seconds": dt, "per_s": n / dt, "peak_rss_mb": rss / 1e6,
            "worker_rss_mb": kids.ru_maxrss * 1024 / 1e6, "cpu_s": cpu, "per_cpu_s": n / cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--designs", default="slo-search,colocated")
    ap.add_argument("--workers", type=int, default=1, help="local worker processes per search")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(int(a.one[0]), a.one[1], int(a.one[2]))))
        return
    print(machine_line())
    for design in a.designs.split(","):
        for size in (int(x) for x in a.sizes.split(",")):
            out, peak = run_sampled([sys.executable, __file__, "--one", str(size), design, str(a.workers)])
            r = json.loads(out)
            print(f"{design:10s} x{a.workers} {r['candidates']:>9,d} candidates in {r['seconds']:7.1f} s = "
                  f"{r['per_s']:7,.0f}/s, CPU {r['cpu_s']:6.1f} s = {r['per_cpu_s']:7,.0f}/CPU-s; "
                  f"summed peaks over {peak['processes']:.0f} processes: PSS {peak['pss'] / 1e6:4.0f} MB "
                  f"(anon {peak['pss_anon'] / 1e6:4.0f} MB), RSS {peak['rss'] / 1e6:4.0f} MB; "
                  f"peak RSS {r['peak_rss_mb']:4.0f} MB (workers {r['worker_rss_mb']:4.0f} MB)")


if __name__ == "__main__":
    main()
