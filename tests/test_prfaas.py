"""Prefill-as-a-Service: the case study computed by the model, the dense counterfactual, bad links."""

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.run import run_scenario
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCN = ROOT / "scenarios/prfaas-case-study.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def case():
    return run_scenario(load_scenario(SCN))


def test_case_study_threshold_and_offload(case):
    # Paper Table 6 / Sec. 4.4: 4 PrfaaS / 3 prefill / 5 decode instances, t = 19.4K, 49.6% of
    # requests offloaded. The split is searched: 4 / 4 / 4 since INT4 experts run at Marlin's
    # plateau (the paper's split until then). It is one local instance off the paper's because the
    # model's H20 decodes 1.33 requests/s per instance at 40 tokens/s where the paper's Table 6 gets
    # 0.78 (3.91 over 5), so one decode instance fewer serves the rate and its prefill takes the
    # eighth. The threshold balances the local prefill instances against the offload path: within
    # 15% (21.3K), the offload fraction within 6 points (45.7%).
    prfaas = case.systems[0]
    assert prfaas.remote_instances == 4 and prfaas.prefill_instances + prfaas.decode_instances == 8
    assert abs(prfaas.prefill_instances - 3) <= 1 and abs(prfaas.decode_instances - 5) <= 1
    assert prfaas.threshold_tokens == pytest.approx(19_400, rel=0.15)
    assert prfaas.offload_fraction == pytest.approx(0.496, abs=0.06)


def test_case_study_gains(case):
    # Paper: 1.54x throughput, -64% P90 TTFT vs homogeneous PD. The model gives 2.00x and -71%
    # (2.27x and -77% before INT4 experts ran at Marlin's plateau): its H200 still prefills faster
    # than the paper's profile (1.31 against 1.84 s at 32K) and its H20 decodes more requests per
    # instance (README). Tolerances: throughput gain in [1.3, 2.6]; P90 reduction within 15 points.
    g = case.gains
    assert 1.3 <= g["throughput"] <= 2.6
    assert g["p90_ttft_reduction"] == pytest.approx(0.64, abs=0.15)
    assert g["vs_naive_heterogeneous"] > 1.0          # selective offload beats offloading everything


def test_dense_counterfactual_needs_more_bandwidth(case):
    hybrid, dense = case.bandwidth_sweep, case.counterfactual["bandwidth_sweep"]
    assert case.counterfactual["kv_bytes_per_token"] > 20 * case.kv_bytes_per_token

    def saturation(sweep):   # least bandwidth reaching 95% of the best gain
        best = max(p["throughput_gain"] for p in sweep)
        return min(p["bandwidth_gbps"] for p in sweep if p["throughput_gain"] >= 0.95 * best)

    assert saturation(dense) >= 2 * saturation(hybrid)
    assert case.counterfactual["break_even_gbps"] > 0       # below it, offload stops paying
    assert min(p["throughput_gain"] for p in dense) < 1.0


def test_simulator_agrees_roughly(case):
    sim = case.simulation
    assert sim.offload_fraction == pytest.approx(case.systems[0].offload_fraction, abs=0.05)
    assert sim.ttft_s["mean"] == pytest.approx(sim.analytic_ttft_queued_s["mean"], rel=0.3)
    assert sim.tpot_s["p90"] <= 1 / 40 * 1.05           # decode SLO: 40 tokens/s per request


def test_zero_bandwidth_is_a_clear_input_error(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text(SCN.read_text().replace("bandwidth_gbps: 100", "bandwidth_gbps: 0")
                 .replace("model: models/", f"model: {ROOT}/scenarios/models/"))
    r = runner.invoke(app, ["plan", str(f)])
    assert r.exit_code == 2 and "design.link.bandwidth_gbps" in r.stderr and "greater than 0" in r.stderr


def test_threshold_no_request_reaches(tmp_path):
    f = tmp_path / "x.yaml"
    text = SCN.read_text().replace("model: models/", f"model: {ROOT}/scenarios/models/")
    text = text.replace("  decode_tokens_per_s: 40", "  decode_tokens_per_s: 40\n  threshold_tokens: 1000000")
    text = text.replace("  simulate_requests: 3000", "  simulate_requests: 0").replace(
        "bandwidth_sweep_gbps: [1, 2, 5, 10, 20, 50, 100, 200, 400, 800]", "bandwidth_sweep_gbps: []")
    f.write_text(text)
    r = run_scenario(load_scenario(f))
    assert r.systems[0].offload_fraction == 0
    assert any("nothing is offloaded" in n for n in r.notes)
    assert math.isfinite(r.systems[0].max_rate)
