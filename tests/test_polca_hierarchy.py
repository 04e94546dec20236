"""POLCA with budgets at rack/row/cluster level, other workloads, trace replay and spike outputs."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.catalog.model_catalog import model
from planner.cli import app
from planner.designs import power_sim as ps
from planner.designs.polca import Budget, OtherWorkload, plan_polca, window_rise
from planner.errors import InputError
from planner.scenario import load_scenario
from planner.serving.power_trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
ROW = ROOT / "scenarios/polca-row-a100.yaml"


def _run(tmp_path=None, **design):
    scn = load_scenario(ROW)
    spec = scn.design.model_copy(update=design)
    return plan_polca(model(scn.model), spec, scn.workload, scn.engine, "t")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1.2), min_size=1, max_size=60), st.integers(0, 2))
def test_vectorized_controller_equals_step_by_step(readings, start):
    # Algorithm 1 applied one reading at a time vs the zone formulation over the whole series
    t1, t2, h = 0.80, 0.89, 0.05
    target, expected = start, []
    for p in readings:
        target = int(ps._want(np.array([p]), np.array([target]), t1, t2, h)[0])
        expected.append(target)
    p = np.array(readings)[:, None]
    got = ps._trajectory(p, np.array([start]), np.array([t1]), np.array([t2]), np.array([h]))[:, 0]
    assert got.tolist() == expected


def test_window_rise_by_hand():
    p = np.array([0.0, 5.0, 3.0, 10.0, 2.0])
    assert window_rise(p, 1) == 7.0      # 3 -> 10
    assert window_rise(p, 2) == 7.0      # 3 -> 10 (0 is three steps before 10)
    assert window_rise(p, 3) == 10.0     # 0 -> 10
    assert window_rise(p[::-1], 4) == 8.0   # 2 -> 10 only rises count


def test_a_rack_never_exceeds_its_cap():
    # 8 servers in 2 racks, each rack's budget 3.5 nameplate servers; 50% more servers puts 6 in a
    # rack, whose prompt bursts cross the cap: the brake must hold every rack at or under its cap
    r = _run(servers=8, racks=2, rack_budget=Budget(cap_w=3.5 * 6500), days=0.05, oversubscription=[0.0, 0.5])
    over = r.levels[-1]
    assert over.brake_events_by_level["rack"] > 0           # the cap was really challenged
    assert all(lv.peak_utilization["rack"] <= 1.0 + 1e-12 for lv in r.levels)
    assert r.budgets_w["rack"] == 3.5 * 6500


def test_training_share_sits_on_whole_racks_at_its_draw():
    from planner.designs.polca import _Context, _tree

    scn = load_scenario(ROW)
    spec = scn.design.model_copy(update=dict(racks=10, other=[OtherWorkload(share=0.2, draw=0.97)]))
    ctx = _Context(spec, 260_000.0, None, None, None, None, None, None, None, type("S", (), {
        "braked_w": staticmethod(lambda f: 2000.0)})())
    tree = _tree(ctx, 0.0)
    # 20% of 40 slots = 8 training servers = the last 2 racks of 4, each 4 x 0.97 x 6.5 kW
    assert tree.other_w.tolist() == [0.0] * 8 + [4 * 0.97 * 6500] * 2
    assert (tree.n_low + tree.n_high).tolist() == [4] * 8 + [0, 0]
    tree30 = _tree(ctx, 0.3)                                  # 52 servers: 44 inference over 8 racks
    assert (tree30.n_low + tree30.n_high).sum() == 44


def test_power_trace_replays_its_watts(tmp_path):
    # a constant measured row power of 60% of the budget: the model inverts it to a load whose
    # nameplate row draws exactly that (no synthetic bursts on a measured trace)
    f = tmp_path / "row.csv"
    f.write_text("time_s,power_w\n0,156000\n600,156000\n")
    r = _run(trace=str(f), oversubscription=[0.0])
    assert r.levels[0].peak_power_fraction == pytest.approx(0.60, rel=0.01)
    assert r.levels[0].spike_fraction == pytest.approx(0.0, abs=1e-3)
    assert r.load.endswith("(row power)")


@pytest.mark.parametrize("text, where", [
    ("time_s,power_w\n0,100\n1,abc\n", ":3 power_w"),
    ("time_s,power_w\n0,100\n0,120\n", ":3 time_s"),
    ("t,watts\n0,100\n1,120\n", ":1: header"),
    ("time_s,requests_per_s\n0,-2\n1,3\n", ":2 requests_per_s"),
    ("# comment\ntime_s,power_w\n5,100\n", ":3: a trace needs at least two"),
])
def test_bad_trace_names_file_line_and_column(tmp_path, text, where):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=f"bad.csv{where}"):
        load_trace(f)


def test_bad_trace_exits_2_from_the_cli(tmp_path):
    (tmp_path / "bad.csv").write_text("time_s,power_w\n0,100\n1,oops\n")
    text = ROW.read_text().replace("  oversubscription:", "  trace: bad.csv\n  oversubscription:")
    (tmp_path / "s.yaml").write_text(text)
    r = CliRunner().invoke(app, ["plan", str(tmp_path / "s.yaml")])
    assert r.exit_code == 2
    assert "bad.csv:3 power_w" in r.output


def test_a_rack_cap_below_its_braked_servers_is_infeasible():
    from planner.errors import InfeasibleError

    with pytest.raises(InfeasibleError, match="power brake"):
        _run(servers=8, racks=2, rack_budget=Budget(cap_w=3000), days=0.01, oversubscription=[0.0])


def test_requests_trace_as_given_sets_the_per_server_rate(tmp_path):
    # 20 req/s offered to a 40-server row is 0.5 req/s per server at the peak, not rescaled
    f = tmp_path / "load.csv"
    f.write_text("# a measured hour\ntime_s,requests_per_s\n0,10\n1800,20\n3600,15\n")
    r = _run(trace=str(f), trace_calibrate=False, oversubscription=[0.0])
    assert r.peak_rate_per_server == pytest.approx(0.5)
    assert r.load.endswith("(requests/s)")
    assert r.levels[0].capping_events_per_day == 0.0

