"""The engine a design's machines run. Splitwise, DistServe and POLCA name it in ``design.framework``;
where they name none, ``engine.framework`` is the one (its scheduler knobs were applied while the
machines ran the vendor's default entry). A PrfaaS design reads no engine section but the
recurrent-state format, so anything else given there is refused, not ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import planner
from planner.designs.pool_physics import engine_named
from planner.designs.splitwise import plan_splitwise
from planner.errors import InputError
from planner.run import run_scenario

SCENARIOS = Path(__file__).parent.parent / "scenarios"


def _moved(tmp_path, name: str) -> tuple[dict, Path]:
    """Bundled scenario ``name`` and a copy whose design framework is named under engine instead."""
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    moved = dict(data, engine={**data.get("engine", {}), "framework": data["design"]["framework"]},
                 design={k: v for k, v in data["design"].items() if k != "framework"})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(moved))
    return data, path


@pytest.mark.parametrize("name", ["splitwise-shift-llama-on-bloom", "distserve-chatbot-opt13b-vllm2023",
                                  "polca-row-a100"])
def test_engine_framework_runs_the_design_machines(tmp_path, name):
    """Named under engine instead of design, the same entry gives the same answer, number for number."""
    _, moved = _moved(tmp_path, name)
    assert run_scenario(moved).model_dump() == run_scenario(SCENARIOS / f"{name}.yaml").model_dump()


def test_engine_framework_changes_the_machines(tmp_path):
    """The case that was wrong: engine.framework alone now reaches the pools (vllm-2023's 2023 kernels
    against today's vLLM entry give a different rate)."""
    data = yaml.safe_load((SCENARIOS / "splitwise-shift-llama-on-bloom.yaml").read_text())
    today = dict(data, design={k: v for k, v in data["design"].items() if k != "framework"})
    path = tmp_path / "today.yaml"
    path.write_text(yaml.safe_dump(today))
    _, moved = _moved(tmp_path, "splitwise-shift-llama-on-bloom")
    rates = [[r.max_rate for r in run_scenario(p).rows] for p in (path, moved)]
    assert rates[0] != rates[1]


def test_two_different_engines_are_refused_at_the_design_field(tmp_path):
    data = yaml.safe_load((SCENARIOS / "splitwise-shift-llama-on-bloom.yaml").read_text())
    data["engine"] = {**data.get("engine", {}), "framework": "vllm"}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"design\.framework: engine\.framework is vllm but this is vllm-2023"):
        planner.load_scenario(path)


def test_the_python_api_refuses_two_engines_too():
    scn = planner.load_scenario(SCENARIOS / "splitwise-shift-llama-on-bloom.yaml")
    engine = scn.engine.model_copy(update={"framework": "vllm"})
    with pytest.raises(InputError, match="one engine runs the design's machines"):
        plan_splitwise(planner.model(scn.model), scn.design, scn.workload, scn.slo, engine, {}, "x")
    assert engine_named(scn.design, scn.engine) is scn.design          # nothing to fill: the same spec
    assert engine_named(scn.design.model_copy(update={"framework": None}), engine).framework == "vllm"


def test_prfaas_refuses_engine_fields_it_does_not_read(tmp_path):
    data = yaml.safe_load((SCENARIOS / "prfaas-case-study.yaml").read_text())
    data["model"] = str(SCENARIOS / data["model"])
    for engine, field in (({"framework": "sglang"}, "engine.framework"), ({"mtp_tokens": 1}, "engine.mtp_tokens"),
                          ({"memory_fraction": 0.8}, "engine.memory_fraction")):
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump(dict(data, engine=engine)))
        with pytest.raises(InputError, match=rf"{field}: a prfaas design .* reads only engine\.state_dtype"):
            planner.load_scenario(path)
    path.write_text(yaml.safe_dump(dict(data, engine={"state_dtype": "bf16"})))      # the one it reads
    assert planner.load_scenario(path).engine.state_dtype == "bf16"


def test_a_horizons_splitwise_framework_schedules_too(tmp_path):
    """A horizon's Splitwise pools name their engine in their own section: its scheduler knobs
    apply as a top-level design framework's do (SGLang: prompt iterations without decodes)."""
    data = yaml.safe_load((Path(__file__).parent / "data" / "horizon-splitwise.yaml").read_text())
    assert planner.load_scenario(Path(__file__).parent / "data" / "horizon-splitwise.yaml").engine.mixed_prefill
    data["design"]["splitwise"]["framework"] = "sglang"
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(data))
    assert planner.load_scenario(path).engine.mixed_prefill is False
