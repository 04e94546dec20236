"""Splitwise design: the paper's iso-cost / iso-power comparisons computed by the model,
analytic vs simulator, when disaggregation does not pay, and infeasible pools."""

import re
from pathlib import Path

import pytest

import planner
from planner.catalog.dtypes import DType
from planner.designs.splitwise import (
    Candidate,
    Pool,
    SplitSearch,
    SplitwiseSpec,
    evaluate_splitwise,
    plan_splitwise,
    simulate_design,
    slowdown_slo,
)
from planner.errors import InfeasibleError
from planner.perf.ops import DTypes
from planner.run import run_scenario
from planner.scenario import load_scenario
from planner.serving.batching import Engine
from planner.serving.slo import SLO, Target
from planner.serving.workload import Fixed, Workload, length_stats

ROOT = Path(__file__).resolve().parent.parent


def _ratio(result, design, baseline):
    return next(x for x in result["ratios"] if x["design"] == design and x["baseline"] == baseline)


@pytest.fixture(scope="module")
def iso_cost():
    return run_scenario(load_scenario(ROOT / "scenarios/splitwise-iso-cost-conv.yaml")).model_dump()


@pytest.fixture(scope="module")
def iso_power():
    return run_scenario(load_scenario(ROOT / "scenarios/splitwise-iso-power-conv.yaml")).model_dump()


@pytest.fixture(scope="module")
def iso_cost_lookup():
    return run_scenario(load_scenario(ROOT / "scenarios/splitwise-iso-cost-conv-simlookup.yaml")).model_dump()


@pytest.fixture(scope="module")
def iso_power_lookup():
    return run_scenario(load_scenario(ROOT / "scenarios/splitwise-iso-power-conv-simlookup.yaml")).model_dump()


def test_iso_cost_aa_vs_h100_reproduces_1_4x_on_splitwisesims_lookup(iso_cost_lookup):
    # Paper Sec. 6.3: Splitwise-AA gives 1.4x Baseline-H100's throughput at the same cost with 25%
    # more power. On SplitwiseSim's own step-time lookup (every decode step at the batch-1 time,
    # scenarios/data/make_splitwisesim_lookup.py) the design model gives 1.16x. Tolerance 20%: the
    # tables approximate the lookup (a bilinear grid of f(batch x tokens); mixed iterations scaled
    # from the roofline where SplitwiseSim multiplies the prompt time by 1.1; decode at the 512-token
    # batch-1 time rather than the 128/256-token extrapolation).
    r = _ratio(iso_cost_lookup, "Splitwise-AA", "Baseline-H100")
    assert r["throughput"] == pytest.approx(1.4, rel=0.20)
    assert r["cost"] == pytest.approx(1.0, abs=0.01)
    assert r["power"] == pytest.approx(1.25, abs=0.03)     # 86x400 W vs 40x700 W GPUs (configuration)


def test_iso_power_aa_vs_a100_on_splitwisesims_lookup(iso_power_lookup):
    # Paper Sec. 6.2: Splitwise-AA 2.15x Baseline-A100 at the same power and cost; the design model
    # gives 2.54x on SplitwiseSim's lookup (2.43x before the A100 plateau took MAMF's 0.87: the
    # baseline's mixed iterations scale their prompt part by the roofline). Tolerance 20%, as above.
    r = _ratio(iso_power_lookup, "Splitwise-AA", "Baseline-A100")
    assert r["throughput"] == pytest.approx(2.15, rel=0.20)
    assert r["cost"] == pytest.approx(1.0) and r["power"] == pytest.approx(1.0)


def test_decode_steps_that_grow_with_batch_shrink_splitwises_gain(iso_cost, iso_power, iso_cost_lookup,
                                                                  iso_power_lookup):
    # The roofline with the vllm-2023 entry charges a decode step per running sequence and per KV
    # byte (SplitwiseSim's own batch sweep: BLOOM A100 48.8 ms at batch 1, 96.6 ms at 64), which the
    # lookup does not: the token pools, which run the largest batches, lose most. Regression values
    # of this model (iso-cost AA/H100 0.81x, iso-power AA/A100 1.18x), tolerance 15% (the analytic
    # queueing's rate search moves in steps of a few percent).
    cost, cost_lookup = (_ratio(r, "Splitwise-AA", "Baseline-H100")["throughput"] for r in (iso_cost, iso_cost_lookup))
    power, power_lookup = (_ratio(r, "Splitwise-AA", "Baseline-A100")["throughput"]
                           for r in (iso_power, iso_power_lookup))
    assert cost < cost_lookup and power < power_lookup
    assert cost == pytest.approx(0.81, rel=0.15)
    assert power == pytest.approx(1.18, rel=0.15)


def test_search_finds_a_split_at_least_as_good_as_the_paper_configs(iso_cost):
    rows = {r["name"]: r for r in iso_cost["rows"]}
    found = [r for n, r in rows.items() if n.startswith("best ")]
    assert found and all(r["usd_per_h"] <= rows["Baseline-H100"]["usd_per_h"] * 1.001 for r in found)
    assert max(r["max_rate"] for r in found) >= rows["Splitwise-AA"]["max_rate"] * 0.98
    assert any("disaggregation pays" in v for v in iso_cost["verdicts"])


def test_simulator_confirms_analytic_capacity():
    scn = load_scenario(ROOT / "scenarios/splitwise-iso-cost-conv.yaml")
    spec, m = scn.design, planner.model(scn.model)
    dt = DTypes(weight=DType.fp16, kv=DType.fp16)
    slo = slowdown_slo(m, spec.slowdown_slo, length_stats(scn.workload), dt, spec.framework)
    d = spec.designs[0]
    an = evaluate_splitwise(m, d, spec, scn.workload, slo, scn.engine, dt, {})
    sim = simulate_design(m, d, spec, scn.workload, slo, scn.engine, 0.8 * an.max_rate, 12_000, 3)
    assert sim.meets_slo, sim.violations
    assert sim.tpot_s["mean"] == pytest.approx(an.tpot_s["mean"], rel=0.15)
    assert sim.requests_per_s == pytest.approx(0.8 * an.max_rate, rel=0.03)


def test_disaggregation_does_not_pay_for_tiny_prompts_on_a_slow_link():
    m = planner.model("llama-3.1-8b")
    w = Workload(rate=1.0, input=Fixed(value=32), output=Fixed(value=512))
    slo = SLO(ttft_s=Target(p90=0.5), tpot_s=Target(p90=0.05))
    spec = SplitwiseSpec(
        link_gbps=1.0, baselines=[{"name": "Colocated-H100", "pool": {"hardware": "h100-sxm", "tp": 1, "count": 8}}],
        search=SplitSearch(pairs=[("h100-sxm", "h100-sxm")], budget="machines", of_baseline="Colocated-H100", tp=[1]))
    r = plan_splitwise(m, spec, w, slo, Engine(), {}, "tiny-prompts")
    assert any("does not pay" in v for v in r.verdicts), r.verdicts


def test_token_machine_too_small_names_the_limit():
    m = planner.model("bloom-176b")
    w = Workload(rate=1.0, trace="azure-conv-2023")
    spec = SplitwiseSpec(designs=[Candidate(name="tiny", prompt=Pool(hardware="h100-sxm", count=2),
                                            token=Pool(hardware="a100-80g", tp=4, count=2))])
    with pytest.raises((InfeasibleError, planner.InputError), match="KV cache|memory|fit"):
        plan_splitwise(m, spec, w, SLO(), Engine(), {}, "x")


def test_slow_link_binds():
    m = planner.model("llama-3.1-70b")
    w = Workload(rate=1.0, input=Fixed(value=8000), output=Fixed(value=100))
    d = Candidate(name="HH", prompt=Pool(hardware="h100-sxm", count=4), token=Pool(hardware="h100-sxm", count=4))
    spec = SplitwiseSpec(link_gbps=0.5, designs=[d])
    r = plan_splitwise(m, spec, w, SLO(ttft_s=Target(p90=5.0)), Engine(), {}, "slow")
    assert "kv_transfer_bandwidth" in r.rows[0].binding


def test_pareto_front_is_non_dominated(iso_cost):
    front = iso_cost["pareto"]
    assert front
    for a in front:
        for b in front:
            assert not (b["req_per_s"] >= a["req_per_s"] and b["usd_per_h"] <= a["usd_per_h"]
                        and b["power_w"] <= a["power_w"] and b != a
                        and (b["req_per_s"] > a["req_per_s"] or b["usd_per_h"] < a["usd_per_h"]
                             or b["power_w"] < a["power_w"]))


def test_energy_is_reported_and_physical(iso_power):
    for row in iso_power["rows"]:
        assert 0 < row["avg_power_w"] <= row["provisioned_power_w"]
        assert row["output_tokens_per_joule"] > 0


def test_min_budget_for_a_target_rate():
    scn = load_scenario(ROOT / "scenarios/splitwise-iso-cost-conv.yaml")
    search = scn.design.search.model_copy(update={"objective": "min_budget", "target_rate": 40.0,
                                                  "pairs": [("h100-sxm", "a100-80g")]})
    spec = scn.design.model_copy(update={"search": search, "designs": []})
    r = plan_splitwise(planner.model(scn.model), spec, scn.workload, scn.slo, scn.engine, scn.cost.usd_per_h, "t")
    best = [row for row in r.rows if row.name.startswith("best ")]
    assert best and best[0].max_rate >= 40.0 * 0.98
    h100 = next(row for row in r.rows if row.name == "Baseline-H100")
    assert best[0].usd_per_h < h100.usd_per_h            # serving 40 req/s costs less than the 40-machine baseline


def test_splitwisesim_lookup_tables_are_what_the_generator_writes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("lookup", ROOT / "scenarios/data/make_splitwisesim_lookup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for hw in mod.HARDWARE:
        assert mod.path(hw).read_text() == mod.table(hw)
    # the lookup's decode step does not grow with batch; the same database's batch sweep does
    text = mod.table("a100-80g")
    decode = [float(line.split(",")[4]) for line in text.splitlines() if line.startswith("decode,")]
    assert decode == [0.0488] * 4


def test_ep_pools_count_max_tp_ep_devices_and_name_their_degrees():
    # perf.parallel: an instance is pp stages of max(tp, ep) devices; cp instances make a machine
    assert Pool(hardware="h200", tp=1, ep=8, count=3).devices == 8
    assert Pool(hardware="h200", tp=8, ep=8, pp=2, count=1).devices == 16
    assert Pool(hardware="h200", tp=2, cp=4, count=1).devices == 8
    assert Pool(hardware="h200", tp=1, ep=8, count=1).label == "tp1 ep8"
    assert Pool(hardware="h200", tp=8, count=1).label == "tp8"
    with pytest.raises(ValueError, match="cp=2 with ep=8 > tp=1"):
        Pool(hardware="h200", tp=1, ep=8, cp=2, count=1)


@pytest.fixture(scope="module")
def deepseek_split():
    return run_scenario(load_scenario(ROOT / "scenarios/deepseek-v3-splitwise-h200.yaml")).model_dump()


def test_deepseek_split_search_tries_expert_parallel_machines(deepseek_split):
    rows = deepseek_split["rows"]
    # every row's accelerators are its machines x 8 GPUs (tp 8, or tp 1 with ep 8), within the
    # baseline's 8 machines
    for r in rows:
        machines = sum(int(n) for n in re.findall(r"(\d+) x h200", r["machines"]))
        assert r["accelerators"] == 8 * machines <= 64, r
    found = [r for r in rows if r["name"].startswith("best")]
    assert any("tp1 ep8" in r["machines"] for r in found) and any("h200 tp8 (" in r["machines"] for r in found)
    # DeepSeek-V3 (671 GB in FP8) on one 141-GB GPU (tp 1, ep 1) is skipped, not fatal
    assert not any(re.search(r"h200 tp1 \(", r["machines"]) for r in rows)


def test_prompt_machine_that_cannot_hold_the_model_names_the_limit():
    # 671B parameters in FP8 do not fit beside anything on one 141-GB H200
    m = planner.model("deepseek-v3")
    w = Workload(rate=1.0, input=Fixed(value=2000), output=Fixed(value=200))
    spec = SplitwiseSpec(weight_dtype="fp8", designs=[Candidate(
        name="one-gpu-prompts", prompt=Pool(hardware="h200", tp=1, count=8),
        token=Pool(hardware="h200", tp=1, ep=8, count=2))])
    with pytest.raises(InfeasibleError,
                       match=r"prompt machine \(h200 tp1\) has no room .*\(2,000 tokens.*the weights alone exceed it"):
        plan_splitwise(m, spec, w, SLO(), Engine(), {}, "x")


def test_simulator_confirms_an_expert_parallel_split():
    # the disaggregated simulator runs the attention-DP token machines with their replicas: at 80%
    # of the analytic capacity it meets the SLOs and its mean TPOT is within 15% of the model's
    scn = load_scenario(ROOT / "scenarios/deepseek-v3-splitwise-h200.yaml")
    spec, m = scn.design, planner.model(scn.model)
    dt = DTypes(weight=DType.fp8)
    d = spec.designs[0]
    an = evaluate_splitwise(m, d, spec, scn.workload, scn.slo, scn.engine, dt, {})
    sim = simulate_design(m, d, spec, scn.workload, scn.slo, scn.engine, 0.8 * an.max_rate, 6_000, 3)
    assert sim.meets_slo, sim.violations
    assert sim.tpot_s["mean"] == pytest.approx(an.tpot_s["mean"], rel=0.15)


def test_search_degrees_must_be_positive():
    with pytest.raises(ValueError, match="must be a non-empty list of positive integers, got \\[0, 8\\]"):
        SplitSearch(pairs=[("h200", "h200")], limit=100.0, ep=[0, 8])


def test_unknown_pool_key_is_matched_against_the_pool_fields(tmp_path):
    # a typo in a pool is matched against the pool's own fields ('cont' -> nothing of
    # hardware/tp/ep/pp/count/power_cap/cp beats the missing count; 'powr_cap' -> 'power_cap'),
    # not against every key of the scenario ('extra' used to suggest workload's 'trace')
    text = (ROOT / "scenarios/deepseek-v3-splitwise-h200.yaml").read_text()
    for typo, expected in (("extra: 1", r"token\.extra: unknown key$"), ("powr_cap: 1", "did you mean 'power_cap'")):
        p = tmp_path / "s.yaml"
        p.write_text(text.replace("token: {hardware: h200, tp: 1, ep: 8, count: 4}",
                                  f"token: {{hardware: h200, tp: 1, ep: 8, count: 4, {typo}}}"))
        with pytest.raises(planner.InputError, match=expected):
            load_scenario(p)


def test_pareto_front_prices_hardware_at_the_rate_its_budget_used():
    # a search whose rate table names no hardware prices its budget at the profiles' default rent;
    # its Pareto points must use the same rate (they were NaN, and the front came out empty)
    m = planner.model("llama-3.1-8b")
    w = Workload(rate=1.0, input=Fixed(value=512), output=Fixed(value=128))
    spec = SplitwiseSpec(
        baselines=[{"name": "colo", "pool": {"hardware": "a100-80g", "tp": 1, "count": 4}}],
        search=SplitSearch(pairs=[("a100-80g", "a100-80g")], budget="cost", of_baseline="colo", tp=[1]))
    r = plan_splitwise(m, spec, w, SLO(ttft_s=Target(p90=1.0), tpot_s=Target(p90=0.05)), Engine(), {}, "x")
    rent = planner.hardware("a100-80g").price.rent.value
    assert r.pareto
    for point in r.pareto:
        assert point["usd_per_h"] == pytest.approx((point["prompt"] + point["token"]) * rent)


@pytest.mark.parametrize("sets,match", [
    (["design.designs=[]", "design.baselines=[]"], r"design\.designs: nothing to evaluate"),
    (["design.slowdown_slo.tp=3"], r"design\.slowdown_slo\.tp: tp=3 ep=1 pp=1 on a100-80g for bloom-176b: tp must "
                                   r"divide the 112 attention heads"),
    (["design.designs.0.prompt.power_cap=0.01"], r"design\.designs\.0\.prompt\.power_cap: 0\.01 x a100-80g's TDP is "
                                                 r"4 W, at or below its idle power"),
])
def test_design_mistakes_are_located_before_the_run(sets, match):
    """An empty comparison (a traceback on an empty table), a reference layout that does not split
    the model and a cap below idle power (both unlocated mid-run errors) are blamed where written."""
    from planner.errors import InputError
    from planner.scenario import load_scenario

    with pytest.raises(InputError, match=match):
        load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / "splitwise-iso-power-conv.yaml", sets)
