import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.designs.colocated import Deployment, verify_by_simulation
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_plan_json_meets_slos_and_simulator_confirms():
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios/chat-h100.yaml"), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    best = Deployment(**res["best"])
    assert best.ttft_s["p90"] <= 1.0 and best.tpot_s["p90"] <= 0.05 and best.ttft_s["p50"] <= 0.5
    # run the simulator ourselves on exactly that deployment, with another seed
    scn = load_scenario(ROOT / "scenarios/chat-h100.yaml")
    check = verify_by_simulation(planner.model(scn.model), best, scn.workload, scn.slo, scn.engine,
                                 requests=20_000, seed=123)
    assert check.meets_slo, check.violations
    assert check.requests_per_s == pytest.approx(20.0, rel=0.03)


@pytest.mark.parametrize("name", ["chat-h100", "rag-longctx-mi300x", "deepseek-v3-cloudmatrix",
                                  "splitwise-iso-power-conv", "splitwise-iso-cost-conv", "splitwise-iso-power-code",
                                  "splitwise-iso-cost-code", "polca-row-a100", "prfaas-case-study",
                                  "llama70b-slo-search", "fleet-mixed"])
def test_bundled_scenarios_plan(name):
    r = runner.invoke(app, ["plan", str(ROOT / f"scenarios/{name}.yaml")])
    assert r.exit_code == 0, r.output
    assert any(k in r.stdout for k in ("cheapest", "largest request rate meeting the SLOs", "more servers",
                                       "PrfaaS vs homogeneous PD", "Pareto front", "fleet $"))


def test_schema_is_json():
    r = runner.invoke(app, ["schema"])
    assert r.exit_code == 0
    assert "workload" in json.loads(r.stdout)["properties"]


GOOD = (ROOT / "scenarios/chat-h100.yaml").read_text()


@pytest.mark.parametrize("mutate,match", [
    (lambda s: s.replace("rate: 20 ", "rate: -3 "), r"x\.yaml:\d+ workload\.rate: .*greater than or "
                                                    r"equal to 0.000001, got -3"),
    (lambda s: s.replace("slo:", "slo:\n  tpot: {p90: 0.1}"), r"slo\.tpot: unknown key; did you mean 'tpot_s'"),
    (lambda s: s.replace("tp: [1, 2, 4, 8]", "tp: [1, two]"), r"search\.tp\.1: .*integer"),
    (lambda s: s.replace("{p50: 0.5, p90: 1.0}", "{p50: 2.0, p90: 1.0}"), r"slo\.ttft_s: .*must not decrease"),
    (lambda s: s.replace("hardware: [h100-sxm]", "hardware: [h100]"), r"search\.hardware: .*did you mean 'h100-sxm'"),
    (lambda s: s.replace("model: llama-3.1-70b", "model: llama-3-70b"), r"x\.yaml:\d+ model: .*did you mean"),
    (lambda s: s.replace("slo:", "slo: [oops"), r"x\.yaml:\d+: YAML syntax error"),
    # a real key in the wrong section: where it belongs, never "did you mean" the key itself
    (lambda s: s + "design: {type: colocated, hardware: h100-sxm}\n",
     r"x\.yaml:\d+ design\.hardware: unknown key in this section \(its keys: type\); 'hardware' belongs in "
     r"search\.hardware"),
])
def test_bad_scenarios_exit_2_with_location(tmp_path, mutate, match):
    f = tmp_path / "x.yaml"
    f.write_text(mutate(GOOD))
    r = runner.invoke(app, ["plan", str(f)])
    assert r.exit_code == 2, r.output
    import re
    assert re.search(match, r.stderr), r.stderr
    assert "Traceback" not in r.stderr


def test_bad_trace_file_exit_2(tmp_path):
    (tmp_path / "t.csv").write_text("timestamp,input_tokens\n0,5\n")
    f = tmp_path / "x.yaml"
    f.write_text(GOOD.replace("trace: azure-conv-2023", "trace: t.csv"))
    r = runner.invoke(app, ["plan", str(f)])
    assert r.exit_code == 2 and "no output-token column" in r.stderr


def test_unmeetable_slo_exit_1_names_the_constraint(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text(GOOD.replace("tpot_s: {p90: 0.05}", "tpot_s: {p90: 0.002}"))
    r = runner.invoke(app, ["plan", str(f)])
    assert r.exit_code == 1
    assert "tpot_s.p90 <= 0.002" in r.stderr and "best achievable" in r.stderr


def test_ownership_cost_adds_energy():
    scn = load_scenario(ROOT / "scenarios/rag-longctx-mi300x.yaml")
    from planner.run import run_scenario
    b = run_scenario(scn.model_copy(update={"simulate": None})).best
    capex = b.accelerators * 15000 / (4 * 365.25 * 24)
    # the devices' average draw plus each MI300X's 200 W share of its node (host, NICs, fans)
    energy = (b.avg_power_w + b.accelerators * 200) * 1.3 / 1000 * 0.08
    assert b.usd_per_h == pytest.approx(capex + energy, rel=1e-6)
    assert np.isfinite(b.output_tokens_per_joule) and b.peak_power_w <= b.provisioned_power_w * (1 + 1e-9)


def test_plot_needs_matplotlib_or_draws(tmp_path):
    out = tmp_path / "p.png"
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios/polca-row-a100.yaml"), "--plot", str(out)])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert r.exit_code == 2 and "pip install 'planner[plot]'" in r.stderr
    else:
        assert r.exit_code == 0 and out.stat().st_size > 1000


def test_csv_and_compare(tmp_path):
    out = tmp_path / "front.csv"
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios/llama70b-slo-search.yaml"), "--csv", str(out)])
    assert r.exit_code == 0 and out.read_text().startswith("mode,hardware,")
    r = runner.invoke(app, ["compare", str(ROOT / "scenarios/llama70b-slo-search.yaml"),
                            str(ROOT / "scenarios/fleet-mixed.yaml"), "--json"])
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert data["a"]["design"] == "slo-search" and data["b"]["design"] == "fleet"
