"""Rack-scale and non-GPU profiles, the dated price table and the cost model that reads it."""

import json
from pathlib import Path

import numpy as np
import pytest

import planner
from planner.catalog.hardware import _figures
from planner.catalog.prices import Purchase, load_price_table, price_table
from planner.errors import InputError
from planner.perf.comm import collective_time
from planner.perf.cost import CostModel
from planner.plan_prices import scenario_hardware
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
NEW = ["gb200-nvl72", "gb300-nvl72", "b300", "gaudi3", "tpu-v5e", "tpu-v6e", "trn2"]


@pytest.mark.parametrize("name", sorted(set(planner.list_hardware())))
def test_every_profile_loads_and_every_figure_has_a_source(name):
    hw = planner.hardware(name)
    for path, fig in _figures(hw):
        assert hw.sources.get(fig.source, "").strip(), f"{name}: {path} cites {fig.source!r}"


def test_new_profiles_present_with_their_domains():
    assert set(NEW) <= set(planner.list_hardware())
    domains = {n: planner.hardware(n).domain_size for n in NEW}
    assert domains == {"gb200-nvl72": 72, "gb300-nvl72": 72, "b300": 8, "gaudi3": 8,
                       "tpu-v5e": 256, "tpu-v6e": 256, "trn2": 16}


def test_nvl72_per_gpu_figures_from_rack_figures():
    # NVIDIA: 130 TB/s of NVLink over 72 GPUs is 1.8 TB/s per GPU (900 GB/s each way) and
    # 576 TB/s of HBM over 72 GPUs is 8 TB/s.
    gb = planner.hardware("gb200-nvl72")
    assert gb.scale_up.bandwidth_per_direction.value * 2 * 72 == pytest.approx(130e12, rel=0.01)
    assert gb.memory.bandwidth.value * 72 == pytest.approx(576e12)
    # Grace: 17 TB LPDDR5X over 72 GPUs ~ 236 GB each, reachable as a KV tier
    gb3 = planner.hardware("gb300-nvl72")
    assert gb3.host_memory.capacity.value * 72 == pytest.approx(17e12, rel=0.01)
    assert gb3.scale_out.bandwidth_per_direction.value == pytest.approx(100e9)   # 800 Gb/s
    assert gb3.domain_size == 72 and gb3.power.tdp.value == 1400


def test_trn2_capacity_is_binary():
    assert planner.hardware("trn2").memory.capacity.value == 96 * 2**30


# -- collectives on a 72-GPU NVLink domain ------------------------------------------------------
def test_nvl72_all_reduce_inside_the_domain_uses_nvlink_and_across_it_the_nic():
    gb = planner.hardware("gb200-nvl72")
    S = 1e9
    # 72 GPUs inside the rack: the measured NCCL curve (Azure, 4 GPUs of one tray) at 1e9 B,
    # log-interpolated between 512 MiB (618.74 GB/s) and 1 GiB (646.87 GB/s): 643.98 GB/s busbw,
    # 2 (n-1)/n S / busbw = 3.06 ms; above the alpha-beta 2 (n-1)/n S / 900 GB/s + 10 us = 2.20 ms
    frac = np.log2(S / 536870912)
    busbw = (618.74 + frac * (646.87 - 618.74)) * 1e9
    inside = 2 * 71 / 72 * S / busbw
    assert inside > 2 * 71 / 72 * S / 900e9 + 10e-6
    # 144 GPUs span two racks: 400 Gb/s ConnectX-7 (50 GB/s) x 0.85 + 15 us
    across = 2 * 143 / 144 * S / (50e9 * 0.85) + 15e-6
    t = collective_time(gb, "all_reduce", S, np.array([72, 144]))
    assert t == pytest.approx([inside, across], rel=1e-9)
    # an 8-GPU HGX B200 node at the same NVLink 5 speed (no measured sweep) falls to the NIC beyond 8
    b200 = planner.hardware("b200")
    assert collective_time(b200, "all_reduce", S, 16) == pytest.approx(2 * 15 / 16 * S / (50e9 * 0.85) + 15e-6)
    assert collective_time(gb, "all_reduce", S, 16) == pytest.approx(2 * 15 / 16 * S / busbw)


def test_nvl72_expert_parallel_all_to_all_in_domain_vs_two_racks():
    gb = planner.hardware("gb200-nvl72")
    S = 64e6
    t72, t144 = collective_time(gb, "all_to_all", S, np.array([72, 144]))
    assert t72 == pytest.approx(71 / 72 * S / 900e9 + 10e-6)
    assert t144 == pytest.approx(143 / 144 * S / 42.5e9 + 15e-6)


def test_deepseek_ep64_stays_on_nvlink_ep128_pays_the_nic():
    # 256 experts: EP64 fits one NVL72 rack, EP128 spans two; per-device traffic barely changes.
    # Across the racks DeepSeek's node-limited routing (4 of 8 groups) sends each token over the
    # NIC to ~1 remote rack at most, so the NIC time is a smaller multiple than k copies would give
    kw = dict(tp=1, input_len=2000, output_len=500, weight_dtype="fp8")
    one = planner.estimate("deepseek-v3", "gb200-nvl72", ep=64, batch=512, **kw)
    two = planner.estimate("deepseek-v3", "gb200-nvl72", ep=128, batch=1024, **kw)
    assert one.fits and two.decode.comm_s > 1.4 * one.decode.comm_s
    # on an 8-GPU HGX B200 node the same EP64 already crosses the NIC
    hgx = planner.estimate("deepseek-v3", "b200", ep=64, batch=512, **kw)
    assert hgx.decode.comm_s > 2 * one.decode.comm_s


def test_search_keeps_instances_inside_a_72_gpu_domain():
    from planner.search import layouts

    lay = layouts(planner.model("deepseek-v3"), planner.hardware("gb200-nvl72"), [1], [8, 32, 64, 128], [1])
    assert sorted(int(e) for e in lay.ep) == [8, 32, 64]


# -- price table --------------------------------------------------------------------------------
def test_price_rows_are_dated_and_sourced():
    t = price_table()
    for name, rows in t.rent.items():
        for r in rows:
            assert r.date[:2] == "20" and t.sources[r.source].strip(), (name, r)


DEFAULT_RATED = ["a100-80g", "h100-sxm", "h200", "b200", "mi300x", "mi325x"]


@pytest.mark.parametrize("name", DEFAULT_RATED)
def test_profile_default_rates_appear_in_the_table(name):
    rent = planner.hardware(name).price.rent
    assert any(abs(r.usd_per_h - rent.value) < 1e-9 and r.date == rent.date for r in price_table().rent[name])


def test_lookup_latest_per_provider_cheapest_overall():
    t = price_table()
    # AWS listed H100 on-demand at $98.32/8 in 2023 and ~$3.90 in 2026: the latest wins
    assert t.rent_row("h100-sxm", Purchase.on_demand, "aws").usd_per_h == 3.90
    # any provider: the cheapest current offer (Lambda $2.99)
    assert t.rent_row("h100-sxm", Purchase.on_demand).provider == "lambda"
    assert t.rent_range("tpu-v6e") == (1.22, 2.70)


def test_missing_price_is_an_error_with_the_way_to_give_one():
    with pytest.raises(InputError, match=r"cost\.prices: \{cloudmatrix384: <US\$ per accelerator-hour>\}"):
        CostModel(purchase="on_demand").usd_per_device_hour(planner.hardware("cloudmatrix384"))
    with pytest.raises(InputError, match=r"no rental price for 'trn2': set cost\.prices: \{trn2: <US\$ per "
                       r"accelerator-hour>\} in the scenario"):     # one closing brace, as YAML wants
        CostModel().usd_per_device_hour(planner.hardware("trn2"))


def test_cost_model_purchase_models():
    v6e = planner.hardware("tpu-v6e")
    assert CostModel(purchase="reserved_1y").usd_per_device_hour(v6e) == 1.89
    assert CostModel(purchase="reserved_3y", provider="gcp").quote(v6e).date == "2024-12"
    # a scenario-named price wins over the table
    assert CostModel(purchase="on_demand", prices={"tpu-v6e": 2.0}).usd_per_device_hour(v6e) == 2.0
    # default (no purchase model): the profile rate, as before the table existed
    assert CostModel().usd_per_device_hour(planner.hardware("h200")) == 5.408


def test_owned_gb200_amortised_plus_energy():
    # $41,667 over 4 years of 8,766 h = $1.1883/h; (1,200 W of GPU + (120 kW - 72 x 1.2 kW) / 72
    # = 466.7 W of rack beyond the GPUs) x PUE 1.3 x $0.08/kWh = $0.17333/h
    q = CostModel(purchase="own").quote(planner.hardware("gb200-nvl72"), avg_power_w=1200)
    assert q.usd_per_h == pytest.approx(41667 / (4 * 8766) + (1200 + 466.7) * 1.3 * 0.08 / 1000, rel=1e-4)
    assert q.purchase == "own" and q.source == "continuum_nvl72"


def test_conflicting_price_names_rejected():
    with pytest.raises(ValueError, match="disagree"):
        CostModel(prices={"h20": 1.85}, usd_per_h={"h20": 2.4})


def test_bad_price_file_names_file_and_line(tmp_path):
    bad = tmp_path / "p.yaml"
    row = "{provider: x, purchase: monthly, usd_per_h: 1, date: 2026, source: aws_cb}"
    bad.write_text(f"rent:\n  h100-sxm:\n    - {row}\n")
    with pytest.raises(InputError, match=r"p\.yaml:3 rent\.h100-sxm\.0\.purchase"):
        load_price_table(bad)


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_scenario_prices_its_hardware(path):
    scn = load_scenario(path)
    if scn.design.type == "polca":
        return
    for name in scenario_hardware(scn):
        assert scn.cost.usd_per_device_hour(planner.hardware(name)) > 0, name


def test_rack_scale_scenario_states_its_on_demand_prices():
    r = planner.run_scenario(load_scenario(ROOT / "scenarios" / "deepseek-v3-rack-scale.yaml"))
    quotes = {q.hardware: q for q in r.prices}
    assert set(quotes) == {"gb200-nvl72", "h200", "mi355x", "cloudmatrix384"}
    gb = quotes["gb200-nvl72"]
    assert (gb.usd_per_h, gb.purchase, gb.provider, gb.date) == (4.54, "on_demand", "spheron", "2026-03-17")
    assert quotes["cloudmatrix384"].purchase == "named"
    # MI355X from the table: the cheapest current on-demand offer (Vultr $2.59, not OCI's $8.60)
    assert (quotes["mi355x"].usd_per_h, quotes["mi355x"].provider) == (2.59, "vultr")
    assert any(n.startswith("prices used: ") for n in r.notes)
    # the deployment's cost is its accelerators at the quoted rate
    assert r.best.usd_per_h == pytest.approx(r.best.accelerators * quotes[r.best.hardware].usd_per_h)


def test_prfaas_equal_cost_says_which_prices_it_used():
    r = planner.run_scenario(load_scenario(ROOT / "scenarios" / "prfaas-case-study.yaml"))
    note = next(n for n in r.notes if n.startswith("prices used: "))
    assert "h20 $2.400/h (named" in note and "h200 $5.408/h (profile default, seen 2024-12; aws_cb)" in note
    assert "equal_cost_throughput" in r.gains


def test_torus_all_to_all_is_bisection_bound_all_reduce_is_not():
    v5e = planner.hardware("tpu-v5e")
    S, B = 1e8, 200e9 * 0.70                      # 200 GB/s per direction x the assumed 0.70
    lat = 15e-6
    # 256 chips = 16 x 16 torus: k S / (2 B) = 8x the switched (n-1)/n S / B
    t256, t4 = collective_time(v5e, "all_to_all", S, np.array([256, 4]))
    assert t256 == pytest.approx(255 / 256 * S / B * 8 + lat)
    assert t4 == pytest.approx(3 / 4 * S / B + lat)          # 2 x 2: no slower than switched
    assert collective_time(v5e, "all_reduce", S, 256) == pytest.approx(2 * 255 / 256 * S / B + lat)
    # the same group on a switched NVL72 is not slowed
    gb = planner.hardware("gb200-nvl72")
    assert collective_time(gb, "all_to_all", S, 64) == pytest.approx(63 / 64 * S / 900e9 + 10e-6)


def test_plan_json_states_prices_for_every_priced_design():
    from typer.testing import CliRunner

    from planner.cli import app

    res = CliRunner().invoke(app, ["plan", str(ROOT / "scenarios" / "fleet-mixed.yaml"), "--json"])
    assert res.exit_code == 0, res.output
    prices = {p["hardware"]: p for p in json.loads(res.stdout)["prices"]}
    assert prices["h200"]["usd_per_h"] == 5.408 and prices["h200"]["purchase"] == "named"
    # POLCA does not price anything: no prices stated
    scn = load_scenario(ROOT / "scenarios" / "polca-row-a100.yaml")
    from planner.plan_prices import scenario_prices

    assert scenario_prices(scn) == []


# -- platform power and the completed MI355X ----------------------------------------------------
def test_platform_power_per_device_hand_derived():
    # (node power - 8 x TDP) / 8: DGX H100 10.2 kW -> 575 W; DGX B200 14.3 kW -> 787.5 W;
    # the MI300X node measured at 7.6 kW with 8 x 750 W GPUs -> 200 W
    assert planner.hardware("h100-sxm").power.platform.value == (10200 - 8 * 700) / 8
    assert planner.hardware("b200").power.platform.value == (14300 - 8 * 1000) / 8
    assert planner.hardware("mi300x").power.platform.value == (7600 - 8 * 750) / 8
    assert planner.hardware("mi325x").platform_w == planner.hardware("mi355x").platform_w == 200
    # ownership pays for the host too: MI300X $15,000 over 4 y + (750 + 200) W x 1.3 x $0.08/kWh
    q = CostModel(purchase="own").quote(planner.hardware("mi300x"), avg_power_w=750)
    assert q.usd_per_h == pytest.approx(15000 / (4 * 8766) + 950 * 1.3 * 0.08 / 1000, rel=1e-4)
    assert "platform 200" in q.note


def test_mi355x_completed():
    hw = planner.hardware("mi355x")
    # AMD: 4,096 / 8,192 / 16,384 FLOPS per clock per CU x 256 CUs x 2.4 GHz
    for fmt, per_clk in (("bf16", 4096), ("fp8", 8192), ("fp6", 16384), ("fp4", 16384)):
        assert hw.peak_flops[fmt].value == pytest.approx(per_clk * 256 * 2.4e9, rel=1e-4)
    assert hw.peak_flops["int8"].value == hw.peak_flops["fp8"].value
    # GEMM plateaus from HipKittens' hipBLASLt baselines: 1,579 / 2,517 and 2,642 / 5,033
    assert hw.efficiency.gemm.value == pytest.approx(1579.2 / 2516.6, abs=0.005)
    assert hw.efficiency.gemm_plateau(planner.catalog.dtypes.DType.fp8) == pytest.approx(2642 / 5033.2, abs=0.005)
    assert "assumed" in hw.sources[hw.efficiency.gemm_by_format["fp4"].source]
    assert hw.efficiency.gemm_plateau(planner.catalog.dtypes.DType.fp6) == hw.efficiency.gemm_plateau(
        planner.catalog.dtypes.DType.fp8)
    assert "assumed from MI300X measured ratio" in hw.efficiency.memory.note
    # 8 GPUs, 7 Infinity Fabric links of ~153.6 GB/s bidirectional each: 537.6 GB/s per direction
    assert hw.domain_size == 8
    assert hw.scale_up.bandwidth_per_direction.value == pytest.approx(7 * 153.6e9 / 2, rel=1e-3)
    t = price_table()
    assert t.rent_range("mi355x") == (2.59, 8.60)
    assert t.rent_row("mi355x", Purchase.reserved_3y).usd_per_h == 2.90


def test_fp6_weights_stream_six_bits():
    from planner.catalog.dtypes import DType

    assert DType.fp6.bytes == 0.75
    assert planner.hardware("mi355x").compute_dtype(DType.fp6) is DType.fp6
    assert planner.hardware("h100-sxm").compute_dtype(DType.fp6) is DType.bf16   # no FP6 units: dequantized
