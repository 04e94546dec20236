from pathlib import Path

import pytest

from planner.run import run_scenario
from planner.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def row():
    return run_scenario(load_scenario(ROOT / "scenarios/polca-row-a100.yaml"))


def test_extra_servers_near_the_papers_30_percent(row):
    # POLCA: 30% more servers (52 for a row of 40) in a row whose nameplate peak is 79% of its
    # budget. The load is calibrated to that peak; when the server power model cannot reach it at
    # full load (vllm-2023 since session 4: faster prefill at GEMM 0.8 of the plateau, so shorter
    # bursts at TDP; the row tops out at ~70.9%), the row has 79/peak more headroom than the paper's,
    # and the paper's answer rescales to 1.30 x 0.79 / peak - 1 (45% at 70.9%). The model finds 40%
    # (45% until session 20: A100 GEMMs at MAMF's 0.87 lengthen each prompt burst at TDP).
    # Tolerance +-10 percentage points (two sweep steps): the production trace is not public, so its
    # diurnal shape (trough 40%) and per-second burstiness come from the model; the priority mix is
    # an assumption too.
    peak = row.levels[0].peak_power_fraction
    assert peak <= 0.79 + 0.005                          # calibrated to the trace's peak, or below it
    expected = 1.30 * 0.79 / peak - 1
    assert row.extra_servers_fraction == pytest.approx(expected, abs=0.10)
    if peak < 0.785:
        assert any("cannot reach" in n for n in row.notes)


def test_policy_behaviour_is_monotone_and_safe(row):
    levels = row.levels
    peaks = [lv.peak_power_fraction for lv in levels]
    assert peaks == sorted(peaks)                          # more servers, more power
    ok = [lv for lv in levels if lv.meets_criteria]
    assert all(lv.brake_events == 0 for lv in ok)
    assert all(lv.capped_peak_fraction <= 1.0 for lv in ok)
    assert any(lv.capping_events > 0 for lv in ok)        # the answer relies on capping, not headroom alone
    assert any(not lv.meets_criteria and lv.brake_events > 0 for lv in levels)   # too many servers trip the brake


@pytest.mark.parametrize("field,value,match", [
    ("server_power_w", 100, r"design\.host_idle_w: an idle host of 1500 W does not fit"),
    ("t1", 0.95, r"design\.t1: thresholds must satisfy 0 < t1 < t2 <= 1"),
    ("brake_mhz", 2000, r"design\.brake_mhz: a capped clock must lie in \(0, max_clock_mhz = 1410\]"),
    ("t2_low_mhz", 200, r"design\.brake_mhz: the power brake \(288 MHz\) must clock at or below"),
    ("oversubscription", [], r"design\.oversubscription: expected a non-empty list"),
    # a delay or brake of 1e19 s used to overflow the controllers' int64 step counts (a traceback)
    ("actuation_delay_s", 1e19, r"design\.actuation_delay_s: Input should be less than or equal to 86400"),
    ("brake_s", 1e19, r"design\.brake_s: Input should be less than or equal to 86400"),
    ("days", 1e-300, r"design\.days: expected at least ten minutes of simulated load"),  # was: no steps
])
def test_unphysical_server_or_policy_is_a_located_error(field, value, match):
    """A host idling above its server's provisioned power, thresholds out of order, or a clock
    above the chip's, used to run (or fail deep inside with a budget message): each is the
    scenario's own mistake, named where it is."""
    from planner.errors import InputError

    with pytest.raises(InputError, match=match):
        load_scenario(ROOT / "scenarios" / "polca-row-a100.yaml", [f"design.{field}={value}"])


@pytest.mark.parametrize("name", ["polca-row-a100", "polca-trace-azure"])
def test_a_step_too_short_to_simulate_is_refused_before_any_array_is_made(name):
    """step_s 1e-300 asked numpy for ~1e305 elements (a traceback, from the trace's resampling or
    the diurnal grid) before the rack-step limit was checked; the limit now comes first."""
    from planner.errors import InputError

    scn = load_scenario(ROOT / "scenarios" / f"{name}.yaml", ["design.step_s=1e-300"])
    with pytest.raises(InputError, match=r"design: \d\.\d+e\+\d+ steps x 1 racks is more rack-seconds"):
        run_scenario(scn)
