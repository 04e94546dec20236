"""Engines belong to a vendor's devices (``Framework.vendors``): a prediction that names no engine
runs vLLM as the device's vendor builds it, and an engine of another vendor's devices is refused
with what to name instead - on the command line, in the Python API and at the scenario field."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from planner.catalog.frameworks import (
    DEFAULT_FRAMEWORKS,
    FALLBACK_FRAMEWORK,
    _frameworks,
    as_run,
    framework,
    load_framework_file,
)
from planner.catalog.hardware import hardware, list_hardware
from planner.cli import app
from planner.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_every_bundled_entry_names_the_vendors_it_runs_on():
    vendors = {hardware(n).vendor for n in list_hardware()}
    for name, entry in _frameworks().items():
        assert entry.vendors, name
        assert set(entry.vendors) <= vendors, name


def test_each_vendors_default_is_one_of_its_own_engines():
    for vendor, name in DEFAULT_FRAMEWORKS.items():
        assert vendor in framework(name).vendors
    assert "nvidia" in framework(FALLBACK_FRAMEWORK).vendors


@pytest.mark.parametrize("device, engine", [("h100-sxm", "vllm"), ("b200", "vllm"), ("mi300x", "vllm-rocm"),
                                            ("mi355x", "vllm-rocm"), ("ascend-910b", "vllm-ascend-graph"),
                                            ("cloudmatrix384", "vllm-ascend-graph"), ("gaudi3", "vllm"),
                                            ("tpu-v5e", "vllm")])
def test_a_device_without_a_named_engine_runs_its_vendors_vllm(device, engine):
    assert as_run(device).framework == engine
    e = planner.estimate("llama-3.1-8b", device, batch=1, input_len=256, output_len=8)
    assert e.framework == engine


def test_an_engine_of_another_vendors_devices_is_refused_with_what_to_name():
    with pytest.raises(InputError) as err:
        as_run("h100-sxm", "vllm-ascend")
    msg = str(err.value)
    assert "vllm-ascend runs on huawei devices" in msg and "h100-sxm (nvidia)" in msg
    for own in ("vllm", "sglang", "tensorrt-llm"):
        assert own in msg
    assert "vendors: [nvidia]" in msg
    with pytest.raises(InputError, match="mi300x"):
        as_run("mi300x", "tensorrt-llm")
    with pytest.raises(InputError, match="ascend-910c"):
        as_run("ascend-910c", "sglang")


def test_a_device_no_entry_covers_may_take_any_engine():
    # no bundled entry runs on Intel or Google devices: any stands in, having none of their own
    assert as_run("gaudi3", "tensorrt-llm").framework == "tensorrt-llm"
    assert as_run("tpu-v5e", "sglang").framework == "sglang"


def test_the_command_line_refuses_it_in_one_line_with_exit_2():
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "100", "-o", "10",
                            "--framework", "vllm-ascend"])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: framework vllm-ascend runs on huawei devices")
    assert "Traceback" not in r.stderr
    ok = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "mi300x", "-i", "100", "-o", "10"])
    assert ok.exit_code == 0 and "vllm-rocm" in ok.stdout


def test_a_framework_file_takes_an_engine_onto_another_vendors_device(tmp_path):
    p = tmp_path / "sglang-rocm.yaml"
    p.write_text("base: sglang\nvendors: [amd]\n")
    fw = load_framework_file(p)
    assert fw.vendors == ["amd"] and fw.moe_imbalance == framework("sglang").moe_imbalance
    assert as_run("mi300x", str(p)).framework == "sglang-rocm"
    with pytest.raises(InputError, match="sglang-rocm runs on amd devices"):
        as_run("h100-sxm", str(p))
    # a file that names no vendors (and no base) runs anywhere
    q = tmp_path / "mine.yaml"
    q.write_text("description: my engine\nstep_overhead: {value: 1 ms, source: measured}\n")
    assert as_run("ascend-910b", str(q)).framework == "mine"


def test_a_vendor_is_written_as_the_profiles_write_it(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("description: x\nvendors: [NVIDIA]\n")
    with pytest.raises(InputError, match=r"bad\.yaml:2 vendors.*lower case.*'NVIDIA'"):
        load_framework_file(p)


def _scenario(tmp_path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_a_scenario_naming_another_vendors_engine_is_refused_at_the_field(tmp_path):
    text = (ROOT / "scenarios" / "chat-h100.yaml").read_text()
    old = "engine: {chunked_prefill: true, max_batched_tokens: 8192}"
    assert old in text
    p = _scenario(tmp_path, text.replace(old, "engine: {chunked_prefill: true, max_batched_tokens: 8192, "
                                              "framework: mindie}"))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if old in t)
    with pytest.raises(InputError, match=rf"^{p}:{line} engine\.framework: framework mindie runs on huawei"):
        planner.load_scenario(p)
    # over devices of two vendors, leaving it unset runs each on its own vendor's default
    mixed = text.replace("hardware: [h100-sxm]", "hardware: [h100-sxm, mi300x]").replace(
        old, "engine: {chunked_prefill: true, max_batched_tokens: 8192, framework: vllm}")
    with pytest.raises(InputError, match="mi300x.*leave it unset"):
        planner.load_scenario(_scenario(tmp_path, mixed))
    planner.load_scenario(_scenario(tmp_path, text.replace("hardware: [h100-sxm]", "hardware: [h100-sxm, mi300x]")))


def test_a_design_naming_another_vendors_engine_is_refused_at_its_field(tmp_path):
    text = (ROOT / "scenarios" / "polca-row-a100.yaml").read_text()
    old = "  hardware: a100-80g"
    assert old in text
    p = _scenario(tmp_path, text.replace(old, "  hardware: ascend-910b", 1))
    with pytest.raises(InputError, match=r"design\.framework: framework vllm-2023 runs on nvidia devices"):
        planner.load_scenario(p)


def test_a_profile_of_ones_own_spells_its_vendor_as_the_bundled_ones(tmp_path):
    p = tmp_path / "myh100.yaml"
    p.write_text("base: h100-sxm\nname: myh100\ndescription: mine\nvendor: ' NVIDIA'\n")
    assert hardware(str(p)).vendor == "nvidia"
    assert as_run(str(p)).framework == "vllm"
    with pytest.raises(InputError, match="vllm-ascend runs on huawei devices, not on myh100"):
        as_run(str(p), "vllm-ascend")
    p.write_text("base: h100-sxm\nname: myh100\ndescription: mine\nvendor: ''\n")
    with pytest.raises(InputError, match="myh100.yaml:4 vendor: expected the device's vendor"):
        hardware(str(p))


def test_frameworks_list_and_show():
    import json

    r = runner.invoke(app, ["frameworks", "list", "--json"])
    assert r.exit_code == 0
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert set(rows) == set(_frameworks())
    assert rows["vllm-rocm"]["vendors"] == ["amd"] and rows["vllm-rocm"]["default_for"] == ["amd"]
    assert rows["sglang"]["default_for"] == []
    s = runner.invoke(app, ["frameworks", "show", "vllm", "--json"])
    figures = {f["path"]: f for f in json.loads(s.stdout)["figures"]}
    assert figures["memory_policy.fraction"]["value"] == 0.9
    assert figures["memory_policy.fraction"]["source"] == "vllm_memory"
    assert figures["grouped_gemm"]["value"] == 0.78 and "PR #24700" in figures["grouped_gemm"]["source"]
    # an inherited entry lists its base's figures with its own over them
    g = {f["path"]: f["value"] for f in json.loads(runner.invoke(
        app, ["frameworks", "show", "vllm-ascend-graph", "--json"]).stdout)["figures"]}
    assert g["step_overhead"] == pytest.approx(1.2e-3) and g["eager_prefill_dispatch"] == pytest.approx(0.66e-3)
    bad = runner.invoke(app, ["frameworks", "show", "vlm"])
    assert bad.exit_code == 2 and "unknown framework 'vlm'" in bad.stderr
