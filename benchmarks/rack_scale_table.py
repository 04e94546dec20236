"""The README's rack-scale table: the cheapest SLO-meeting deployment of
scenarios/deepseek-v3-rack-scale.yaml on each of its systems, priced as the scenario says, each
on its vendor's default engine (vLLM as that vendor's platform builds it), and CloudMatrix384 once
more on the serving system its paper deploys (CloudMatrix-Infer).

    python benchmarks/rack_scale_table.py
"""

from __future__ import annotations

from pathlib import Path

import planner
from planner.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "deepseek-v3-rack-scale.yaml"
OWN_ENGINE = {"cloudmatrix384": "cloudmatrix-infer"}


def main() -> None:
    scn = load_scenario(SCENARIO)
    assert scn.search is not None
    print("| system | deployment | accelerators | $/h | $/M output tokens | SLO capacity, output tok/s per device | "
          "TTFT p90 | TPOT p90 | binding | price used |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    runs = [(hw, None) for hw in scn.search.hardware]
    runs += [(hw, fw) for hw, fw in OWN_ENGINE.items() if hw in scn.search.hardware]
    for hw, fw in runs:
        one = scn.model_copy(update={"search": scn.search.model_copy(update={"hardware": [hw]}),
                                     "engine": scn.engine.model_copy(update={"framework": fw})})
        r = planner.run_scenario(one)
        b, q = r.best, r.prices[0]
        per_dev = b.max_rate_per_instance * b.instances * r.mean_output_tokens / b.accelerators
        print(f"| {hw} ({b.engine}) | {b.instances} x tp{b.tp} ep{b.ep} {b.weight_dtype} | {b.accelerators} | "
              f"{b.usd_per_h:.1f} | {b.usd_per_million_output_tokens:.3f} | {per_dev:.0f} | "
              f"{b.ttft_s['p90'] * 1e3:.0f} ms | {b.tpot_s['p90'] * 1e3:.1f} ms | {b.binding} | ${q.usd_per_h:.2f} "
              f"{q.purchase}{' ' + q.provider if q.provider else ''}{' ' + q.date if q.date else ''} |")

if __name__ == "__main__":
    main()
