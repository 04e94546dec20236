"""Horizon design: demand curves, the purchase MILP, autoscaling, bad demand files."""

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli import app
from planner.designs.autoscale import AutoscaleSpec, safe_floor, simulate, step_demand
from planner.designs.purchase import PurchaseProblem, Reserved, Spot, solve_purchase
from planner.errors import InputError
from planner.serving.demand import Demand, load_demand_csv, minute_factors

ROOT = Path(__file__).resolve().parent.parent


def _problem(need, od, reserved=(), spot=None, **kw):
    need = np.asarray(need)
    hours = np.ones(len(need))
    return PurchaseProblem(need=need, hours=hours, start_h=np.arange(len(need), dtype=float),
                           on_demand_usd_per_instance_h=od, reserved=list(reserved), spot=spot, **kw)


# -- demand ------------------------------------------------------------------------------------------

def test_parametric_profile_hits_its_peak_trough_weekend_and_growth():
    d = Demand(peak_rate=10, trough_ratio=0.4, peak_hour=14, weekend_factor=0.5, growth_per_month=0.1, hours=24 * 7 * 5)
    s = d.series()
    g = 1.1 ** (np.arange(s.rate.size) / 730.5)
    base = s.rate / g
    assert base[14] == pytest.approx(10)              # Monday 14:00
    assert base[2] == pytest.approx(4)                # Monday 02:00, 12 h from the peak
    assert base[5 * 24 + 14] == pytest.approx(5)      # Saturday 14:00: weekend half
    assert s.rate[731] / s.rate[731 - 168 * 4] == pytest.approx(1.1 ** (168 * 4 / 730.5))   # same weekday hour
    assert base.max() == pytest.approx(10) and base.min() == pytest.approx(2)


def test_within_hour_factors_are_burstier_than_poisson():
    f = minute_factors("azure-conv-2023")
    assert f.mean() == pytest.approx(1.0)
    # 19,366 requests in ~58 full minutes: ~333 a minute, Poisson CV 1/sqrt(333) = 0.055
    assert 0.15 < f.std() < 0.3
    assert minute_factors("azure-code-2023").std() > 0.8


def _csv(tmp_path, text, name="d.csv"):
    p = tmp_path / name
    p.write_text(text)
    load_demand_csv.cache_clear()
    return str(p)


def test_demand_csv_with_timestamps_and_lengths(tmp_path):
    s = load_demand_csv(_csv(tmp_path, "timestamp,requests_per_s,mean_input_tokens\n"
                                       "2024-05-10 06:00:00,5,1000\n2024-05-10 07:00:00,7,1200\n"
                                       "2024-05-10 09:00:00,2,800\n"))
    assert s.clock_h0 == pytest.approx(6.0)
    assert s.start_h.tolist() == [0, 1, 3] and s.duration_h.tolist() == [1, 2, 2]
    assert s.rate.tolist() == [5, 7, 2] and s.mean_input.tolist() == [1000, 1200, 800] and s.mean_output is None


@pytest.mark.parametrize("text, where", [
    ("hour,foo\n0,1\n", ":1 requests_per_s: no rate column"),
    ("rate\n1\n", ":1 timestamp: no time column"),
    ("hour,rate\n0,1\n1,-2\n", ":3 rate: requests/s must be >= 0"),
    ("hour,rate\n0,1\n2,1\n1,1\n", ":4 hour: time '1' is earlier"),
    ("hour,rate\n0,1\n1,1\n1,3\n", ":4 hour: time '1' is duplicated"),
    ("", ":1: demand file is empty"),
    ("hour,rate\n", ":2: demand file has a header but no rows"),
    ("hour,rate\n0,abc\n", ":2 rate: expected a number, got 'abc'"),
    ("hour,rate\n0,1\n1\n", ":3 rate: missing value"),
])
def test_bad_demand_files_name_file_line_and_column(tmp_path, text, where):
    path = _csv(tmp_path, text)
    with pytest.raises(InputError) as e:
        load_demand_csv(path)
    assert str(e.value).startswith(path) and where in str(e.value)


def test_bad_demand_file_exits_2_through_the_cli(tmp_path):
    scn = (ROOT / "scenarios/horizon-chat-batch-week.yaml").read_text()
    scn = scn.replace("demand: {peak_rate: 20, trough_ratio: 0.4, peak_hour: 14, weekend_factor: 0.7, hours: 168}",
                      "demand: {csv: bad.csv}")
    (tmp_path / "s.yaml").write_text(scn)
    (tmp_path / "bad.csv").write_text("hour,rate\n0,3\n0,4\n")
    r = CliRunner().invoke(app, ["plan", str(tmp_path / "s.yaml")])
    assert r.exit_code == 2
    assert "bad.csv:3 hour: time '0' is duplicated" in r.output


# -- purchase MILP ------------------------------------------------------------------------------------

def _brute_force(need, od, res_price, res_min, spot):
    """Enumerate reserved counts, then per period every on-demand/spot count (whole instances)."""
    best = math.inf
    for R in range(0, max(need) + 2):
        if 0 < R < res_min:
            continue
        total = res_price * R * len(need)
        for n in need:
            cheapest = math.inf
            for s in range(0, 2 * n + 2):
                if spot.availability * s > spot.max_share * n + 1e-9:
                    break
                o = max(0, math.ceil(n - min(R, n) - spot.availability * s - 1e-9))
                cheapest = min(cheapest, o * od + s * spot.effective_usd_per_instance_h)
            total += cheapest
        best = min(best, total)
    return best


@pytest.mark.parametrize("need, res_price, res_min", [
    ([1, 3, 2, 0, 4], 0.6, 0), ([2, 2, 5, 1], 0.8, 3), ([0, 6, 6, 1, 2, 3], 0.45, 2)])
def test_milp_equals_brute_force_on_small_cases(need, res_price, res_min):
    spot = Spot(0.3, availability=0.8, preemptions_per_h=0.1, restart_h=0.05, max_share=0.5)
    plan = solve_purchase(_problem(need, 1.0, [Reserved("r", res_price, 1e9, res_min)], spot))
    assert plan.total_usd == pytest.approx(_brute_force(need, 1.0, res_price, res_min, spot), rel=1e-9)
    cap = plan.used_reserved + plan.on_demand + 0.8 * plan.spot
    assert (cap >= np.asarray(need) - 1e-9).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=2, max_size=8), st.floats(0.0, 1.0))
def test_reserved_never_exceeds_the_minimum_need_when_it_costs_more_than_on_demand_over_the_term(need, x):
    # a reserved instance costs more over the term than on-demand used every hour but one:
    # any reserved instance beyond the minimum need is idle for at least an hour, so on-demand wins
    H = len(need)
    price = (H - 1) / H * (1 + 1e-6) + x
    plan = solve_purchase(_problem(need, 1.0, [Reserved("r", price, 1e9)]))
    assert plan.reserved["r"] <= min(need)


def test_flat_demand_without_spot_buys_the_steady_state_plan():
    from planner.catalog.model_catalog import model
    from planner.designs.colocated import plan_colocated
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    scn = load_scenario(ROOT / "scenarios/horizon-chat-batch-week.yaml")
    flat = scn.workload.demand.model_copy(update={"trough_ratio": 1.0, "weekend_factor": 1.0, "hours": 48})
    design = scn.design.model_copy(update={"batch": None, "energy": None, "autoscale": None})
    r = run_scenario(scn.model_copy(update={"workload": scn.workload.model_copy(update={"demand": flat}),
                                            "design": design}))
    s = scn.search
    steady = plan_colocated(model(scn.model), scn.workload.with_rate(20), scn.slo, scn.engine, scn.cost, s.hardware,
                            s.tp, s.ep, s.pp, s.weight_dtype, s.kv_dtype)[0]
    assert set(r.periods["need"]) == {steady.instances}
    assert r.reserved["1yr-lease"] == steady.instances               # reserved at 60% beats on-demand
    assert r.periods["on_demand"] == [0.0] * 48
    assert r.totals["total"] == pytest.approx(0.6 * steady.usd_per_h * 48)
    assert r.deployment.startswith(f"{steady.hardware} tp{steady.tp}")


def test_time_of_use_energy_and_batch_fill_the_night():
    # 2 reserved instances paying their own power; chat needs 2 by day, 1 at night; batch work of
    # 3 instance-hours per day: it should run on the idle reserved instance at night (cheap power)
    # rather than on on-demand or the day
    need = np.array([1] * 6 + [2] * 12 + [1] * 6)
    energy = np.where((np.arange(24) < 6) | (np.arange(24) >= 18), 0.01, 0.05)
    p = _problem(need, 1.0, [Reserved("r", 0.5, 1e9, pays_energy=True)], energy_usd_per_instance_h=energy,
                 batch_window=np.zeros(24, int), batch_instance_h=np.array([3.0]))
    plan = solve_purchase(p)
    assert plan.reserved["r"] == 2
    night = (np.arange(24) < 6) | (np.arange(24) >= 18)
    assert plan.batch[night].sum() == pytest.approx(3.0) and plan.on_demand.sum() == 0
    # energy: running instance-hours x price; day 2 x 12 x 0.05, night (1 + batch 3 h) x 0.01
    assert plan.cost_energy.sum() == pytest.approx(2 * 12 * 0.05 + (12 + 3) * 0.01)


# -- autoscaling ----------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 50.0), min_size=1, max_size=30), st.integers(0, 1000))
def test_zero_delay_and_unlimited_replicas_meet_the_slo_every_hour(rates, seed):
    spec = AutoscaleSpec(scale_up_delay_s=0, max_replicas=None, min_replicas=0, target_utilization=0.9)
    sd = step_demand(np.array(rates), np.ones(len(rates)), minute_factors("azure-code-2023"), 60, seed)
    run = simulate(sd, 3.0, spec, 0.0, periods=len(rates))
    assert (run.hourly_attainment >= 1 - 1e-12).all()


def test_scale_up_delay_costs_attainment_and_a_floor_restores_it():
    rates = np.array([1.0, 1.0, 30.0, 30.0, 2.0])        # a step the controller cannot see coming
    spec = AutoscaleSpec(scale_down_delay_s=0, min_replicas=1, target_utilization=1.0)
    sd = step_demand(rates, np.ones(5), np.ones(1), 60, 0)
    slow = simulate(sd, 1.0, spec, 1800.0, periods=5)     # 30 min to bring a replica up
    # hour 3: 30 req/s, 1 replica for the first 30 minutes, 30 after: 1/30 x 1/2 + 1/2 of requests served
    assert slow.hourly_attainment[2] == pytest.approx(0.5 + 0.5 / 30)
    assert slow.hourly_attainment[3] == pytest.approx(1.0)
    assert safe_floor(sd, 1.0, spec, 1800.0, 5) == 30


@pytest.mark.parametrize("delay_s", [1e19, float("inf")])
def test_a_replica_that_never_boots_within_the_run(delay_s):
    """A scale-up delay longer than the run (a 1e19 s provisioning time, or a weight load at 1e-300
    B/s: inf) is a replica that never arrives: the first hour's replica serves it all, as with a
    delay of exactly the run's length plus one step; it used to allocate a list of 1e17 slots."""
    rates = np.array([1.0, 1.0, 30.0, 30.0, 2.0])
    spec = AutoscaleSpec(scale_down_delay_s=delay_s, min_replicas=1, target_utilization=1.0)
    sd = step_demand(rates, np.ones(5), np.ones(1), 60, 0)
    never = simulate(sd, 1.0, spec, delay_s, periods=5)
    edge = simulate(sd, 1.0, spec.model_copy(update={"scale_down_delay_s": 301 * 60.0}), 301 * 60.0, periods=5)
    assert np.array_equal(never.replicas, edge.replicas) and np.array_equal(never.paid, edge.paid)
    assert never.replicas.max() == 1                             # nobody arrives, nobody leaves
    assert never.hourly_attainment[2] == pytest.approx(1 / 30)


def test_step_demand_keeps_each_hour_mean():
    f = minute_factors("azure-conv-2023")
    sd = step_demand(np.array([4.0, 9.0]), np.ones(2), f, 60, 3)
    assert sd.rate.size == 120
    assert sd.rate[:60].mean() == pytest.approx(4.0) and sd.rate[60:].mean() == pytest.approx(9.0)


# -- scenarios ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def week():
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    return run_scenario(load_scenario(ROOT / "scenarios/horizon-chat-batch-week.yaml"))


def test_week_scenario_batch_runs_mostly_on_idle_reserved_capacity(week):
    assert week.batch["on_reserved_share"] > 0.5
    assert week.totals["total"] < week.comparisons["follow_demand_on_demand"]
    assert week.totals["total"] < week.comparisons["static_peak_on_demand"]
    assert week.autoscale["safe_floor"] is not None
    assert len(week.autoscale["hourly_attainment"]) == 168


def test_horizon_csv_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "h.csv", tmp_path / "h.png"
    r = CliRunner().invoke(app, ["plan", str(ROOT / "scenarios/horizon-chat-batch-week.yaml"), "--csv", str(out),
                                 "--plot", str(png)])
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert lines[0].startswith("start_h,hours,rate,need") and len(lines) == 169
    assert png.stat().st_size > 10_000


def test_brute_force_helper_agrees_with_hand_count():
    # 2 periods needing 1 and 3, reserved 0.6/h, on-demand 1/h, no useful spot (share 0):
    # R=1: 1.2 + 0 + 2 = 3.2; R=3: 3.6; R=0: 4 -> 3.2
    spot = Spot(10.0, max_share=0.0)
    assert _brute_force([1, 3], 1.0, 0.6, 0, spot) == pytest.approx(3.2)


def test_fleet_inner_scales_the_grid_fleets_within_availability(tmp_path):
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    text = (ROOT / "scenarios/fleet-mixed.yaml").read_text()
    text = text.replace("  rate: 40\n", "  demand: {peak_rate: 40, hours: 24}\n")
    text = text.replace("design:\n  type: fleet\n  buckets: 4\n  available: {mi300x: 2, h200: 6}",
                        "design:\n  type: horizon\n  inner: fleet\n"
                        "  fleet: {buckets: 4, available: {mi300x: 2, h200: 6}}")
    (tmp_path / "f.yaml").write_text(text)
    scn = load_scenario(tmp_path / "f.yaml")
    r = run_scenario(scn)
    peak = run_scenario(load_scenario(ROOT / "scenarios/fleet-mixed.yaml"))
    need = {k[5:]: np.array(v) for k, v in r.periods.items() if k.startswith("need_")}
    assert need.get("mi300x", np.zeros(1)).max() <= 2 and need.get("h200", np.zeros(1)).max() <= 6
    at_peak = int(np.argmax(r.periods["rate"]))             # 14:00: the grid's top point, the fleet at 40 req/s
    assert {h: int(n[at_peak]) for h, n in need.items() if n[at_peak]} == peak.instances
    assert (np.array(r.periods["need"])[np.array(r.periods["rate"]) < 20] <= sum(peak.instances.values())).all()


def test_longer_prompts_in_a_period_lower_its_capacity(tmp_path):
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    (tmp_path / "d.csv").write_text("hour,requests_per_s,mean_input_tokens,mean_output_tokens\n"
                                    "0,10,1155,211\n1,10,4620,211\n2,10,1155,211\n")
    scn = (ROOT / "scenarios/horizon-chat-batch-week.yaml").read_text().replace(
        "demand: {peak_rate: 20, trough_ratio: 0.4, peak_hour: 14, weekend_factor: 0.7, hours: 168}",
        "demand: {csv: d.csv}")
    scn = scn.replace("  batch: {requests_per_day: 600000, window_h: 24}\n", "")
    (tmp_path / "s.yaml").write_text(scn)
    load_demand_csv.cache_clear()
    r = run_scenario(load_scenario(tmp_path / "s.yaml"))
    need = r.periods["need"]
    assert need[0] == need[2] and need[1] > need[0]       # 4x longer prompts at the same rate need more


def test_safe_target_utilization_is_the_headroom_a_late_replica_needs():
    from planner.designs.autoscale import safe_target_utilization

    # rate rises 10 -> 12 req/s (capacity 1 each) and the new replicas arrive 30 minutes late:
    # only replicas already up at 10 req/s serve the first half hour, so the second hour is fully
    # served only if the controller already runs 12 replicas at 10 req/s: ceil(10 / u) >= 12, u < 10/11
    rates = np.array([10.0, 12.0])
    spec = AutoscaleSpec(scale_down_delay_s=3600, min_replicas=0, hourly_target=1.0)
    sd = step_demand(rates, np.ones(2), np.ones(1), 60, 0)
    u = safe_target_utilization(sd, 1.0, spec, 1800.0, 2, iterations=10)
    assert 10 / 11 - 1 / 1024 <= u < 10 / 11
    assert safe_target_utilization(step_demand(np.array([5.0, 5.0]), np.ones(2), np.ones(1), 60, 0), 1.0, spec,
                                   1800.0, 2) == 1.0


def test_splitwise_inner_scales_each_pool_of_the_cheapest_cluster():
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    scn = load_scenario(ROOT / "tests/data/horizon-splitwise.yaml")
    split_only = scn.design.splitwise.model_copy(update={"baselines": []})
    design = scn.design.model_copy(update={"splitwise": split_only, "autoscale": AutoscaleSpec()})
    r = run_scenario(scn.model_copy(update={"design": design}))
    rate = np.array(r.periods["rate"])
    prompt, token = np.array(r.periods["need_h100-sxm prompt"]), np.array(r.periods["need_a100-80g token"])
    # 2 prompt + 2 token machines serve R req/s (the Splitwise design's own evaluation): each pool
    # scales as ceil(2 r / R)
    from planner.catalog.model_catalog import model
    from planner.designs.splitwise import plan_splitwise

    R = plan_splitwise(model(scn.model), split_only, scn.workload, scn.slo, scn.engine, scn.cost.usd_per_h,
                       "x").rows[0].max_rate
    assert (prompt == token).all()
    assert (prompt == np.ceil(2 * rate / R * (1 - 1e-9))).all()
    assert r.hardware == "h100-sxm + a100-80g" and len(r.reserved) == 2
    assert r.autoscale is None and set(r.autoscale_pools) == {"h100-sxm prompt", "a100-80g token"}
    assert all(len(a["hourly_attainment"]) == 48 for a in r.autoscale_pools.values())


def test_staggered_reservations_follow_a_step_in_demand():
    # 10 h at 1 instance then 10 h at 3; 10-hour commitments at 0.5/h may start at hour 0 or 10:
    # buy 1 at hour 0 and 3 at hour 10, nothing on demand: 0.5 x (1 x 10 + 3 x 10) = 20
    need = np.array([1] * 10 + [3] * 10)
    res = [Reserved("r", 0.5, 10.0), Reserved("r@10", 0.5, 10.0, start_h=10.0)]
    plan = solve_purchase(_problem(need, 1.0, res))
    assert plan.reserved == {"r": 1, "r@10": 3}
    assert plan.total_usd == pytest.approx(20.0) and plan.on_demand.sum() == 0
