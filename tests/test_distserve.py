"""DistServe-style placement: per-phase parallelism, node-affinity placements, goodput per GPU at
an attainment target, and the three-way compare with colocated and Splitwise."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.designs.distserve import DistServeSpec, PhaseSpace, plan_distserve
from planner.errors import InputError
from planner.run import run_scenario
from planner.scenario import load_scenario
from planner.serving.batching import Engine
from planner.serving.slo import SLO, Target
from planner.serving.workload import length_stats

ROOT = Path(__file__).resolve().parent.parent
CHATBOT = ROOT / "scenarios/distserve-chatbot-opt13b.yaml"


@pytest.fixture(scope="module")
def chatbot():
    scn = load_scenario(CHATBOT)
    return scn, {b.placement: b for b in run_scenario(scn).best}


def _plan(scn, **update):
    spec = scn.design.model_copy(update=update)
    return {b.placement: b for b in plan_distserve(planner.model(scn.model), spec, scn.workload, scn.slo, scn.engine,
                                                   "t").best}


def test_opt13b_kv_cache_by_hand():
    # MHA: 2 (K, V) x 40 layers x 5120 x 2 bytes = 819,200 bytes per token
    assert planner.kv_cache_bytes_per_token("opt-13b", "fp16") == 819_200


def test_slow_cross_node_link_favours_low_node_affinity(chatbot):
    # DistServe Sec. 6.1: on its 25 Gb/s testbed it uses the low node-affinity placement (KV over NVLink)
    scn, best = chatbot
    low, high = best["low-node-affinity"], best["high-node-affinity"]
    assert low.goodput_per_gpu > high.goodput_per_gpu
    assert high.binding == "cross-node KV bandwidth"
    # the handoff of the mean prompt over 25 Gb/s: mean prompt x 819,200 B / 3.125 GB/s (one node each side)
    mean_in = length_stats(scn.workload).mean_input
    assert high.kv_transfer_s == pytest.approx(mean_in * 819_200 / 3.125e9, rel=1e-6)
    # over NVLink it is two orders of magnitude faster (DistServe Fig. 10: <30 ms for 95% of requests)
    assert low.kv_transfer_s < high.kv_transfer_s / 100 and low.kv_transfer_s < 0.03


def test_fast_network_lets_high_affinity_match_or_beat_low(chatbot):
    # DistServe Sec. 6.4 / Fig. 11: Alg. 1 (fewer constraints, fast network) >= Alg. 2. With the
    # GPUs' own 8 x 200 Gb/s HDR NICs the independent placement is at least as good.
    scn, _ = chatbot
    best = _plan(scn, cross_node_gbps=None)
    assert best["high-node-affinity"].goodput_per_gpu >= best["low-node-affinity"].goodput_per_gpu * 0.98


def test_disaggregation_beats_the_papers_vllm_layout(chatbot):
    # DistServe Sec. 6.2: 2.0x-4.6x the per-GPU rate of vLLM (intra-op 1 for OPT-13B). The model gives
    # 1.17x with the catalog's current kernels and engine overheads (vllm entry; 1.31x before the
    # attention-kernel and host-overhead terms) and 1.23x with the vllm-2023 entry (README explains);
    # asserted: disaggregation wins against the paper's baseline layout, by at least 10%.
    _, best = chatbot
    assert best["low-node-affinity"].goodput_per_gpu >= 1.1 * best["colocated baseline"].goodput_per_gpu


def test_looser_slo_never_lowers_goodput(chatbot):
    scn, best = chatbot
    m = planner.model(scn.model)
    loose = SLO(ttft_s=Target(p90=0.5), tpot_s=Target(p90=0.2), attainment=0.9)
    more = {b.placement: b for b in plan_distserve(m, scn.design, scn.workload, loose, scn.engine, "t").best}
    for k, b in best.items():
        assert more[k].goodput_per_gpu >= b.goodput_per_gpu * (1 - 1e-9), k


def test_ttft_below_any_prefill_is_infeasible(chatbot):
    # a TTFT bound shorter than the fastest prefill of the shortest prompts: nothing qualifies
    scn, _ = chatbot
    spec = DistServeSpec(hardware="a100-80g", weight_dtype="fp16", prefill=PhaseSpace(tp=[1], pp=[1]),
                         decode=PhaseSpace(tp=[1], pp=[1]))
    slo = SLO(ttft_s=Target(p90=1e-4), tpot_s=Target(p90=1e-4), attainment=0.9)
    with pytest.raises(planner.InfeasibleError, match="relax the SLO"):
        plan_distserve(planner.model(scn.model), spec, scn.workload, slo, Engine(), "t")


def test_needs_both_bounds(chatbot):
    scn, _ = chatbot
    with pytest.raises(InputError, match="ttft_s and slo.tpot_s"):
        plan_distserve(planner.model(scn.model), scn.design, scn.workload, SLO(ttft_s=Target(p90=1.0)), Engine(), "t")


def test_cli_plan_and_three_way_compare():
    r = CliRunner().invoke(app, ["plan", str(CHATBOT)])
    assert r.exit_code == 0, r.output
    assert "low-node-affinity" in r.output and "req/s per GPU" in r.output
    r = CliRunner().invoke(app, ["compare", str(ROOT / "scenarios/distserve-chatbot-colocated.yaml"), str(CHATBOT),
                                 str(ROOT / "scenarios/distserve-chatbot-opt13b-vllm2023.yaml"), "--json"])
    assert r.exit_code == 0, r.output
    import json

    heads = json.loads(r.output)
    assert set(heads) == {"a", "b", "c"}
    assert all(h["goodput_req_per_s_per_gpu"] > 0 for h in heads.values())
