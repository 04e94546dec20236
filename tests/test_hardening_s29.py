"""Bad inputs found by session 29's fuzzing of every command: each one now gets a clean located
error (exit 2) instead of a traceback, a hang, an output written over an input or outside its
folder, or a plan built on nonsense. Each test fails without its fix."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
BIG = str(2**63)
LONG = "a" * 5000


def _bad(r, *needles: str) -> None:
    """Exit 2, no traceback, every needle in the message."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    text = r.stderr + r.stdout
    assert "Traceback" not in text
    for n in needles:
        assert n in text, (n, text)


def _cli(*args: str):
    return runner.invoke(app, list(args))


# -- outputs never destroy or escape -------------------------------------------------------------
def test_plan_csv_may_not_overwrite_a_measured_table_the_scenario_reads(tmp_path):
    scn = ROOT / "scenarios" / "measured-llama70b-h100.yaml"
    shutil.copy(scn, tmp_path / scn.name)
    (tmp_path / "data").mkdir()
    table = tmp_path / "data" / "splitwisesim-llama2-70b-h100-tp8.csv"
    shutil.copy(ROOT / "scenarios" / "data" / table.name, table)
    before = table.read_bytes()
    _bad(_cli("plan", str(tmp_path / scn.name), "--csv", str(table)), "is one of the input files")
    assert table.read_bytes() == before


@pytest.mark.parametrize("name, label", [("../escape", "escape-h100-sxm-tp2"), ("sub/dir/x", "sub-dir-x-h100-sxm-tp2"),
                                         ("/etc/x", "etc-x-h100-sxm-tp2")])
def test_k8s_file_names_stay_in_the_emit_folder(name, label):
    from planner.emit import k8s_name

    assert k8s_name(f"{name}-h100-sxm-tp2") == label
    assert k8s_name("../..") == "planner"


def test_an_unusable_output_name_is_an_error():
    _bad(_cli("plan", str(ROOT / "scenarios" / "chat-h100.yaml"), "--csv", LONG + ".csv"), "not a usable file name")


# -- numbers past what the model can hold ------------------------------------------------------------
def test_a_degree_past_int64_is_refused_on_the_command_line():
    r = _cli("whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "100", "-o", "10", "--tp", BIG)
    assert r.exit_code == 2 and "Traceback" not in r.stdout + r.stderr


@pytest.mark.parametrize("setting, needle", [
    ("search.tp=[9223372036854775808]", "a parallel degree is at most 1,048,576"),
    ("engine.max_batched_tokens=9223372036854775808", "engine.max_batched_tokens"),
    ("engine.max_num_seqs=9223372036854775808", "engine.max_num_seqs"),
])
def test_a_scenario_number_past_int64_is_located(setting, needle):
    _bad(_cli("plan", str(ROOT / "scenarios" / "chat-h100.yaml"), "--set", setting), needle)


def test_a_config_with_2_63_layers_is_refused_at_once(tmp_path):
    cfg = json.loads((ROOT.parent / "shared" / "data" / "hf-configs" / "Qwen--Qwen3-32B.json").read_text()) \
        if (ROOT.parent / "shared").exists() else None
    if cfg is None:
        cfg = {"model_type": "qwen3", "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8,
               "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936}
    cfg["num_hidden_layers"] = 2**63
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    _bad(_cli("whatif", "-m", str(p), "-H", "h100-sxm", "-i", "100", "-o", "10"), "num_hidden_layers", "100,000")
    assert time.perf_counter() - t0 < 20


def test_a_config_with_zero_experts_names_the_field(tmp_path):
    cfg = {"model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 32000, "num_hidden_layers": 32, "num_local_experts": 0,
           "num_experts_per_tok": 2}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    _bad(_cli("whatif", "-m", str(p), "-H", "h100-sxm", "-i", "100", "-o", "10"), str(p), "num_experts")


def test_a_profile_slower_than_any_device_is_refused(tmp_path):
    p = tmp_path / "slow.yaml"
    p.write_text("name: slow\nbase: h100-sxm\ndescription: x\nmemory:\n  bandwidth: {value: 1e-300, source: t}\n")
    _bad(_cli("whatif", "-m", "llama-3.1-8b", "-H", str(p), "-i", "100", "-o", "10"), "at least 1e+06 bytes/s")


# -- distributions whose draws would not fit in memory or cannot be drawn ----------------------------
SESSIONS = """\
name: s
model: llama-3.1-8b
workload:
  rate: 2
  sessions:
    turns: {turns}
    new_input: {new_input}
    output: {{dist: fixed, value: 100}}
    think: {{dist: exponential, mean_s: 5}}
slo:
  ttft_s: {{p90: 2.0}}
search:
  hardware: [h100-sxm]
  tp: [1]
"""


def test_a_turn_count_with_an_astronomical_tail_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SESSIONS.format(turns="{dist: lognormal, median: 5, sigma: 10}",
                                 new_input="{dist: fixed, value: 200}"))
    _bad(_cli("sessions", str(p)), "workload.sessions.turns", "expected at most 1000")


def test_a_truncation_window_with_no_probability_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SESSIONS.format(turns="{dist: geometric, mean: 3}",
                                 new_input="{dist: lognormal, median: 5, sigma: 0.01, min: 100000, max: 100001, "
                                           "truncate: true}"))
    _bad(_cli("sessions", str(p)), "workload.sessions.new_input", "widen min..max")


@pytest.mark.parametrize("scenario, setting, needle", [
    ("horizon-chat-batch-week.yaml", "design.batch.window_h=1e-9", "design.batch.window_h"),
    ("horizon-chat-batch-week.yaml", "design.autoscale.load_bandwidth=1e-300", "design.autoscale.load_bandwidth"),
    ("polca-hierarchy-a100.yaml", "design.gpu_share=1e-300", "design.gpu_share"),
    ("splitwise-iso-cost-code.yaml", "design.search.token_power_caps=[1000]", "design.search.token_power_caps"),
])
def test_design_values_that_overflowed_are_located(scenario, setting, needle):
    _bad(_cli("plan", str(ROOT / "scenarios" / scenario), "--set", setting), needle)


# -- names ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (("models", "show", LONG), "unknown model"),
    (("hardware", "show", LONG), "unknown hardware"),
    (("whatif", "-m", "llama-3.1-8b", "-H", LONG, "-i", "10", "-o", "10"), "unknown hardware"),
    (("whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "10", "-o", "10", "--mtp-tokens", "1", "--draft", LONG),
     "unknown draft"),
    (("whatif", "-m", LONG + ".json", "-H", "h100-sxm", "-i", "10", "-o", "10"), "cannot read config.json"),
])
def test_a_name_too_long_for_a_file_is_an_unknown_name(args, needle):
    _bad(_cli(*args), needle)


def test_hardware_compare_checks_its_options():
    _bad(_cli("hardware", "compare", "h100-sxm", "h200", "--input-len", "-1"), "--input-len")
    _bad(_cli("hardware", "compare", "h100-sxm", "h200", "--price", "nope=5"), "not among the compared profiles")
    _bad(_cli("hardware", "compare", "h100-sxm", "h200", "--provider", "nope"), "'nope' is not a provider")


def test_a_negative_offload_capacity_is_refused():
    from pydantic import ValidationError

    from planner.designs.kv_cache import KVCacheSpec

    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        KVCacheSpec(tiers=["hbm", "host_dram"], capacity_per_accelerator={"host_dram": "-5 GB"})


@pytest.mark.parametrize("text", ["x: &a [1, *a]\n", "x: &a {y: *a}\n"])
def test_a_recursive_alias_is_refused(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    _bad(_cli("plan", str(p)), f"{p}:1", "refers to a node that contains it")


def test_an_output_in_a_missing_folder_says_so(tmp_path):
    _bad(_cli("plan", str(ROOT / "scenarios" / "chat-h100.yaml"), "--csv", str(tmp_path / "nodir" / "x.csv")),
         "folder", "does not exist")
    r = _cli("plan", str(ROOT / "scenarios" / "chat-h100.yaml"), "--csv", str(tmp_path / "nodir" / "x.csv"))
    assert "not a usable file name" not in r.stderr
