"""Splitwise's mixed pool and machine borrowing, JSQ on pending tokens, KV link per hardware, and
the paper's workload-shift experiment (Sec. 6.4)."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.designs.kv_link import exposed_overhead_s, link_bytes_per_s, pair_overhead_s
from planner.designs.mixed_pool import MachineType, best_roles, fixed_roles
from planner.designs.splitwise import Candidate, Pool, SplitwiseSpec, evaluate_splitwise, simulate_design
from planner.perf.ops import DTypes
from planner.run import run_scenario
from planner.scenario import load_scenario
from planner.serving.batching import Engine
from planner.serving.simulate_pools import jsq_prompt, jsq_token
from planner.serving.slo import SLO, Target
from planner.serving.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


def _type(count, prompt_per, token, mixed, name="x"):
    return MachineType(name, 8, 1, 1.0, count, prompt_per * np.arange(count + 1.0), token, mixed)


def test_roles_one_type_by_hand():
    # 10 machines, each serves 1 req/s as a prompt machine or as a token machine: a request needs
    # one of each, so splitting gives 5 req/s; a machine running both phases serves 0.4 (worse)
    assert best_roles([_type(10, 1.0, 1.0, 0.4)]).rate == pytest.approx(5.0)
    # ... or 0.6 (better than half a pair): every machine runs both phases, 10 x 0.6
    r = best_roles([_type(10, 1.0, 1.0, 0.6)])
    assert r.rate == pytest.approx(6.0) and r.mixed == (10,)


def test_roles_two_types_put_each_machine_where_it_is_fast():
    fast_prompt = _type(4, 2.0, 0.5, 0.0, "a")        # 2 req/s prefilling, 0.5 decoding
    fast_token = _type(4, 0.5, 2.0, 0.0, "b")
    types = [fast_prompt, fast_token]
    wrong = fixed_roles(types, [0, 4], [4, 0])          # pools the wrong way round: min(4 x 0.5, 4 x 0.5)
    assert wrong.rate == pytest.approx(2.0)
    best = best_roles(types)                            # borrowing swaps them: min(8, 8)
    assert best.rate == pytest.approx(8.0) and best.prompt == (4, 0) and best.token == (0, 4)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 12), st.floats(0.1, 5), st.floats(0.1, 5), st.floats(0, 3),
       st.floats(0.1, 5), st.floats(0, 3), st.floats(0.5, 1.0))
def test_mixed_pool_never_worse_than_fixed_pools(n1, n2, p1, t2, m1, t1, m2, bend):
    # any concave prompt capacity, any per-machine token / mixed rates: the best assignment is at
    # least the fixed one (prompt pool = type 1, token pool = type 2)
    a = MachineType("a", 8, 1, 1.0, n1, p1 * np.arange(n1 + 1.0) ** bend, t1, m1)
    b = MachineType("b", 8, 1, 1.0, n2, p1 * np.arange(n2 + 1.0) ** bend, t2, m2)
    fixed = fixed_roles([a, b], [n1, 0], [0, n2])
    best = best_roles([a, b])
    assert best.rate >= fixed.rate - 1e-9
    assert sum(best.prompt) + sum(best.token) + sum(best.mixed) == n1 + n2


@pytest.fixture(scope="module")
def shift():
    return {r["name"]: r for r in run_scenario(load_scenario(ROOT / "scenarios/splitwise-shift-code-to-conv.yaml"))
            .model_dump()["rows"]}


def test_analytic_mixed_pool_never_worse_than_its_fixed_pools(shift):
    scn = load_scenario(ROOT / "scenarios/splitwise-shift-code-to-conv.yaml")
    m = planner.model(scn.model)
    dt = DTypes(weight=scn.design.weight_dtype, kv=scn.design.weight_dtype)
    from planner.designs.splitwise import slowdown_slo
    from planner.serving.workload import length_stats

    slo = slowdown_slo(m, scn.design.slowdown_slo, length_stats(scn.workload), dt, scn.design.framework)
    fixed_spec = scn.design.model_copy(update={"mixed_pool": False})
    for d in scn.design.designs:
        fixed = evaluate_splitwise(m, d, fixed_spec, scn.workload, slo, scn.engine, dt, {})
        assert shift[d.name]["max_rate"] >= fixed.max_rate * (1 - 1e-9), d.name


def test_workload_shift_loses_what_the_paper_says(shift):
    # Splitwise Sec. 6.4: a cluster sized for coding serving conversation loses nothing (AA, HH) or
    # 7% (HA, HHcap). Without the mixed pool the model loses 44% / 67% / 52% / 30%. Tolerance: a
    # loss within 10 points of the paper's (the loss is a difference of two throughputs, each off
    # by up to 15% against the paper in this model; the machine counts differ per trace, so
    # HHcap's code-sized cluster has 2 more machines and may even gain).
    loss = {k: 1 - shift[f"{k} sized for code"]["max_rate"] / shift[f"{k} sized for conv"]["max_rate"]
            for k in ("AA", "HH", "HA", "HHcap")}
    # HHcap's code-sized cluster has 42 machines against 40 (35 + 7 vs 30 + 10), 5% more capacity,
    # which its tolerance adds (since session 4's vllm-2023 entry it gains 6%; on SplitwiseSim's own
    # step-time lookup it gains 6.5% too, so the gain is the machine count, not the roofline).
    extra = {"HHcap": 42 / 40 - 1}
    for k, paper in (("AA", 0.0), ("HH", 0.0), ("HA", 0.07), ("HHcap", 0.07)):
        assert abs(loss[k] - paper) <= 0.13 + extra.get(k, 0.0), (k, loss[k])
    assert max(loss.values()) < 0.10


def test_llama_on_bloom_clusters_beats_the_baselines():
    # Splitwise Sec. 6.4: Llama-70B on clusters sized for BLOOM-176B, every Splitwise design beats
    # the baselines at higher load
    r = run_scenario(load_scenario(ROOT / "scenarios/splitwise-shift-llama-on-bloom.yaml")).model_dump()
    assert all(x["throughput"] > 1.0 for x in r["ratios"]), r["ratios"]


def test_simulator_mixed_pool_beats_fixed_pools_on_a_small_case():
    # 6 prompt + 2 token H100s (Llama-3.1-8B, TP1) serving the conversation trace: the token pool
    # binds. At 0.8x the fixed pools' analytic capacity both meet the SLOs; at 1.5x only the
    # mixed pool does (it lends prompt machines to decoding), and it completes more requests/s.
    m = planner.model("llama-3.1-8b")
    w = Workload(rate=1.0, trace="azure-conv-2023")
    slo = SLO(ttft_s=Target(p90=1.0), tpot_s=Target(p90=0.03))
    d = Candidate(name="6P+2T", prompt=Pool(hardware="h100-sxm", tp=1, count=6),
                  token=Pool(hardware="h100-sxm", tp=1, count=2))
    dt = DTypes()
    fixed_spec, mixed_spec = SplitwiseSpec(), SplitwiseSpec(mixed_pool=True)
    cap = evaluate_splitwise(m, d, fixed_spec, w, slo, Engine(), dt, {}).max_rate
    light = [simulate_design(m, d, s, w, slo, Engine(), 0.8 * cap, 3000, 1) for s in (fixed_spec, mixed_spec)]
    assert all(x.meets_slo for x in light)
    fixed, mixed = (simulate_design(m, d, s, w, slo, Engine(), 1.5 * cap, 3000, 1) for s in (fixed_spec, mixed_spec))
    assert not fixed.meets_slo and mixed.meets_slo, (fixed.violations, mixed.violations)
    assert mixed.requests_per_s >= fixed.requests_per_s
    assert mixed.tpot_s["p90"] <= fixed.tpot_s["p90"]


def test_kv_link_per_hardware():
    a100, h100 = planner.hardware("a100-80g"), planner.hardware("h100-sxm")
    # Splitwise Sec. 6.1, measured: 8 ms on A100, 5 ms on H100; a mixed pair takes the slower side
    assert exposed_overhead_s("a100-80g", a100) == pytest.approx(0.008)
    assert exposed_overhead_s("h100-sxm", h100) == pytest.approx(0.005)
    assert pair_overhead_s(("h100-sxm", h100), ("a100-80g", a100)) == pytest.approx(0.008)
    # another machine on the line through them: t = 2 ms + 1.2 s Gb/s / BW; an H200 has 400 Gb/s NICs
    h200 = planner.hardware("h200")
    assert exposed_overhead_s("h200", h200) == pytest.approx(0.002 + 1.2 / (h200.scale_out.bandwidth_per_direction.value
                                                                           * 8 / 1e9))
    # 8 HDR NICs at 200 Gb/s x 0.85 efficiency vs 8 NDR at 400 Gb/s: the pair moves at the A100's pace
    assert link_bytes_per_s(h100, 8, a100, 8) == pytest.approx(8 * 25e9 * 0.85)
    assert link_bytes_per_s(h100, 8, h100, 8) == pytest.approx(2 * link_bytes_per_s(a100, 8, a100, 8))


def test_jsq_prompt_by_hand():
    # three prompts arrive at t=0: 100, 10 and 10 tokens, 1 ms per token on both machines.
    # The first goes to machine 0 (tie), the second to machine 1 (0 pending), the third to machine 1
    # (10 pending < 100): it waits for the second.
    tokens = np.array([100.0, 10.0, 10.0])
    done, where = jsq_prompt(np.zeros(3), tokens, (tokens * 1e-3)[None, :], np.array([0, 0]))
    assert where.tolist() == [0, 1, 1]
    assert done.tolist() == pytest.approx([0.1, 0.01, 0.02])


def test_jsq_token_prefers_the_faster_machine():
    # machine 0 decodes a token every 10 ms, machine 1 every 40 ms; four 100-token requests at t=0:
    # 1st -> 0 (tie); 2nd -> 1 (0 pending); 3rd: both have 100 pending tokens -> 0; 4th: 200 vs 100 -> 1
    where = jsq_token(np.zeros(4), np.full(4, 100.0), np.array([0.01, 0.04]))
    assert where.tolist() == [0, 1, 0, 1]
    # batched requests drain in parallel: machine 0's request ends at 100 x 10 ms = 1 s, so at
    # t = 1.5 s machine 0 has 0 pending and machine 1 still (4 - 1.5) / 0.04 = 62.5
    where = jsq_token(np.array([0.0, 0.0, 1.5]), np.full(3, 100.0), np.array([0.01, 0.04]))
    assert where.tolist() == [0, 1, 0]


def test_joint_budget_holds_every_limit_at_once():
    # search at the cost AND provisioned power AND machine count of 40 DGX-H100: every split found
    # must fit all three (e.g. 86 A100 machines fit the cost but not the 40 machines), and adding
    # budgets never raises the best rate
    from planner.designs.splitwise import plan_splitwise

    scn = load_scenario(ROOT / "scenarios/splitwise-iso-cost-conv.yaml")
    m = planner.model(scn.model)

    def run(budget):
        search = scn.design.search.model_copy(update={"budget": budget, "pairs": [("h100-sxm", "a100-80g")]})
        spec = scn.design.model_copy(update={"search": search, "designs": []})
        r = plan_splitwise(m, spec, scn.workload, scn.slo, scn.engine, scn.cost.usd_per_h, "joint")
        return r.rows[:2], [row for row in r.rows if row.name.startswith("best ")]

    (_, h100), joint = run(["cost", "power", "machines"])
    assert joint
    for row in joint:
        assert row.usd_per_h <= h100.usd_per_h * 1.001
        assert row.provisioned_power_w <= h100.provisioned_power_w * 1.001
        assert row.accelerators <= h100.accelerators
    _, cost_only = run("cost")
    assert max(r.max_rate for r in joint) <= max(r.max_rate for r in cost_only) * 1.001
    assert max(r.accelerators for r in cost_only) > h100.accelerators      # the machine limit did bind


def test_joint_budget_input_errors():
    from pydantic import ValidationError

    from planner.designs.splitwise import SplitSearch

    with pytest.raises(ValidationError, match="not in budget"):
        SplitSearch(pairs=[("a100-80g", "a100-80g")], budget="cost", limit={"power": 1e5})
    with pytest.raises(ValidationError, match="> 0"):
        SplitSearch(pairs=[("a100-80g", "a100-80g")], budget=["cost", "power"], limit={"cost": 0, "power": 1e5})
