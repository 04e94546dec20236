"""Error bands: conformal quantiles, regime fall-back, coverage on points not used to build them,
and the bands carried by estimate / throughput / whatif."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import planner
from planner.bands import MIN_POINTS, build, coverage, split, stale
from planner.catalog.bands import Band, BandTable, chain, conformal_quantile, load_bands, lookup
from planner.cli import app
from planner.validate import rows


@pytest.fixture(scope="module")
def residuals():
    return rows()          # every validation point predicted with the current model (~2 s)


def test_conformal_order_statistics():
    # n = 9: (n+1) q = 9 for q = 0.9 -> the 9th smallest; 1 for q = 0.1 -> the smallest; 5 for the median.
    s = np.arange(1.0, 10.0)
    assert conformal_quantile(s, 0.9) == 9.0
    assert conformal_quantile(s, 0.1) == 1.0
    assert conformal_quantile(s, 0.5) == 5.0
    # n = 19: (n+1) 0.9 = 18 -> 18th; (n+1) 0.1 = 2 -> 2nd.
    s = np.arange(1.0, 20.0)
    assert conformal_quantile(s, 0.9) == 18.0 and conformal_quantile(s, 0.1) == 2.0
    # too few points for the level: clipped to the sample's extremes
    assert conformal_quantile(np.array([1.0, 2.0, 3.0]), 0.95) == 3.0


def test_chain_pools_from_fine_to_coarse():
    assert chain("amd", "vllm", "memory", "decode") == [
        "amd/vllm/memory/decode", "amd/*/memory/decode", "amd/*/*/decode", "*/*/memory/decode", "*/*/*/decode"]
    assert chain("amd", None, None, "decode") == ["amd/*/*/decode", "*/*/*/decode"]
    table = BandTable(quantiles=[0.1, 0.9], min_points=10, cells={
        "amd/*/*/decode": Band(regime="amd/*/*/decode", n=10, slowdown=[0.9, 1.2]),
        "*/*/*/decode": Band(regime="*/*/*/decode", n=30, slowdown=[0.8, 1.5])})
    assert lookup("amd", "vllm", "memory", "decode", table).regime == "amd/*/*/decode"
    assert lookup("nvidia", "vllm", "memory", "decode", table).regime == "*/*/*/decode"
    assert lookup("nvidia", None, None, "prefill", table) is None
    assert table.slowdown(table.cells["*/*/*/decode"], 0.5) == pytest.approx(1.15)   # halfway 0.8..1.5


def test_split_is_fixed_and_balanced(residuals):
    held = [r.id for r in residuals if r.role == "held_out"]
    share = np.mean([split(i) == "band" for i in held])
    assert 0.4 < share < 0.6
    assert split("sw-bloom-176b-a100-80g-tp8-p128-prefill") == split("sw-bloom-176b-a100-80g-tp8-p128-prefill")


def test_80_percent_band_covers_70_to_90_percent_of_unseen_points(residuals):
    # Built from the band split only, checked on the check split (never used to build it).
    table = build(residuals)
    assert table.cells and all(b.n >= MIN_POINTS for b in table.cells.values())
    c = coverage(residuals, table, 0.1, 0.9)
    assert c["n"] >= 50
    assert 0.70 <= c["covered"] <= 0.90, c


def test_stored_bands_match_the_current_model(residuals):
    # Fails after any change to the model or the corpus until `python -m planner.bands` is rerun.
    problems = stale(load_bands(), build(residuals))
    assert not problems, "planner/catalog/bands.yaml is stale; run python -m planner.bands\n" + "\n".join(problems)


def test_estimate_and_throughput_carry_ordered_bands():
    e = planner.estimate("llama-3.1-70b", "h100-sxm", tp=4, batch=8, input_len=1000, output_len=200)
    s = planner.throughput("llama-3.1-70b", "mi300x", tp=8, input_len=1000, output_len=200, concurrency=16)
    for r in (e, s):
        for key in ("ttft_s", "tpot_s", "output_tokens_per_s"):
            lo, mid, hi = (getattr(r, f"{key}_p{q}") for q in (10, 50, 90))
            assert lo <= mid <= hi
        assert set(r.bands) == {"prefill", "decode", "serving"}
        assert set(r.regime_bounds.values()) <= {"compute", "memory", "comm", "overhead"}


def test_whatif_json_keeps_its_keys_and_adds_bands():
    r = CliRunner().invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-b", "4", "-i", "512",
                                 "-o", "128", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for key in ("ttft_s", "tpot_s", "output_tokens_per_s", "total_tokens_per_s", "fits"):
        assert key in d
    for key in ("ttft_s", "tpot_s", "output_tokens_per_s"):
        assert d[f"{key}_p10"] <= d[f"{key}_p90"]
    table = CliRunner().invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-b", "4", "-i", "512",
                                     "-o", "128"])
    assert "bands (P10-P90)" in table.stdout


def test_corpus_is_large_spans_vendors_and_keeps_calibration_under_a_third(residuals):
    from planner.validate import corpus

    c = corpus(residuals)
    assert len(residuals) >= 400
    assert set(c["vendor"]) == {"nvidia", "amd", "huawei"}
    calibration = sum(v["calibration"] for v in c["vendor"].values())
    assert calibration <= len(residuals) / 3
    assert sum(v["calibration"] + v["held_out"] for v in c["source"].values()) == len(residuals)


def test_latency_bounded_points_answer_the_most_load_meeting_the_bound():
    from planner.validate import decode_at_tpot_bound, load_points, predict

    pts = {p.id: p for p in load_points().points if p.metric == "decode_tokens_per_s_per_device_at_tpot_bound"}
    loose, tight = pts["cm384-decode-at-tpot-50ms"], pts["cm384-decode-at-tpot-15ms"]
    r = decode_at_tpot_bound(loose, 0.05)
    assert r["batch_per_device"] >= 1 and r["min_tpot_s"] < 0.05
    assert predict(loose) == pytest.approx(r["tokens_per_s_per_device"])
    # at 15 ms no batch meets the bound (the model's TPOT floor is above it): the answer is no load
    assert decode_at_tpot_bound(tight, 0.015)["min_tpot_s"] > 0.015 and predict(tight) == 0.0


def test_unknown_options_never_rewrite_the_band_file(tmp_path, monkeypatch, capsys):
    import planner.bands as bands_cli

    target = tmp_path / "bands.yaml"
    monkeypatch.setattr(bands_cli, "BANDS_FILE", target)
    assert bands_cli.main(["--help"]) == 0
    assert bands_cli.main(["--chek"]) == 2
    assert not target.exists()
    assert "usage" in capsys.readouterr().out
