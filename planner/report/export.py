"""CSV export of a plan's front or table (`planner plan --csv FILE`)."""

from __future__ import annotations

import csv
from pathlib import Path


def rows_of(result) -> list[dict]:
    """The rows a user would chart: the Pareto front, the sweep or the comparison table."""
    d = result.design
    if d == "horizon":
        cols = result.periods
        return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]
    if d == "fleet":
        return [{"hardware": h, "instances": n, "layout": result.layouts[h], "engine": result.engines.get(h),
                 **{f"bucket_{k + 1}_share": v for k, v in enumerate(result.routing[h])}}
                for h, n in result.instances.items()]
    if d == "slo-search":
        return [c.model_dump() for c in result.pareto]
    if d == "splitwise":
        return result.pareto or [r.model_dump(exclude={"ttft_s", "tpot_s", "e2e_s"}) for r in result.rows]
    if d == "polca":
        return [lv.model_dump() for lv in result.levels]
    if d == "prfaas":
        return result.bandwidth_sweep or [s.model_dump(exclude={"throughput_parts", "ttft_s", "ttft_queued_s"})
                                          for s in result.systems]
    best = [result.best, *result.alternatives]
    return [{k: v for k, v in x.model_dump().items() if not isinstance(v, dict)} for x in best]


def write_csv(result, path: str | Path) -> int:
    """Write the rows to ``path`` whole or not at all (a temporary file renamed at the end)."""
    from planner.outputs import atomic_path

    rows = rows_of(result)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return len(rows)
