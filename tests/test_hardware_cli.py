"""planner hardware list / compare: scale-up domain, price range, per-dollar roofline ratios."""

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


def _json(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_list_has_domain_and_price_range():
    rows = {r["name"]: r for r in _json(["hardware", "list", "--json"])}
    assert rows["gb200-nvl72"]["domain"] == 72 and rows["cloudmatrix384"]["domain"] == 384
    # H100: AWS on-demand at launch ($98.32 / 8) down to $2.25 spot on AWS and GCP (prices.yaml)
    assert rows["h100-sxm"]["usd_per_h_range"] == [2.25, 12.29]
    assert rows["trn2"]["usd_per_h_range"] is None


def test_compare_per_dollar_ratios_by_hand():
    rows = _json(["hardware", "compare", "h200", "tpu-v6e", "--purchase", "on_demand", "--json"])
    h200, v6e = rows
    # H200 on demand $4.54/h (Spheron 2026-03): 989.4e12 FLOP/s x 3600 s / $4.54
    assert h200["bf16_flop_per_usd"] == pytest.approx(989.4e12 * 3600 / 4.54)
    # TPU v6e on demand $2.70/chip-h (GCP): 1,638 GB/s x 3600 / 2.70
    assert v6e["hbm_bytes_per_usd"] == pytest.approx(1638e9 * 3600 / 2.70)
    assert v6e["ridge_flop_per_byte"] == pytest.approx(918e12 / 1638e9)


def test_compare_with_model_gives_tokens_per_dollar():
    rows = _json(["hardware", "compare", "h100-sxm", "h200", "--model", "llama-3.1-8b", "--weight-dtype", "bf16",
                  "--json"])
    for r in rows:
        s = r["serving"]
        assert s["output_tokens_per_s_per_device"] > 0
        assert r["output_tokens_per_usd"] == pytest.approx(s["output_tokens_per_s_per_device"] * 3600 / r["usd_per_h"])
    # same compute, 1.43x the HBM bandwidth: H200 serves more tokens per device
    assert rows[1]["serving"]["output_tokens_per_s_per_device"] > rows[0]["serving"]["output_tokens_per_s_per_device"]


def test_compare_missing_price_says_how_to_give_one():
    rows = _json(["hardware", "compare", "mi355x", "h200", "--purchase", "spot", "--json"])
    assert rows[0]["usd_per_h"] is None and "cost.prices" in rows[0]["price"]


def test_compare_bad_input_exit_2():
    assert runner.invoke(app, ["hardware", "compare", "h200"]).exit_code == 2
    res = runner.invoke(app, ["hardware", "compare", "h200", "b200", "--purchase", "monthly"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert runner.invoke(app, ["hardware", "compare", "h200", "h300"]).exit_code == 2


def test_compare_named_price_fills_a_gap():
    rows = _json(["hardware", "compare", "cloudmatrix384", "h200", "--purchase", "on_demand", "--price",
                  "cloudmatrix384=2.0", "--json"])
    assert rows[0]["usd_per_h"] == 2.0 and "named" in rows[0]["price"]
    assert rows[0]["hbm_bytes_per_usd"] == pytest.approx(3.2e12 * 3600 / 2.0)
    assert runner.invoke(app, ["hardware", "compare", "mi355x", "h200", "--price", "mi355x"]).exit_code == 2
