"""The serving engine an entry's figures describe (``Framework.family``): a Splitwise design's prompt and
token machines hand the KV cache over through one engine's connector, so a mapping that gives them
entries of two engines is refused at the pair; ``plan --emit`` of another engine than the one the
plan modelled says so, in the file and on the terminal; the Kubernetes manifest runs each vendor's
vLLM image."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import planner
from planner.catalog.frameworks import family_entries, framework, list_frameworks, load_framework_file
from planner.catalog.hardware import hardware
from planner.cli import app
from planner.emit import LAUNCHED, _vllm_image
from planner.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_every_bundled_entry_names_its_engine():
    families = {name: framework(name).family for name in list_frameworks()}
    assert None not in families.values()
    # an entry's generation or platform does not change its engine
    assert {families[n] for n in ("vllm", "vllm-rocm", "vllm-2023", "vllm-rocm-mlperf", "vllm-ascend",
                                  "vllm-ascend-graph")} == {"vllm"}
    assert families["sglang-ascend"] == families["sglang"] == "sglang"
    assert families["tensorrt-llm-pytorch"] == "tensorrt-llm"
    # each launch --emit writes is one of them
    assert set(LAUNCHED.values()) <= set(families.values())


def test_a_file_takes_its_base_engine(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("base: sglang-ascend\nstep_overhead: {value: 3 ms, source: assumed}\n")
    assert load_framework_file(path).family == "sglang"
    bare = tmp_path / "bare.yaml"
    bare.write_text("description: my engine\nstep_overhead: {value: 3 ms, source: assumed}\n")
    assert load_framework_file(bare).family is None


def test_family_entries_put_the_vendor_default_first():
    assert family_entries("vllm", hardware("ascend-910c"))[0] == "vllm-ascend-graph"
    assert family_entries("vllm", hardware("mi300x"))[0] == "vllm-rocm"
    assert family_entries("sglang", hardware("ascend-910b")) == ["sglang-ascend"]
    assert family_entries("mindie", hardware("h100-sxm")) == []


def _splitwise(tmp_path, framework_choice, where: str) -> Path:
    data = yaml.safe_load((ROOT / "scenarios" / "splitwise-iso-cost-code.yaml").read_text())
    data["design"]["framework"] = framework_choice
    if where == "search":
        data["design"]["designs"] = []
    else:
        data["design"].pop("search", None)
    path = tmp_path / "split.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("where, field", [("designs", r"design\.designs\.2\.token\.hardware"),
                                          ("search", r"design\.search\.pairs\.2")])
def test_two_engines_across_the_kv_link_are_refused_at_the_pair(tmp_path, where, field):
    """Splitwise-HA: H100 prompt machines on SGLang, A100 token machines on vLLM."""
    path = _splitwise(tmp_path, {"h100-sxm": "sglang", "a100-80g": "vllm"}, where)
    with pytest.raises(InputError, match=field + r".*run sglang and token machines \(a100-80g\) run vllm.*"
                                     r"map a100-80g to sglang"):
        planner.load_scenario(path)


def test_one_engine_on_two_devices_is_accepted(tmp_path):
    """Two entries of one engine (today's vLLM on H100, 2023's on A100) hand over as before."""
    path = _splitwise(tmp_path, {"h100-sxm": "vllm", "a100-80g": "vllm-2023"}, "designs")
    assert planner.load_scenario(path).engine.framework == {"h100-sxm": "vllm", "a100-80g": "vllm-2023"}


def _emit(tmp_path, engine: str):
    out = tmp_path / engine
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios" / "chat-h100.yaml"), "--emit", engine, str(out)])
    assert r.exit_code == 0, r.stderr
    return r.stderr, "".join(p.read_text() for p in sorted(out.iterdir()))


def test_emitting_another_engine_says_so(tmp_path):
    """chat-h100 is planned on vLLM (the NVIDIA default): an SGLang launch of it carries a note naming
    the entry to plan with; a vLLM launch none."""
    stderr, text = _emit(tmp_path, "sglang")
    assert "this file launches sglang" in stderr and "engine.framework: sglang" in stderr
    assert "# NOTE the plan's figures are the vllm entry's (vllm); this file launches sglang" in text
    stderr, text = _emit(tmp_path, "vllm")
    assert "launches" not in stderr and "NOTE" not in text


def test_kubernetes_runs_each_vendors_vllm_image():
    assert _vllm_image(hardware("h100-sxm")) == "vllm/vllm-openai:latest"
    assert _vllm_image(hardware("mi300x")) == "rocm/vllm:latest"
    assert _vllm_image(hardware("ascend-910b")) == "quay.io/ascend/vllm-ascend:v0.23.0"
    assert _vllm_image(hardware("cloudmatrix384")).endswith("-a3")
