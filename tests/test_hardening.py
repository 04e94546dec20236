"""Regression tests of issue #17: every bad input a new user tried gets a clean ``file:line field``
error (exit 2), never a traceback, a hang or a plan built on nonsense; outputs never clobber."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import planner
from planner.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent

BASE = """\
name: t
model: llama-3.1-8b
workload:
  rate: 5
  input: {dist: fixed, value: 512}
  output: {dist: fixed, value: 128}
slo:
  ttft_s: {p90: 2.0}
  tpot_s: {p90: 0.1}
search:
  hardware: [h100-sxm]
  tp: [1]
"""
PROFILE = """\
name: myhw
base: h100-sxm
description: an H100 with one figure changed
"""


def _plan(path: Path, *extra: str):
    return runner.invoke(app, ["plan", str(path), "--json", *extra])


def _bad(r, *needles: str) -> None:
    """Exit 2, one clean line on stderr containing every needle, nothing on stdout."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def _scenario(tmp_path: Path, text: str | bytes, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def _subprocess_plan(path: Path, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """In a child process: today's failure modes include a segfault and a hang."""
    return subprocess.run([sys.executable, "-m", "planner", "plan", str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


# -- 1. reading files ------------------------------------------------------------------------------
def test_latin1_scenario_names_file_and_line(tmp_path):
    p = _scenario(tmp_path, BASE.replace("name: t", "name: café").encode("latin-1"))
    _bad(_plan(p), f"{p}:1", "UTF-8")


def test_utf16_scenario_is_named(tmp_path):
    p = _scenario(tmp_path, BASE.encode("utf-16"))
    _bad(_plan(p), str(p), "UTF-16")


def test_binary_garbage_scenario(tmp_path):
    p = _scenario(tmp_path, bytes(range(256)) * 4)
    _bad(_plan(p), str(p))


@pytest.mark.parametrize("reader", ["result file", "demand file", "session trace", "measured step-time table"])
def test_non_utf8_side_files_are_located_errors(tmp_path, reader):
    """Every user file beside a scenario (benchmark results for calibrate, demand and load CSVs,
    session traces, measured step tables) is read as UTF-8 text with the scenario's checks: a
    Latin-1 byte is a file:line error, not a UnicodeDecodeError traceback."""
    from planner.benchfiles import read_runs
    from planner.errors import InputError
    from planner.perf.measured import load_table
    from planner.serving.demand import load_demand_csv
    from planner.serving.session_trace import load_session_trace

    f = tmp_path / "x.csv"
    f.write_bytes(b"a,b\n1,caf\xe9\n")
    call = {"result file": read_runs, "demand file": load_demand_csv, "session trace": load_session_trace,
            "measured step-time table": load_table}[reader]
    with pytest.raises(InputError, match=rf"x\.csv:2: (the )?{reader} is not UTF-8 text"):
        call(str(f))
    if reader == "result file":
        r = runner.invoke(app, ["calibrate", str(f), "-H", "h100-sxm", "-m", "llama-3.1-8b", "--framework", "vllm"])
        assert r.exit_code == 2 and "not UTF-8 text" in r.stderr


def test_alias_bomb_rejected_quickly(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    p = _scenario(tmp_path, "\n".join(lines) + "\n")
    t0 = time.perf_counter()
    r = _subprocess_plan(p, timeout=30)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "alias" in r.stderr and f"{p}:" in r.stderr
    assert time.perf_counter() - t0 < 10


def test_duplicate_key_rejected(tmp_path):
    p = _scenario(tmp_path, BASE + "model: llama-3.1-70b\n")
    _bad(_plan(p), f"{p}:13 model", "duplicate key 'model'", "line 2")


@pytest.mark.parametrize("depth", [1_000, 50_000])
def test_deep_nesting_rejected(tmp_path, depth):
    p = _scenario(tmp_path, BASE + "description: " + "[" * depth + "]" * depth + "\n")
    r = _subprocess_plan(p)
    assert r.returncode == 2, r.stderr[-500:]
    assert "Traceback" not in r.stderr and "nest" in r.stderr and f"{p}:13" in r.stderr


def test_profile_base_loop(tmp_path):
    a = tmp_path / "loop.yaml"
    a.write_text("name: loop\nbase: loop\ndescription: x\n")
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", str(a), "-i", "100", "-o", "10"])
    _bad(r, "loop")


def test_directory_as_scenario(tmp_path):
    _bad(_plan(tmp_path), str(tmp_path))


# -- 2. values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "true", "-5", "0", "1e-300"])
def test_rate_must_be_finite_positive_number(tmp_path, value):
    p = _scenario(tmp_path, BASE.replace("rate: 5", f"rate: {value}"))
    _bad(_plan(p), f"{p}:4 workload.rate")


def test_negative_price_rejected(tmp_path):
    p = _scenario(tmp_path, BASE + "cost: {usd_per_h: {h100-sxm: -4}}\n")
    _bad(_plan(p), f"{p}:13 cost.usd_per_h.h100-sxm")


def test_price_for_unknown_hardware_did_you_mean(tmp_path):
    p = _scenario(tmp_path, BASE + "cost:\n  usd_per_h: {h100: 4}\n")
    _bad(_plan(p), f"{p}:14 cost.usd_per_h.h100", "did you mean 'h100-sxm'")


def test_fleet_available_unknown_hardware_did_you_mean(tmp_path):
    p = _scenario(tmp_path, BASE.replace("[h100-sxm]", "[h100-sxm, mi300x]")
                  + "design:\n  type: fleet\n  available: {mi300: 2}\n")
    _bad(_plan(p), f"{p}:15 design.available.mi300", "did you mean 'mi300x'")


def test_cv_with_poisson_arrivals_rejected(tmp_path):
    p = _scenario(tmp_path, BASE.replace("  rate: 5\n", "  rate: 5\n  arrival: {process: poisson, cv: 3}\n"))
    _bad(_plan(p), f"{p}:5 workload.arrival.cv", "gamma")


@pytest.mark.parametrize("cv", ["1e-300", "1e19"])
def test_gamma_cv_out_of_range_rejected(tmp_path, cv):
    """cv 1e-300 divided by zero in the arrival draw (a traceback); both ends are now located errors."""
    p = _scenario(tmp_path, BASE.replace("  rate: 5\n", f"  rate: 5\n  arrival: {{process: gamma, cv: {cv}}}\n"))
    _bad(_plan(p), f"{p}:5 workload.arrival.cv")


@pytest.mark.parametrize("setting,field", [
    ("design.link.bandwidth_gbps=1e-300", "design.link.bandwidth_gbps"),
    ("design.link.efficiency=1e-300", "design.link.efficiency"),
    ("design.link.bandwidth_cv=1e300", "design.link.bandwidth_cv"),
    ("design.bandwidth_sweep_gbps=[0]", "design.bandwidth_sweep_gbps.0"),
    ("design.bandwidth_sweep_gbps=[-5]", "design.bandwidth_sweep_gbps.0"),
])
def test_prfaas_link_out_of_range_is_located(setting, field):
    """Each overflowed or divided by zero inside the throughput model (or, for a negative sweep
    bandwidth, was planned silently); now refused where it is given."""
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios" / "prfaas-case-study.yaml"), "--json", "--set", setting])
    _bad(r, field)


def test_splitwise_search_that_finds_nothing_is_an_answer():
    """A search with no baselines whose SLO no split meets has no rows; the headline's max() over
    them raised ValueError. Now the plan says so and how to fix it."""
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios" / "distserve-chatbot-splitwise.yaml"), "--json",
                            "--set", "slo.ttft_s.p90=1e-9"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout)
    assert out["rows"] == []
    assert "no split of the searched pairs" in out["verdicts"][0] and "loosen the SLOs" in out["verdicts"][0]


def test_a_design_without_its_type_says_which_key_is_missing(tmp_path):
    p = _scenario(tmp_path, BASE + "design: {framework: vllm-2023}\n")
    _bad(_plan(p), f"{p}:13 design", "no 'type' key: give design.type")
    p = _scenario(tmp_path, BASE + "design: {type: splitwize}\n")
    _bad(_plan(p), f"{p}:13 design", "'splitwise'")


def test_mtp_acceptance_without_tokens_rejected(tmp_path):
    p = _scenario(tmp_path, BASE + "engine: {mtp_acceptance: 0.7}\n")
    _bad(_plan(p), f"{p}:13 engine.mtp_acceptance", "mtp_tokens")


def test_unused_trace_with_explicit_lengths_rejected(tmp_path):
    p = _scenario(tmp_path, BASE.replace("  rate: 5\n", "  rate: 5\n  trace: azure-conv-2023\n"))
    _bad(_plan(p), f"{p}:5 workload.trace", "unused")


def test_context_longer_than_model_window_scenario(tmp_path):
    p = _scenario(tmp_path, BASE.replace("value: 512", "value: 200000"))
    _bad(_plan(p), f"{p}:5 workload.input", "131072")


def test_context_longer_than_model_window_whatif():
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "200000", "-o", "10"])
    _bad(r, "131072")


def test_context_longer_than_model_window_api():
    with pytest.raises(planner.InputError, match="131072"):
        planner.estimate("llama-3.1-8b", "h100-sxm", input_len=200_000, output_len=10)


def _profile(tmp_path: Path, extra: str) -> Path:
    p = tmp_path / "myhw.yaml"
    p.write_text(PROFILE + extra)
    return p


@pytest.mark.parametrize("extra,line,field", [
    ("memory:\n  bandwidth: {value: -3 TB/s, source: nv_h100_ds}\n", 5, "memory.bandwidth.value"),
    ("peak_flops:\n  bf16: {value: .nan, source: nv_h100_ds}\n", 5, "peak_flops.bf16.value"),
    ("peak_flops:\n  bf16: {value: .inf, source: nv_h100_ds}\n", 5, "peak_flops.bf16.value"),
    ("power:\n  tdp: {value: 0 W, source: nv_h100_ds}\n", 5, "power.tdp.value"),
    ("price:\n  rent: {value: -4 USD/h, source: aws_cb}\n", 5, "price.rent.value"),
])
def test_profile_figures_positive_and_finite(tmp_path, extra, line, field):
    p = _profile(tmp_path, extra)
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", str(p), "-i", "100", "-o", "10"])
    _bad(r, f"{p}:{line} {field}")


def test_idle_power_above_tdp(tmp_path):
    p = _profile(tmp_path, "power:\n  idle: {value: 900 W, source: nv_h100_ds}\n")
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", str(p), "-i", "100", "-o", "10"])
    _bad(r, f"{p}:4 power", "idle")


def test_whatif_accepts_every_scenario_kv_dtype():
    """The CLI, the scenario format and the API accept the same formats (fp32 KV is legal in all)."""
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "100", "-o", "10",
                            "--kv-dtype", "fp32", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["kv_dtype"] == "fp32"


def test_json_output_never_nan(capsys):
    from planner.report import print_json

    print_json({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5]})
    out = capsys.readouterr().out
    data = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert data == {"a": None, "b": [None, None, 1.5]}


# -- 3. outputs ------------------------------------------------------------------------------------
def test_csv_into_missing_directory_rejected_before_run(tmp_path):
    p = _scenario(tmp_path, BASE)
    _bad(_plan(p, "--csv", str(tmp_path / "nope" / "x.csv")), "--csv", "nope")


def test_plot_unknown_suffix_rejected(tmp_path):
    p = _scenario(tmp_path, BASE)
    _bad(_plan(p, "--plot", str(tmp_path / "x.txt")), "--plot", ".txt")


def test_csv_onto_input_file_rejected(tmp_path):
    p = _scenario(tmp_path, BASE)
    _bad(_plan(p, "--csv", str(p)), "--csv", "input")
    assert p.read_text() == BASE


def test_failed_csv_write_leaves_no_file(tmp_path, monkeypatch):
    from planner.report import export

    target = tmp_path / "out.csv"

    def boom(result):
        return [{"a": 1}, {"b": 2}]          # a row with a key the header lacks: DictWriter raises
    monkeypatch.setattr(export, "rows_of", boom)
    with pytest.raises(ValueError):
        export.write_csv(object(), target)
    assert list(tmp_path.iterdir()) == []


def test_fleet_plot_draws(tmp_path):
    pytest.importorskip("matplotlib")
    p = _scenario(tmp_path, BASE.replace("[h100-sxm]", "[h100-sxm, mi300x]") + "design: {type: fleet}\n")
    png = tmp_path / "fleet.png"
    r = runner.invoke(app, ["plan", str(p), "--plot", str(png)])
    assert r.exit_code == 0, r.stderr
    assert png.stat().st_size > 1000


# -- 4. API ----------------------------------------------------------------------------------------
def test_kv_cache_bytes_bad_dtype_is_input_error():
    with pytest.raises(planner.InputError, match="fp9"):
        planner.kv_cache_bytes_per_token("llama-3.1-8b", "fp9")


def test_run_scenario_accepts_a_path(tmp_path):
    p = _scenario(tmp_path, BASE)
    a = planner.run_scenario(p)
    b = planner.run_scenario(str(p))
    assert a.best.instances == b.best.instances >= 1


def test_run_scenario_rejects_other_types():
    with pytest.raises(planner.InputError):
        planner.run_scenario(42)


# -- 6. CLI ----------------------------------------------------------------------------------------
def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.strip().endswith(planner.__version__)


def test_bundled_scenarios_still_load():
    for f in sorted((ROOT / "scenarios").glob("*.yaml")):
        assert planner.load_scenario(f).name
    assert yaml  # the fuzz suite builds documents with PyYAML


@pytest.mark.parametrize("scenario,old,new,field", [
    ("splitwise-iso-cost-code", "hardware: h100-sxm, count: 40", "hardware: h100, count: 40",
     "design.baselines.1.pool.hardware"),
    ("splitwise-iso-cost-code", "framework: vllm-2023", "framework: vllm-2032", "design.framework"),
    ("splitwise-iso-cost-code", "slowdown_slo: {hardware: a100-80g", "slowdown_slo: {hardware: a100",
     "design.slowdown_slo.hardware"),
    ("prfaas-case-study", "remote: {hardware: h200", "remote: {hardware: h2000", "design.remote.hardware"),
    ("polca-row-a100", "  hardware: a100-80g", "  hardware: a100", "design.hardware"),
    ("polca-row-a100", "framework: vllm-2023", "framework: vllm-2033", "design.framework"),
])
def test_design_names_carry_file_line_field(tmp_path, scenario, old, new, field):
    text = (ROOT / "scenarios" / f"{scenario}.yaml").read_text()
    assert old in text
    p = _scenario(tmp_path, text.replace(old, new, 1))
    (tmp_path / "models").symlink_to(ROOT / "scenarios" / "models")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if old in t)
    with pytest.raises(planner.InputError, match=rf"^{p}:{line} {field}: unknown"):
        planner.load_scenario(p)


def test_hf_config_with_nan_or_latin1(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "hidden_size": NaN}')
    with pytest.raises(planner.InputError, match=f"{p}: NaN"):
        planner.model_from_hf_config(p)
    p.write_bytes('{"model_type": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(planner.InputError, match=f"{p}:1: config.json is not UTF-8"):
        planner.model_from_hf_config(p)


@pytest.mark.parametrize("row", ["0,inf,10", "inf,100,10", "nan,100,10"])
def test_trace_with_non_finite_numbers(tmp_path, row):
    from planner.serving.trace import load_trace

    p = tmp_path / "t.csv"
    p.write_text(f"timestamp,input_tokens,output_tokens\n0,100,10\n{row}\n")
    with pytest.raises(planner.InputError, match=f"{p}:3"):
        load_trace(str(p))


# -- planner throughput ----------------------------------------------------------------------------
TP = ["throughput", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "8", "-i", "2048", "-o", "256", "--json"]


def test_throughput_cli_slo_point_meets_slo_and_is_the_edge():
    r = runner.invoke(app, [*TP, "--ttft-p90", "1.0", "--tpot-p90", "0.05"])
    assert r.exit_code == 0, r.stderr
    best = json.loads(r.stdout)
    assert best["ttft_s"]["p90"] <= 1.0 and best["tpot_s"]["p90"] <= 0.05
    assert 0 < best["requests_per_s"] <= best["max_rate"]
    # 10% more load than the SLO edge breaks the SLO the answer names as binding
    more = json.loads(runner.invoke(app, [*TP, "--rate", str(best["requests_per_s"] * 1.1)]).stdout)
    assert best["binding"] == "tpot_s.p90 <= 0.05" and more["tpot_s"]["p90"] > 0.05


def test_an_slo_below_the_engines_own_host_time_names_the_engine_not_the_chip():
    """vllm-ascend's fitted step holds 40 ms of host time: a 30 ms TPOT bound is met by no layout of
    that engine, and the answer says so (and points at another framework) instead of asking for a
    larger tp; a bound above it, or a bound the chip misses on its own, keeps the usual advice."""
    base = ["throughput", "-m", "qwen3-32b", "-H", "ascend-910b", "--tp", "4", "-i", "1000", "-o", "500",
            "--framework", "vllm-ascend"]
    r = runner.invoke(app, [*base, "--tpot-p90", "0.03"])
    assert r.exit_code == 1 and "per-step host time alone is 40 ms" in r.stderr and "--framework" in r.stderr
    assert "Traceback" not in r.output + r.stderr
    r = runner.invoke(app, [*base, "--tpot-p90", "0.05"])
    assert r.exit_code == 1 and "larger tp" in r.stderr and "host time" not in r.stderr
    r = runner.invoke(app, [*TP[:6], "1", *TP[7:], "--weight-dtype", "fp8", "--tpot-p90", "0.01"])
    assert r.exit_code == 1 and "larger tp" in r.stderr


def test_a_plan_no_candidate_of_its_engine_can_meet_says_so(tmp_path):
    """planner plan with engine.framework vllm-ascend and a 30 ms TPOT bound: every candidate misses
    it by the engine's 40 ms of host time per step, which the answer names (not faster hardware)."""
    p = tmp_path / "va.yaml"
    p.write_text("name: va\nmodel: qwen3-32b\nworkload:\n  rate: 4\n  input: {dist: fixed, value: 520}\n"
                 "  output: {dist: fixed, value: 256}\nslo:\n  tpot_s: {p90: 0.03}\nengine:\n  framework: vllm-ascend\n"
                 "search:\n  hardware: [ascend-910b, ascend-910c]\n  tp: [2, 4]\ncost:\n"
                 "  prices: {ascend-910b: 1.5, ascend-910c: 3.0}\n")
    r = runner.invoke(app, ["plan", str(p)])
    assert r.exit_code != 0 and "per-step host time alone is 40 ms" in r.stderr
    assert "faster hardware" not in r.stderr and "Traceback" not in r.output + r.stderr


def test_throughput_cli_p99_slo_is_the_stricter_bound():
    # MLPerf's Server and Interactive scenarios bound P99: the same bounds on P99 admit no more load
    # than on P90, and P90 bounds above the P99 ones are an input error that names the flags
    p90 = json.loads(runner.invoke(app, [*TP, "--ttft-p90", "1.0", "--tpot-p90", "0.05"]).stdout)
    r = runner.invoke(app, [*TP, "--ttft-p99", "1.0", "--tpot-p99", "0.05"])
    assert r.exit_code == 0, r.stderr
    p99 = json.loads(r.stdout)
    assert p99["ttft_s"]["p99"] <= 1.0 and p99["tpot_s"]["p99"] <= 0.05
    assert 0 < p99["requests_per_s"] < p90["requests_per_s"]
    bad = runner.invoke(app, [*TP, "--tpot-p90", "0.06", "--tpot-p99", "0.05"])
    assert bad.exit_code != 0 and "--tpot-p99" in bad.stderr and "must not decrease" in bad.stderr


def test_throughput_cli_replayed_slo_load_meets_it_and_stays_near_the_analytic_answer():
    # --replay bisects the rate on simulated Poisson runs (600 s of requests): its latencies at the
    # held load meet the bounds, and with fixed lengths it lands near the mean-field curve's answer
    # (the two model the same engine: within 15%); without an SLO it is an input error
    analytic = json.loads(runner.invoke(app, [*TP, "--ttft-p99", "1.0", "--tpot-p99", "0.05"]).stdout)
    r = runner.invoke(app, [*TP, "--ttft-p99", "1.0", "--tpot-p99", "0.05", "--replay"])
    assert r.exit_code == 0, r.stderr
    replayed = json.loads(r.stdout)
    assert replayed["ttft_s"]["p99"] <= 1.0 and replayed["tpot_s"]["p99"] <= 0.05
    assert replayed["requests_per_s"] == pytest.approx(analytic["requests_per_s"], rel=0.15)
    assert replayed["requests"] >= 2000 and replayed["bracket_rate"] > replayed["requests_per_s"]
    bad = runner.invoke(app, [*TP, "--rate", "2", "--replay"])
    assert bad.exit_code == 2 and "--replay" in bad.stderr
    # an SLO no load meets is an answer that names the bounds missed, as the analytic path's is
    none = runner.invoke(app, [*TP, "--ttft-p99", "0.001", "--tpot-p99", "0.001", "--replay"])
    assert none.exit_code == 1 and "misses the SLO" in none.stderr and "tpot_s.p99" in none.stderr


def test_throughput_cli_rate_is_littles_law_and_monotone():
    lo, hi = (json.loads(runner.invoke(app, [*TP, "--rate", r]).stdout) for r in ("1", "6"))
    for p in (lo, hi):   # sequences decoding = arrival rate x time a request spends decoding (Little)
        decoding_s = (p["output_len"] - 1) * p["tpot_s"]["mean"]
        assert p["decode_batch"] == pytest.approx(p["requests_per_s"] * decoding_s, rel=0.05)
    assert hi["tpot_s"]["p90"] > lo["tpot_s"]["p90"] and hi["ttft_s"]["p90"] > lo["ttft_s"]["p90"]


def test_throughput_cli_says_what_five_percent_less_capacity_would_do_near_capacity():
    # From 85% of capacity on, a load point also gives its P90 latencies on a layout 5% slower (read at
    # rate / 0.95 on the same curve): higher than its own, and no number at all (an unbounded queue)
    # once rate / 0.95 passes capacity; below 85% it says nothing (MLPerf's Server runs sat at 92-100%)
    cap = json.loads(runner.invoke(app, [*TP, "--rate", "1"]).stdout)
    assert cap["if_5pct_less_capacity"] is None
    m = cap["max_rate"]
    near = json.loads(runner.invoke(app, [*TP, "--rate", f"{0.9 * m:.6g}"]).stdout)
    worse = near["if_5pct_less_capacity"]
    assert worse["tpot_s"] > near["tpot_s"]["p90"] and worse["ttft_s"] > near["ttft_s"]["p90"]
    edge = json.loads(runner.invoke(app, [*TP, "--rate", f"{0.97 * m:.6g}"]).stdout)
    assert edge["if_5pct_less_capacity"] == {"ttft_s": None, "tpot_s": None}
    table = runner.invoke(app, [c for c in TP if c != "--json"] + ["--rate", f"{0.97 * m:.6g}"]).stdout
    assert "near capacity" in table and "grow without bound" in table


def test_throughput_cli_closed_loop_matches_api():
    r = runner.invoke(app, [*TP, "--concurrency", "16"])
    api = planner.throughput("llama-3.1-70b", "h100-sxm", tp=8, input_len=2048, output_len=256, concurrency=16)
    assert r.exit_code == 0 and json.loads(r.stdout)["requests_per_s"] == pytest.approx(api.requests_per_s)


@pytest.mark.parametrize("extra,code", [(["--rate", "500"], 1), (["--ttft-p90", "0.001"], 1),
                                        (["--rate", "2", "-c", "4"], 2), (["--ttft-p90", "0"], 2),
                                        (["--rate", "nan"], 2)])
def test_throughput_cli_errors(extra, code):
    r = runner.invoke(app, [*TP, *extra])
    assert r.exit_code == code and "Traceback" not in r.stderr and "rror" in r.stderr


def test_set_overrides_a_field(tmp_path):
    p = _scenario(tmp_path, BASE)
    r = runner.invoke(app, ["plan", str(p), "--json", "--set", "workload.rate=40"])
    assert r.exit_code == 0 and json.loads(r.stdout)["rate"] == 40
    _bad(runner.invoke(app, ["plan", str(p), "--json", "--set", "workload.rate=abc"]), "--set workload.rate")
    _bad(runner.invoke(app, ["plan", str(p), "--json", "--set", "rate"]), "key.path=value")
    # a section the file lacks, made by the --set, is blamed on the --set, not on the file's first line
    _bad(runner.invoke(app, ["plan", str(p), "--json", "--set", "design.framework=vllm-2023"]),
         f"{p} --set design: no 'type' key")


def test_compare_three_scenarios(tmp_path):
    p = _scenario(tmp_path, BASE)
    r = runner.invoke(app, ["compare", str(p), str(p), str(p), "--json", "--set", "workload.rate=10"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert list(data) == ["a", "b", "c"] and data["a"] == data["c"]


def test_whatif_json_explain_has_breakdown():
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "100", "-o", "10", "--json",
                            "--explain"])
    ops = {row["op"] for row in json.loads(r.stdout)["breakdown"]}
    assert {"qkv_proj", "attention", "ffn_up"} <= ops


def test_plan_help_shows_plot_extra():
    r = runner.invoke(app, ["plan", "--help"])
    assert "planner[plot]" in r.stdout


def test_rag_alternatives_consistent_with_simulator_scaled_pick():
    r = planner.run_scenario(ROOT / "scenarios" / "rag-longctx-mi300x.yaml")
    assert r.best.instances > r.analytic_instances          # the simulator asked for more
    assert all(a.usd_per_h >= r.best.usd_per_h for a in r.alternatives)


@pytest.mark.parametrize("kw", [{"mtp_tokens": None}, {"mtp_tokens": False}, {"mtp_tokens": 1, "mtp_acceptance": "x"}])
def test_estimate_bad_mtp_types_are_input_errors(kw):
    with pytest.raises(planner.InputError, match="MTP"):
        planner.estimate("llama-3.1-8b", "h100-sxm", input_len=256, output_len=32, **kw)


@pytest.mark.parametrize("call", [lambda: planner.load_scenario(42), lambda: planner.load_scenario(None),
                                  lambda: planner.model_from_hf_config(None)])
def test_path_arguments_of_other_types_are_input_errors(call):
    with pytest.raises(planner.InputError, match="must be a file path"):
        call()


def test_api_built_workload_and_slo_reject_infinity():
    from pydantic import ValidationError

    from planner.serving.slo import Target
    from planner.serving.workload import Workload

    with pytest.raises(ValidationError, match="finite"):
        Workload(rate=float("inf"), trace="azure-conv-2023")
    with pytest.raises(ValidationError, match="finite"):
        Target(p90=float("inf"))


def test_a_plan_within_five_percent_of_its_slo_limit_says_so():
    # The cheapest deployment often runs its instances just under the most load that meets the SLOs;
    # within 5% of it the plan notes that 5% less throughput would miss them, and how many instances
    # keep 5% in hand: 11 instances at 9.7 of 10 req/s carry 106.7 req/s, which 12 carry at 8.9
    from types import SimpleNamespace

    from planner.run import _headroom_note

    tight = SimpleNamespace(rate_per_instance=9.7, max_rate_per_instance=10.0, instances=11)
    assert "97%" in _headroom_note(tight) and "12 instances keep 5% in hand" in _headroom_note(tight)
    assert _headroom_note(SimpleNamespace(rate_per_instance=9.0, max_rate_per_instance=10.0, instances=11)) is None
    scn = Path(__file__).resolve().parent.parent / "scenarios" / "deepseek-v3-cloudmatrix.yaml"
    r = runner.invoke(app, ["plan", str(scn), "--json"])
    notes = json.loads(r.stdout)["notes"]
    assert r.exit_code == 0 and any("keep 5% in hand" in n for n in notes)


@pytest.mark.parametrize("target,match", [("{scn}", "unknown file type '.yaml'"),
                                          ("{tmp}/no/such/x.png", "does not exist")])
def test_sessions_plot_target_checked_before_the_run(tmp_path, target, match):
    """``sessions --plot`` is held to plan's rules before any work: an image suffix, an existing
    folder, never one of the scenario's inputs (the scenario itself was a valid target)."""
    scn = ROOT / "scenarios" / "coding-agent-h200-hbm.yaml"
    r = runner.invoke(app, ["sessions", str(scn), "--plot", target.format(scn=scn, tmp=tmp_path)])
    assert r.exit_code == 2 and match in r.stderr, r.output


@pytest.mark.parametrize("sets,match", [
    (["simulate.seed=-1"], r"simulate\.seed: Input should be greater than or equal to 0"),
    (["engine.mtp_tokens=1000000000"], r"engine\.mtp_tokens: Input should be less than or equal to 64"),
])
def test_seed_and_draft_tokens_bounded(sets, match):
    """A negative seed crashed numpy's generator (ValueError traceback); a billion draft tokens per
    step ran for minutes: both are refused where written."""
    from planner.errors import InputError
    from planner.scenario import load_scenario

    with pytest.raises(InputError, match=match):
        load_scenario(ROOT / "scenarios" / "chat-h100.yaml", sets)
    with pytest.raises(InputError, match=r"draft_tokens in \[0, 64\]"):
        planner.estimate("llama-3.1-8b", "h100-sxm", input_len=10, output_len=10, mtp_tokens=65, mtp_acceptance=0.5)


@pytest.mark.parametrize("scenario,sets,match", [
    ("prfaas-case-study", ["design.local.instances=1000000000"], r"design\.local\.instances: .*less than or equal "
                                                                   r"to 10000"),
    ("splitwise-iso-power-conv", ["design.designs.0.prompt.count=1000000000"],
     r"design\.designs\.0\.prompt\.count: .*less than or equal to 100000"),
    ("polca-row-a100", ["design.servers=1000000000"], r"design\.servers: .*less than or equal to 100000"),
    ("distserve-chatbot-opt13b", ["design.gpus_per_node=1000000000"],
     r"design\.gpus_per_node: .*less than or equal to 512"),
])
def test_design_sizes_bounded_where_written(scenario, sets, match):
    """Sizes found by fuzzing: a billion PrfaaS instances raised a 3.7 TiB MemoryError, a billion
    Splitwise machines and POLCA servers ran without end; each has a bound a fleet can reach."""
    from planner.errors import InputError
    from planner.scenario import load_scenario

    with pytest.raises(InputError, match=match):
        load_scenario(ROOT / "scenarios" / f"{scenario}.yaml", sets)


def test_polca_rack_seconds_bounded_before_allocating():
    from planner.errors import InputError
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    scn = load_scenario(ROOT / "scenarios" / "polca-row-a100.yaml", ["design.rows=1000000000"])
    with pytest.raises(InputError, match=r"172,800 steps x 1,000,000,000 racks is more rack-seconds"):
        run_scenario(scn)


@pytest.mark.parametrize("scenario,sets,match", [
    ("melange-arena", ["design.rate_sweep.0=0"], r"design\.rate_sweep\.0: Input should be greater than 0"),
    ("prfaas-case-study", ["workload.input.sigma=1000"], r"workload\.input\.sigma: .*less than or equal to 10"),
])
def test_fleet_sweep_rates_and_lognormal_spread_bounded(scenario, sets, match):
    """A zero rate in a fleet's rate sweep divided by zero (traceback); a sigma of 1000 overflowed
    the log-normal's quantiles (RuntimeWarnings, every length at its clip)."""
    from planner.errors import InputError
    from planner.scenario import load_scenario

    with pytest.raises(InputError, match=match):
        load_scenario(ROOT / "scenarios" / f"{scenario}.yaml", sets)


@pytest.mark.parametrize("sets,match", [
    (["workload.sessions.turns.mean=1000000000"], r"workload\.sessions\.turns\.mean: .*less than or equal to 1000"),
    (["workload.sessions.turns={dist: fixed, value: 5000}"], r"workload\.sessions\.turns: 5000 turns per session"),
])
def test_session_turns_bounded(sets, match):
    """A geometric mean of a billion turns allocated 298 GiB for its support (MemoryError)."""
    from planner.errors import InputError
    from planner.scenario import load_scenario

    with pytest.raises(InputError, match=match):
        load_scenario(ROOT / "scenarios" / "rag-128k-cloudmatrix.yaml", sets)


def test_an_astronomical_rate_is_infeasible_not_a_negative_fleet():
    """1e300 req/s divided by an instance's rate overflowed int64 to a negative instance count,
    which passed the max_instances filter: a plan came out and the simulator check crashed."""
    from planner.errors import InfeasibleError
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    scn = load_scenario(ROOT / "scenarios" / "chat-h100.yaml", ["workload.rate=1e300"])
    with pytest.raises(InfeasibleError, match=r"needs more than max_instances=100000 instances"):
        run_scenario(scn)


def test_json_stdout_stays_json_when_the_milp_solver_prints():
    """HiGHS prints some MIP diagnostics from C++ to descriptor 1; with this fleet mix they landed
    in the middle of --json output. The solve now points descriptor 1 at stderr (a real process:
    the CLI runner does not capture descriptors)."""
    r = subprocess.run([sys.executable, "-m", "planner", "plan", str(ROOT / "scenarios" / "melange-mixed.yaml"),
                        "--set", "design.mix.1.output.median=3", "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)


def test_instance_count_for_an_absurd_rate_is_readable():
    """1e300 req/s used to print a 298-digit instance count; a count past a trillion is in %g."""
    r = runner.invoke(app, ["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "100", "-o", "10",
                            "--rate", "1e300"])
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    assert "e+297 instances or a larger layout" in r.stderr and len(r.stderr) < 400
