"""Plans sized at a confidence quantile of the error bands (planner.confidence, catalog/derate.py)."""

from pathlib import Path

import pytest

import planner
from planner.catalog import bands
from planner.catalog.derate import derate, performance_at
from planner.confidence import price_of_certainty
from planner.errors import InputError
from planner.run import run_scenario
from planner.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _chat(rate: float, confidence: float, tp: list[int]):
    scn = load_scenario(SCENARIOS / "chat-h100.yaml")
    return scn.model_copy(update={
        "confidence": confidence, "simulate": None,
        "workload": scn.workload.model_copy(update={"rate": rate}),
        "search": scn.search.model_copy(update={"tp": tp, "weight_dtype": scn.search.weight_dtype[1:]})})


def test_derate_scales_every_step_time_by_its_factor():
    # Doubling compute time and tripling the rest: a compute-bound prefill takes ~2x, a
    # memory-bound decode step ~3x (kernel latency and overhead scale by 3 too).
    from planner.catalog.frameworks import with_framework

    hw = with_framework(planner.hardware("h100-sxm"))    # the engine's overheads derated too
    base = planner.estimate("llama-3.1-8b", hw, batch=1, input_len=8192, output_len=64)
    slow = planner.estimate("llama-3.1-8b", derate(hw, 2.0, 3.0), batch=1, input_len=8192, output_len=64)
    assert base.prefill.bound == "compute" and base.decode.bound == "memory"
    assert slow.ttft_s / base.ttft_s == pytest.approx(2.0, rel=0.1)   # its 5 ms request overhead x3
    # (a batch-1 GEMM's compute, ~1/300 of its streaming, enters the 2-norm of the two at ~1e-5:
    # doubled rather than tripled, it moves the ratio by ~1e-5)
    assert slow.tpot_s / base.tpot_s == pytest.approx(3.0, rel=1e-4)


def test_median_plan_is_the_model_and_hardware_objects_pass_through():
    hw = planner.hardware("h100-sxm")
    with performance_at(0.5) as q:
        assert planner.hardware("h100-sxm") is hw                 # factor 1 at the median
    with performance_at(0.9) as q:
        slow = planner.hardware("h100-sxm")
        assert planner.hardware(slow) is slow                      # never derated twice
    assert q.factors["h100-sxm"]["other"] >= 1.0
    assert slow.memory.bandwidth.value == pytest.approx(hw.memory.bandwidth.value / q.factors["h100-sxm"]["other"])


@pytest.mark.parametrize("rate", [5.0, 20.0, 60.0])
def test_confidence_90_never_uses_fewer_instances_than_50(rate):
    r = run_scenario(_chat(rate, 0.9, [2]))
    c = r.certainty
    assert c["confidence"] == 0.9
    assert c["at_confidence"]["instances"] >= c["at_p50"]["instances"]
    assert c["at_confidence"]["usd_per_h"] >= c["at_p50"]["usd_per_h"]
    assert r.best.instances == c["at_confidence"]["instances"]


def test_zero_width_band_gives_equal_plans(monkeypatch):
    flat = bands.BandTable(quantiles=[0.1, 0.5, 0.9], min_points=10, cells={
        k: bands.Band(regime=k, n=20, slowdown=[1.3, 1.3, 1.3]) for k in ("*/*/*/serving",)})
    monkeypatch.setattr(bands, "load_bands", lambda *a: flat)
    r = run_scenario(_chat(20.0, 0.9, [1, 2, 4]))
    assert r.certainty["at_confidence"] == r.certainty["at_p50"]
    assert r.certainty["slowdown"]["h100-sxm"] == {"compute": 1.0, "other": 1.0}


def test_price_of_certainty_text():
    text = price_of_certainty(0.9, {"instances": 4, "accelerators": 8, "usd_per_h": 39.3},
                              {"instances": 6, "accelerators": 12, "usd_per_h": 47.2})
    assert text == "+2 instances (+4 accelerators), +$7.9/h for 90%"


def test_confidence_is_validated_and_defaults_to_median(tmp_path):
    scn = load_scenario(SCENARIOS / "chat-h100.yaml")
    assert scn.confidence == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text((SCENARIOS / "chat-h100.yaml").read_text() + "confidence: 1.5\n")
    with pytest.raises(InputError, match="confidence"):
        load_scenario(bad)


def test_price_of_certainty_of_a_fixed_budget_design():
    # Splitwise-style designs keep their budget; the rate it buys is what moves.
    text = price_of_certainty(0.9, {"max_rate": 10.0, "usd_per_h": 50.0}, {"max_rate": 8.0, "usd_per_h": 50.0})
    assert text == "max_rate 10 -> 8 for 90%"


def test_bundled_90_percent_scenario_prints_the_price_of_certainty():
    from typer.testing import CliRunner

    from planner.cli import app

    r = CliRunner().invoke(app, ["plan", str(SCENARIOS / "chat-h100-p90.yaml")])
    assert r.exit_code == 0, r.output
    assert "confidence 90%" in r.stdout and "for 90%" in r.stdout
