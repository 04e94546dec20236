"""The README's rack-scale table: the cheapest SLO-meeting deployment of
scenarios/deepseek-v3-rack-scale.yaml on each of its systems, priced as the scenario says.

    python benchmarks/rack_scale_table.py
"""

from __future__ import annotations

from pathlib import Path

import planner
from planner.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "deepseek-v3-rack-scale.yaml"


def main() -> None:
    scn = load_scenario(SCENARIO)
    assert scn.search is not None
    print("| system | deployment | accelerators | $/h | $/M output tokens | SLO capacity, output tok/s per device | "
          "TTFT p90 | TPOT p90 | binding | price used |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for hw in scn.search.hardware:
        one = scn.model_copy(update={"search": scn.search.model_copy(update={"hardware": [hw]})})
        r = planner.run_scenario(one)
        b, q = r.best, r.prices[0]
        per_dev = b.max_rate_per_instance * b.instances * r.mean_output_tokens / b.accelerators
        print(f"| {hw} | {b.instances} x tp{b.tp} ep{b.ep} {b.weight_dtype} | {b.accelerators} | {b.usd_per_h:.1f} | "
              f"{b.usd_per_million_output_tokens:.3f} | {per_dev:.0f} | {b.ttft_s['p90'] * 1e3:.0f} ms | "
              f"{b.tpot_s['p90'] * 1e3:.1f} ms | {b.binding} | ${q.usd_per_h:.2f} {q.purchase}"
              f"{' ' + q.provider if q.provider else ''}{' ' + q.date if q.date else ''} |")


if __name__ == "__main__":
    main()
