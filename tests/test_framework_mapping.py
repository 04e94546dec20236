"""``engine.framework`` as a mapping by vendor or device: a scenario over several vendors' devices
runs each on the engine it names for it (a device name before its vendor; unnamed devices on their
vendor's default), its efficiencies and its scheduler knobs both, candidate by candidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import planner
from planner.catalog.frameworks import engine_name, framework_for
from planner.catalog.hardware import hardware
from planner.catalog.model_catalog import model
from planner.cli import app
from planner.designs.colocated import search_colocated
from planner.errors import InputError
from planner.perf.cost import CostModel
from planner.run import run_scenario
from planner.serving.batching import Engine
from planner.serving.closed_loop import engine_running, throughput
from planner.serving.slo import SLO
from planner.serving.workload import Workload

SCENARIOS = Path(__file__).parent.parent / "scenarios"


def test_a_device_name_wins_over_its_vendor():
    choice = {"nvidia": "sglang", "h200": "tensorrt-llm"}
    assert framework_for(choice, hardware("h100-sxm")) == "sglang"
    assert framework_for(choice, hardware("h200")) == "tensorrt-llm"
    assert framework_for(choice, hardware("mi300x")) is None
    assert engine_name(choice, hardware("mi300x")) == "vllm-rocm"          # the vendor's default
    assert framework_for("sglang", hardware("h200")) == "sglang"


def test_the_engine_on_a_device_takes_that_entrys_knobs_where_none_are_given():
    e = Engine(framework={"NVIDIA ": "sglang"}, max_num_seqs=64)
    assert e.framework == {"nvidia": "sglang"}                               # keys in the catalog's spelling
    on = e.on("h100-sxm")
    assert on == Engine(framework="sglang", max_num_seqs=64)                 # as if named alone
    assert (on.mixed_prefill, on.limits_scope, on.max_num_seqs) == (False, "instance", 64)
    assert e.on("mi300x") == Engine(max_num_seqs=64)                         # unnamed: the default's knobs
    assert Engine(framework="sglang").on("h100-sxm") is not None
    assert e.batch_limits(hardware("h100-sxm")) == e.on("h100-sxm").batch_limits(hardware("h100-sxm"))


@pytest.mark.parametrize("bad", [{}, {"a": "vllm", "A": "vllm"}, {"nvidia": "sglangx"}, {"nvidia": ["vllm"]}, 3])
def test_a_bad_mapping_is_refused(bad):
    with pytest.raises(ValueError):
        Engine(framework=bad)


def _search(framework, hardware_list):
    workload = Workload.model_validate({"rate": 6, "input": {"dist": "fixed", "value": 2000},
                                        "output": {"dist": "fixed", "value": 300}})
    slo = SLO.model_validate({"ttft_s": {"p90": 2.0}, "tpot_s": {"p90": 0.05}})
    found = search_colocated(model("llama-3.1-8b"), workload, slo, Engine(framework=framework), CostModel(),
                             hardware_list, [1, 2], [1], [1], ["bf16"])
    return {(d.hardware, d.tp): (d.engine, d.instances, round(d.usd_per_h, 9), round(d.tpot_s["p90"], 12))
            for d in found.deployments}


def test_each_candidate_runs_its_own_engine():
    """Over H100 and MI300X with {nvidia: sglang}: every H100 candidate is what a search of the H100
    alone on SGLang gives, every MI300X one what a search of the MI300X on its default gives."""
    mixed = _search({"nvidia": "sglang"}, ["h100-sxm", "mi300x"])
    alone = _search("sglang", ["h100-sxm"]) | _search(None, ["mi300x"])
    assert mixed == alone
    assert {v[0] for v in mixed.values()} == {"sglang", "vllm-rocm"}
    # and the mapping that names each vendor's default is no mapping at all
    assert _search({"nvidia": "vllm", "amd": "vllm-rocm"}, ["h100-sxm", "mi300x"]) == _search(None, ["h100-sxm",
                                                                                                   "mi300x"])


def _scenario(tmp_path, name: str, **changes) -> Path:
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    for dotted, value in changes.items():
        *head, last = dotted.split("__")
        node = data
        for key in head:
            node = node.setdefault(key, {})
        node[last] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_key_that_names_nothing_in_the_scenario_is_refused_at_it(tmp_path):
    p = _scenario(tmp_path, "reasoning-mi300x-vs-h200", engine__framework={"nvida": "sglang"})
    with pytest.raises(InputError, match=r"engine\.framework\.nvida: names neither a vendor \(amd, nvidia\) nor a "
                                         r"device \(h200, mi300x\).*did you mean 'nvidia'"):
        planner.load_scenario(p)


def test_another_vendors_engine_in_a_mapping_is_refused_at_its_key(tmp_path):
    p = _scenario(tmp_path, "reasoning-mi300x-vs-h200", engine__framework={"mi300x": "sglang"})
    with pytest.raises(InputError, match=r"engine\.framework\.mi300x: framework sglang runs on nvidia devices.*"
                                         r"or drop this key"):
        planner.load_scenario(p)


def test_a_design_runs_a_mapping_machine_by_machine(tmp_path):
    """POLCA's servers under {a100-80g: vllm-2023} are its servers under vllm-2023."""
    named = run_scenario(SCENARIOS / "polca-row-a100.yaml")
    mapped = run_scenario(_scenario(tmp_path, "polca-row-a100", design__framework={"a100-80g": "vllm-2023"}))
    a, b = mapped.model_dump(), named.model_dump()
    assert a["certainty"].pop("framework") == {"a100-80g": "vllm-2023"}      # as written
    assert b["certainty"].pop("framework") == "vllm-2023"
    assert a == b


def test_the_plan_names_the_engine_of_the_chosen_device(tmp_path):
    p = _scenario(tmp_path, "reasoning-mi300x-vs-h200", engine__framework={"nvidia": "sglang"},
                  search__hardware=["h200"], simulate={"requests": 400, "seed": 1})
    r = run_scenario(p)
    assert r.best.engine == "sglang"
    assert any(n.startswith("engine scheduling of sglang:") and "mixed_prefill=False" in n for n in r.notes)
    assert r.certainty["framework"] == {"nvidia": "sglang"}


def test_a_fleet_names_each_pools_engine(tmp_path):
    r = run_scenario(_scenario(tmp_path, "fleet-mixed", engine__framework={"nvidia": "sglang"}))
    assert r.engines and set(r.engines) == set(r.instances)
    assert all(e == ("vllm-rocm" if hw == "mi300x" else "sglang") for hw, e in r.engines.items())


def test_a_missing_framework_file_is_blamed_at_its_field(tmp_path):
    """A framework file is read when the scenario is, so a missing one is an error at its key
    (it was blamed on the scenario's top level when a candidate first needed it)."""
    p = _scenario(tmp_path, "reasoning-mi300x-vs-h200", engine__framework={"nvidia": "nope.yaml"})
    with pytest.raises(InputError, match=r"engine\.framework\.nvidia: nope\.yaml: cannot read YAML file"):
        planner.load_scenario(p)


def test_the_python_throughput_runs_the_named_engines_scheduler():
    """``throughput(framework="sglang")`` applied SGLang's efficiencies under vLLM's scheduler (3,344
    against 3,131 tokens/s here); it is now the engine the CLI's --framework runs."""
    kw = dict(input_len=2000, output_len=300)
    named = throughput("llama-3.1-8b", "h100-sxm", framework="sglang", **kw)
    engine = throughput("llama-3.1-8b", "h100-sxm", engine=Engine(framework="sglang"), **kw)
    assert named.output_tokens_per_s == engine.output_tokens_per_s and named.framework == "sglang"
    assert engine_running(Engine(max_num_seqs=64), "sglang") == Engine(framework="sglang", max_num_seqs=64)
    with pytest.raises(InputError, match="name two engines"):
        engine_running(Engine(framework="vllm"), "sglang")


def test_hardware_compare_takes_an_engine_per_vendor():
    run = CliRunner().invoke
    args = ["hardware", "compare", "h100-sxm", "mi300x", "--model", "llama-3.1-8b", "--json"]
    rows = json.loads(run(app, [*args, "--framework", "nvidia=sglang"]).stdout)
    assert [r["serving"]["framework"] for r in rows] == ["sglang", "vllm-rocm"]
    for bad, says in ((["--framework", "sglang"], "runs on nvidia devices"),
                      (["--framework", "nvida=sglang"], "nvida names none of the compared profiles"),
                      (["--framework", "sglang", "--framework", "vllm"], "give one NAME for every profile")):
        r = run(app, [*args, *bad])
        assert r.exit_code == 2 and says in " ".join(r.stderr.split())
