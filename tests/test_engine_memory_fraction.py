"""``engine.memory_fraction`` in a scenario: the engine's memory setting as its command line gives it
(vLLM ``--gpu-memory-utilization``, SGLang ``--mem-fraction-static``, TensorRT-LLM
``kv_cache_free_gpu_mem_fraction``) sizes the KV cache of every machine the scenario runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.catalog.dtypes import DType
from planner.catalog.hardware import hardware
from planner.catalog.model_catalog import model
from planner.cli import app
from planner.designs.pool_physics import machine_hw
from planner.perf.memory import free_kv_bytes_device
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.search import candidates

runner = CliRunner()

SCENARIO = """\
name: memory-setting
model: llama-3.1-70b
workload:
  rate: 2
  input: {{dist: fixed, value: 2000}}
  output: {{dist: fixed, value: 100}}
slo:
  ttft_s: {{p90: 5}}
  tpot_s: {{p90: 0.2}}
{engine}search: {{hardware: [a100-80g], tp: [2], weight_dtype: [bf16]}}
"""


def plan_scenario(tmp_path, template: str, engine: str, *extra: str):
    """``planner plan --json`` of ``template`` with its ``{engine}`` line filled in (an ``engine:``
    block and its newline, or empty)."""
    p = tmp_path / "s.yaml"
    p.write_text(template.format(engine=engine))
    return runner.invoke(app, ["plan", str(p), "--json", *extra])


def _plan(tmp_path, engine: str, *extra: str):
    return plan_scenario(tmp_path, SCENARIO, engine, *extra)


def test_the_setting_moves_the_kv_pool_by_its_share_of_total_memory():
    """By hand: vLLM's pool is f x total - weights - workspace, so 0.95 against the entry's 0.90
    holds exactly 0.05 x the A100-80G's 85.9 GB more on each device."""
    m, lay, dt = model("llama-3.1-70b"), Layout.of(2, 1, 1), DTypes(weight=DType.bf16, kv=DType.bf16)
    (hw90, _, _), = candidates(m, ["a100-80g"], [2], [1], [1], ["bf16"], None, "vllm")
    (hw95, _, _), = candidates(m, ["a100-80g"], [2], [1], [1], ["bf16"], None, "vllm", 0.95)
    assert (hw90.memory_policy.fraction.value, hw95.memory_policy.fraction.value) == (0.9, 0.95)
    gained = float(free_kv_bytes_device(m, hw95, lay, dt) - free_kv_bytes_device(m, hw90, lay, dt))
    assert gained == pytest.approx(0.05 * hardware("a100-80g").memory.capacity.value, rel=1e-9)
    # pools of the disaggregated designs take it the same way, power cap and all
    pool = machine_hw("a100-80g", "vllm", 0.8, 0.95)
    assert pool.memory_policy.fraction.value == 0.95


def test_a_plan_holds_more_load_with_more_memory_and_says_which_setting_it_used(tmp_path):
    plans = {}
    for f in (None, 0.9, 0.95):
        r = _plan(tmp_path, "" if f is None else f"engine: {{memory_fraction: {f}}}\n")
        assert r.exit_code == 0, r.stderr
        plans[f] = json.loads(r.stdout)
    rate = {f: p["best"]["max_rate_per_instance"] for f, p in plans.items()}
    assert rate[None] == rate[0.9]                    # vLLM's own default is 0.90
    assert rate[0.95] > rate[0.9]                     # this instance is KV-bound: more pool, more load
    assert any("engine memory setting 0.95 of total device memory" in n for n in plans[0.95]["notes"])
    assert not any("engine memory setting" in n for n in plans[None]["notes"])


def test_emitted_launch_file_carries_the_setting(tmp_path):
    r = _plan(tmp_path, "engine: {memory_fraction: 0.93}\n", "--emit", "vllm", str(tmp_path / "out"))
    assert r.exit_code == 0, r.stderr
    assert "--gpu-memory-utilization 0.93" in (tmp_path / "out" / "vllm.sh").read_text()


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "high"])
def test_a_setting_outside_0_1_is_refused_at_its_line(tmp_path, value):
    r = _plan(tmp_path, f"engine: {{memory_fraction: {value}}}\n")
    assert r.exit_code == 2
    assert "s.yaml:10" in r.stderr and "engine.memory_fraction" in r.stderr


def test_prfaas_which_runs_its_own_engine_refuses_it():
    scenario = str(Path(__file__).resolve().parent.parent / "scenarios" / "prfaas-case-study.yaml")
    r = runner.invoke(app, ["plan", scenario, "--set", "engine.memory_fraction=0.95"])
    assert r.exit_code == 2
    assert "engine.memory_fraction" in r.stderr and "would be ignored" in r.stderr
