"""Speed of the horizon design (run: python benchmarks/bench_horizon.py).

Prints the horizon plan over 8,760 hourly periods (a year of growing chat demand, H100 and H200):
the whole plan without autoscaling (target < 2 s), the purchase MILP alone, and the autoscaling
replay with its safe-floor search; then the one-week chat + batch scenario (no period merging).
On a machine shared by many processes, OpenBLAS threads make numpy's 1-D dot products ~25x slower
(the workload's length statistics take ~0.45 s instead of ~0.02 s); run with
OPENBLAS_NUM_THREADS=1 to see the single-user figure.
"""

from __future__ import annotations

from pathlib import Path

from _timing import best_of, machine_line

from planner.run import run_scenario
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    import scipy.optimize  # noqa: F401  (import once, outside the timings: ~0.3-3 s on a loaded machine)

    from planner.catalog.model_catalog import model
    from planner.designs import horizon
    from planner.designs.purchase import solve_purchase

    print(machine_line())
    scn = load_scenario(ROOT / "scenarios/horizon-chat-growth.yaml")
    plain = scn.model_copy(update={"design": scn.design.model_copy(update={"autoscale": None})})
    periods = len(scn.workload.demand.series())
    t = best_of(lambda: run_scenario(plain))
    print(f"horizon plan, {periods:,} hourly periods, 2 hardware candidates, no autoscaling: {t:.3f} s (target < 2 s)")
    m, series = model(scn.model), scn.workload.demand.series()
    results, _ = horizon._candidates(m, plain.design, scn.workload, scn.slo, scn.engine, scn.cost, scn.search, series)
    pool = next(pools[0] for pools, _ in results if pools[0].hardware == "h200")
    p = horizon._problem(scn.design, pool, series, scn.cost)
    t = best_of(lambda: solve_purchase(p))
    print(f"  purchase MILP alone (h200, {periods:,} periods merged into classes): {t:.3f} s")
    t = best_of(lambda: run_scenario(scn), repeat=1)
    print(f"  with autoscaling replay and safe-floor search: {t:.3f} s")
    week = load_scenario(ROOT / "scenarios/horizon-chat-batch-week.yaml")
    t = best_of(lambda: run_scenario(week))
    print(f"chat + batch week (168 periods, batch couples them): {t:.3f} s")


if __name__ == "__main__":
    main()
