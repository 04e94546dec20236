"""Speed of POLCA planning (run: python benchmarks/bench_polca.py [--repeat N]).

Prints one row per case: the bundled POLCA scenarios and the rack/row/cluster hierarchy raised to
10 rows (100 racks; its cluster budget scaled with the rows, 0.95 x 10 x 260 kW), each timed in
process through ``plan_polca`` (best of ``--repeat``) with the controllers on the numpy path
(``engine.simulator: python``) and, when numba is installed (``pip install "planner[fast]"``), on
the compiled per-step kernel (``numba``; compiled or loaded from numba's cache before timing), and
whether the two plans are identical.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _timing import best_of, machine_line

from planner.catalog.model_catalog import model
from planner.designs.polca import Budget, plan_polca
from planner.scenario import load_scenario
from planner.serving.sim_kernel import numba_available

ROOT = Path(__file__).resolve().parent.parent


def cases() -> list[tuple[str, object]]:
    out = []
    for name in ("polca-row-a100", "polca-trace-azure", "polca-hierarchy-a100"):
        out.append((name, load_scenario(ROOT / "scenarios" / f"{name}.yaml")))
    scn = load_scenario(ROOT / "scenarios/polca-hierarchy-a100.yaml")
    d = scn.design.model_copy(update={"rows": 10, "cluster_budget": Budget(cap_w=0.95 * 10 * 260_000)})
    out.append(("polca-hierarchy-a100 rows=10", scn.model_copy(update={"design": d})))
    return out


def plan(scn, simulator: str):
    engine = scn.engine.model_copy(update={"simulator": simulator})
    return plan_polca(model(scn.model), scn.design, scn.workload, engine, scn.name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2, help="runs per case and loop (the fastest is shown)")
    args = ap.parse_args()
    print(machine_line())
    loops = ("python", "numba") if numba_available() else ("python",)
    if "numba" in loops:
        t = time.perf_counter()
        scn = cases()[1][1]
        plan(scn.model_copy(update={"design": scn.design.model_copy(update={"oversubscription": [0.3]})}), "numba")
        print(f"numba: compile (or load from numba's cache) and one level of polca-trace-azure in "
              f"{time.perf_counter() - t:.2f} s")
    print(f"{'case':30s} {'levels':>6s} {'racks':>5s} " + " ".join(f"{s + ' s':>9s}" for s in loops)
          + ("  speed-up  same plan" if len(loops) > 1 else ""))
    for label, scn in cases():
        d = scn.design
        times, plans = [], []
        for sim in loops:
            plans.append(plan(scn, sim))
            times.append(best_of(lambda scn=scn, sim=sim: plan(scn, sim), args.repeat))
        row = f"{label:30s} {len(d.oversubscription):6d} {d.racks * d.rows:5d} " + " ".join(f"{t:9.2f}" for t in times)
        if len(loops) > 1:
            row += f"  {times[0] / times[1]:7.1f}x  {plans[0].model_dump_json() == plans[1].model_dump_json()}"
        print(row)


if __name__ == "__main__":
    main()
