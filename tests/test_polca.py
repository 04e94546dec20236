from pathlib import Path

import pytest

from planner.run import run_scenario
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def row():
    return run_scenario(load_scenario(ROOT / "scenarios/polca-row-a100.yaml"))


def test_extra_servers_near_the_papers_30_percent(row):
    # POLCA: 30% more servers (52 for a row of 40). The model finds 35% (+17%). Tolerance +-10
    # percentage points (two sweep steps): the production trace is not public, so its diurnal
    # shape (trough 40%) and per-second burstiness come from the model, only its 79% peak is the
    # paper's; the priority mix is an assumption too.
    assert row.extra_servers_fraction == pytest.approx(0.30, abs=0.10)
    assert row.levels[0].peak_power_fraction == pytest.approx(0.79, abs=0.005)   # calibrated input


def test_policy_behaviour_is_monotone_and_safe(row):
    levels = row.levels
    peaks = [lv.peak_power_fraction for lv in levels]
    assert peaks == sorted(peaks)                          # more servers, more power
    ok = [lv for lv in levels if lv.meets_criteria]
    assert all(lv.brake_events == 0 for lv in ok)
    assert all(lv.capped_peak_fraction <= 1.0 for lv in ok)
    assert any(lv.capping_events > 0 for lv in ok)        # the answer relies on capping, not headroom alone
    assert any(not lv.meets_criteria and lv.brake_events > 0 for lv in levels)   # too many servers trip the brake
