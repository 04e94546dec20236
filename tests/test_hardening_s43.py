"""Session 43's bad-input findings: each was accepted silently (or crashed) and is now an answer
with its reason, or a located refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from planner.benchfiles import read_runs
from planner.calibrate_files import calibrate_files, check_entry_target
from planner.catalog.model_catalog import model
from planner.cli import app
from planner.emit import check_emit
from planner.errors import InfeasibleError, InputError
from planner.run import _beyond_window, run_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
runner = CliRunner()


def test_requests_beyond_the_context_window_are_named():
    """Azure's conversation trace on OPT-13B (2,048 tokens): the share the engine would refuse."""
    note = _beyond_window(model("opt-13b"), planner.load_scenario(SCENARIOS / "chat-h100.yaml").workload)
    assert note and note[0].startswith("14.7% of the requests (up to 14,089 tokens)")
    assert _beyond_window(model("llama-3.1-70b"), planner.load_scenario(SCENARIOS / "chat-h100.yaml").workload) == []


def test_a_session_window_beyond_the_models_is_refused():
    with pytest.raises(InputError, match=r"workload\.sessions\.max_context: 100,000,000 tokens exceeds "
                                         r"llama-3.1-70b's context window of 131,072"):
        planner.load_scenario(SCENARIOS / "coding-agent-h200-offload.yaml", ["workload.sessions.max_context=100000000"])


def test_emit_is_checked_against_the_design_before_the_run(tmp_path):
    with pytest.raises(InputError, match="the distserve design is not emitted yet"):
        check_emit("vllm", tmp_path / "out", design="distserve")


def test_tensorrt_llm_is_not_emitted_for_npus(tmp_path):
    r = runner.invoke(app, ["plan", str(SCENARIOS / "deepseek-v3-cloudmatrix.yaml"), "--emit", "trtllm",
                            str(tmp_path / "out")])
    assert r.exit_code == 2 and "TensorRT-LLM runs on NVIDIA GPUs" in r.output
    assert not (tmp_path / "out").exists()


def test_a_fleet_keeps_to_max_instances():
    with pytest.raises(InfeasibleError, match=r"search\.max_instances"):
        run_scenario(planner.load_scenario(SCENARIOS / "fleet-mixed.yaml",
                                           ["workload.rate=1e9", "search.max_instances=10"]))


def test_a_vendor_typo_is_refused_with_the_vendor_meant(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("name: mine\nbase: mi300x\nvendor: amdd\nsources: {m: my run}\n")
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", str(p), "-i", "1000", "-o", "100"])
    assert r.exit_code == 2 and "mine.yaml:3 vendor: did you mean 'amd'?" in r.output


def _vllm_run(tmp_path, name: str, **change) -> str:
    run = {"completed": 100, "total_input_tokens": 100_000, "total_output_tokens": 20_000, "mean_ttft_ms": 50.0,
           "mean_tpot_ms": 10.0, "output_throughput": 5000.0, "max_concurrency": 8, "request_rate": "inf", **change}
    f = tmp_path / name
    f.write_text(json.dumps(run))
    return str(f)


def _trtllm_run(tmp_path, name: str, tp) -> str:
    run = {"request_info": {"avg_num_concurrent_requests": 8, "avg_input_length": 1000, "avg_output_length": 200},
           "performance": {"system_output_throughput_tok_s": 5000},
           "streaming_metrics": {"avg_ttft_ms": 50, "avg_tpot_ms": 10}, "world_info": {"tp_size": tp}}
    f = tmp_path / name
    f.write_text(json.dumps(run))
    return str(f)


@pytest.mark.parametrize("change, field", [({"mean_ttft_ms": -5}, "mean_ttft_ms"),
                                           ({"mean_tpot_ms": 0}, "mean_tpot_ms"),
                                           ({"output_throughput": -1}, "output_throughput")])
def test_calibrate_refuses_impossible_measurements(tmp_path, change, field):
    with pytest.raises(InputError, match=f"field '{field}': expected a positive finite number"):
        read_runs(_vllm_run(tmp_path, "r.json", **change))


def test_calibrate_refuses_a_layout_that_is_not_a_number_or_not_one(tmp_path):
    with pytest.raises(InputError, match=r"field 'world_info.tp_size': expected a positive integer, got 'eight'"):
        read_runs(_trtllm_run(tmp_path, "t.json", "eight"))
    files = [_trtllm_run(tmp_path, "t2.json", 2), _trtllm_run(tmp_path, "t8.json", 8)]
    with pytest.raises(InputError, match=r"the result files ran tp = 2, 8: one fit is for one layout"):
        calibrate_files(files, "h100-sxm", "llama-3.1-70b", "tensorrt-llm", dict(tp=None, pp=None, ep=None,
                                                                                weight_dtype="fp8", kv_dtype=None))


def test_calibrate_refuses_a_file_twice_another_vendors_engine_and_a_non_yaml_entry(tmp_path):
    f = _vllm_run(tmp_path, "r.json")
    deploy = dict(tp=1, pp=1, ep=1, weight_dtype="bf16", kv_dtype=None)
    with pytest.raises(InputError, match="given more than once"):
        calibrate_files([f, f], "h100-sxm", "llama-3.1-8b", "vllm", dict(deploy))
    with pytest.raises(InputError, match=r"--framework: framework vllm runs on nvidia devices, not on mi300x"):
        calibrate_files([f], "mi300x", "llama-3.1-8b", "vllm", dict(deploy))
    with pytest.raises(InputError, match=r"a framework entry is a YAML file"):
        check_entry_target(tmp_path / "fit.json", [f])


def test_a_calibrated_name_that_is_no_catalog_entry_says_what_the_fit_starts_from():
    from planner.calibrate_files import _base_note

    assert _base_note("vllm") is None
    assert "did you mean --framework vllm-rocm?" in _base_note("vllm-rocn")


def test_a_session_workloads_fields_are_located_without_the_union_tag():
    """pydantic names the workload union's member ('sessions') in its error locations: it is not a
    path of the file (workload.sessions.rate was blamed for workload.rate)."""
    with pytest.raises(InputError, match=r"--set workload\.rate: Input should be greater than"):
        planner.load_scenario(SCENARIOS / "coding-agent-h200-offload.yaml", ["workload.rate=-1"])


def test_a_search_with_no_valid_layout_is_refused_at_its_degrees():
    with pytest.raises(InputError, match=r"search\.tp: no layout of llama-3.1-70b .* tp=3 ep=1 pp=1 on h100-sxm: "
                                         r"tp must divide the 64 attention heads"):
        planner.load_scenario(SCENARIOS / "chat-h100.yaml", ["search.tp=[3]"])


def test_compare_names_the_scenario_without_an_answer():
    r = runner.invoke(app, ["compare", str(SCENARIOS / "chat-h100.yaml"), str(SCENARIOS / "chat-h100-p90.yaml"),
                            "--set", "workload.rate=1e7"])
    assert r.exit_code == 1 and "chat-h100.yaml: meeting the SLOs at 1e+07 req/s" in r.output


def test_whatif_refuses_an_acceptance_without_draft_tokens():
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "100", "-o", "10",
                            "--mtp-acceptance", "0.8"])
    assert r.exit_code == 2 and "Invalid value for --mtp-acceptance" in r.output


def test_written_files_take_the_umask(tmp_path):
    """mkstemp makes files 0600; an output is created as open() would create it."""
    import os

    from planner.outputs import atomic_path

    old = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "out.csv") as tmp:
            tmp.write_text("a\n")
    finally:
        os.umask(old)
    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o644
