"""The format engines keep linear-attention recurrent states in: SGLang FP32 by default
(--mamba-ssm-dtype), vLLM the model's BF16 (--mamba-ssm-cache-dtype 'auto'), KDA always FP32;
a run's or a user's choice replaces the engine's."""

import pytest

import planner
from planner.catalog.dtypes import DType
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import hardware
from planner.errors import InputError
from planner.perf.memory import state_bytes_per_sequence_device
from planner.perf.parallel import Layout

# Qwen3-Next at TP2: 36 Gated DeltaNet layers, 16 value heads x 128 x 128 per rank (262,144
# elements), conv window 4,096 channels x 3 (12,288 elements, KV format BF16)
QWEN3_NEXT_TP2_BF16_STATE_B = 36 * (262144 * 2 + 12288 * 2)
QWEN3_NEXT_TP2_FP32_STATE_B = 36 * (262144 * 4 + 12288 * 2)


def test_state_bytes_by_hand_in_each_format():
    q = planner.model("qwen3-next-80b-a3b")
    lay = Layout.of(2, 1, 1)
    assert float(state_bytes_per_sequence_device(q, lay, DType.bf16, state_dtype=DType.bf16)) == \
        QWEN3_NEXT_TP2_BF16_STATE_B
    assert float(state_bytes_per_sequence_device(q, lay, DType.bf16, state_dtype=DType.fp32)) == \
        QWEN3_NEXT_TP2_FP32_STATE_B
    # the engine's format, read from the profile its framework was applied to
    vllm, sglang = (with_framework(hardware("h100-sxm"), f) for f in ("vllm", "sglang"))
    assert float(state_bytes_per_sequence_device(q, lay, DType.bf16, vllm)) == QWEN3_NEXT_TP2_BF16_STATE_B
    assert float(state_bytes_per_sequence_device(q, lay, DType.bf16, sglang)) == QWEN3_NEXT_TP2_FP32_STATE_B


def test_kda_states_stay_fp32_under_every_engine():
    """vLLM's kda_state_dtype keeps Kimi Linear's recurrent state in FP32 whatever the setting."""
    k = planner.model("kimi-linear-48b-a3b")
    lay = Layout.of(1, 1, 1)
    fp32 = state_bytes_per_sequence_device(k, lay, DType.bf16, state_dtype=DType.fp32)
    assert float(state_bytes_per_sequence_device(k, lay, DType.bf16, with_framework(hardware("h100-sxm"), "vllm"))) \
        == float(fp32)
    e = planner.estimate("kimi-linear-48b-a3b", "h100-sxm", batch=4, input_len=1000, output_len=100,
                         state_dtype="bf16")
    assert e.state_dtype == "fp32"


def test_estimate_names_the_format_and_a_wider_state_is_never_faster():
    kw = dict(tp=4, batch=64, input_len=2000, output_len=1000)
    by = {s: planner.estimate("qwen3-next-80b-a3b", "h100-sxm", state_dtype=s, **kw) for s in ("bf16", "fp32")}
    default = planner.estimate("qwen3-next-80b-a3b", "h100-sxm", **kw)
    assert default.framework == "vllm" and default.state_dtype == "bf16"
    assert planner.estimate("qwen3-next-80b-a3b", "h100-sxm", framework="sglang", **kw).state_dtype == "fp32"
    assert planner.estimate("llama-3.1-8b", "h100-sxm", input_len=10, output_len=10).state_dtype is None
    assert default.tpot_s == by["bf16"].tpot_s
    assert by["fp32"].tpot_s > by["bf16"].tpot_s
    assert by["fp32"].memory.max_batch < by["bf16"].memory.max_batch
    # the state is read and written once per decode step: 64 sequences x 36 layers x (8 x 128 x 128)
    # elements per rank at TP4, twice, two more bytes each in FP32, at the HBM fraction of the
    # recurrent decode kernel (Efficiency.linear_decode: the H200 sweep's 0.55)
    h100 = with_framework(hardware("h100-sxm"), "vllm")
    stream = h100.memory.bandwidth.value * h100.efficiency.linear_decode.memory.value
    extra_s = 2 * 64 * 36 * 8 * 128 * 128 * 2 / stream
    assert by["fp32"].tpot_s - by["bf16"].tpot_s == pytest.approx(extra_s, rel=0.05)


def test_a_run_or_user_choice_replaces_the_engine_default():
    from planner.validate import _as_run, load_points

    (row,) = [p for p in load_points().points if p.id == "sglcb-qwen3next-a3-1card-w8a8-3500-1500-c1-tpot"]
    assert row.framework == "sglang-ascend" and row.state_dtype == "bf16"
    assert _as_run(None, row).apply(hardware("ascend-910c")).efficiency.linear_state_dtype is DType.bf16
    with pytest.raises(InputError, match="state_dtype fp8"):
        planner.estimate("qwen3-next-80b-a3b", "h100-sxm", tp=4, input_len=10, output_len=10, state_dtype="fp8")
    with pytest.raises(InputError, match="state_dtype 'half'"):
        planner.estimate("qwen3-next-80b-a3b", "h100-sxm", tp=4, input_len=10, output_len=10, state_dtype="half")


def test_a_framework_file_with_a_format_no_engine_offers_is_a_file_line_error(tmp_path):
    from planner.catalog.frameworks import load_framework_file

    f = tmp_path / "fw.yaml"
    f.write_text('mine:\n  description: "SGLang, my flags"\n  linear_state_dtype: {value: int4, source: "mine"}\n')
    with pytest.raises(InputError, match=r"fw\.yaml:3 linear_state_dtype: recurrent states are kept in fp32, bf16, "
                                         r"fp16.*got int4"):
        load_framework_file(f)
    f.write_text('mine:\n  description: "SGLang, my flags"\n  linear_state_dtype: {value: bf16, source: "mine"}\n')
    assert load_framework_file(f).apply(hardware("h100-sxm")).efficiency.linear_state_dtype is DType.bf16


def test_throughput_and_whatif_take_the_state_format_on_the_command_line():
    """A wider state leaves less memory and more bytes per step: never more throughput."""
    import json

    from typer.testing import CliRunner

    from planner.cli import app

    base = ["-m", "qwen3-next-80b-a3b", "-H", "h200", "--tp", "2", "-i", "2000", "-o", "1000", "--json"]
    out = {}
    for fmt in ("bf16", "fp32"):
        r = CliRunner().invoke(app, ["throughput", *base, "-c", "64", "--state-dtype", fmt])
        assert r.exit_code == 0, r.output
        out[fmt] = json.loads(r.output)["output_tokens_per_s"]
    assert out["fp32"] < out["bf16"]
    r = CliRunner().invoke(app, ["whatif", *base, "--state-dtype", "fp32"])
    assert r.exit_code == 0 and json.loads(r.output)["state_dtype"] == "fp32"
    r = CliRunner().invoke(app, ["throughput", *base, "-c", "64", "--state-dtype", "int8"])
    assert r.exit_code == 2 and "int8" in r.output


def test_a_checkpoints_declared_state_format_wins_where_the_engine_reads_it(tmp_path):
    """Qwen3.5's config.json declares mamba_ssm_dtype float32, and vLLM copies it into its cache
    config when --mamba-ssm-cache-dtype is auto: FP32 states under vllm for that model (Qwen3-Next,
    which declares none, keeps vLLM's BF16); TensorRT-LLM's PyTorch backend takes the torch_dtype
    instead (BF16); an explicit flag beats the checkpoint; an unknown declared format is named."""
    kw = dict(tp=2, input_len=100, output_len=10)
    assert planner.estimate("qwen3.5-35b-a3b", "h200", **kw).state_dtype == "fp32"
    assert planner.estimate("qwen3-next-80b-a3b", "h200", **kw).state_dtype == "bf16"
    assert planner.estimate("qwen3.5-35b-a3b", "h200", framework="tensorrt-llm-pytorch", **kw).state_dtype == "bf16"
    assert planner.estimate("qwen3.5-35b-a3b", "h200", state_dtype="bf16", **kw).state_dtype == "bf16"
    import json

    import yaml

    from planner.catalog.model_catalog import MODELS_DIR
    config = yaml.safe_load((MODELS_DIR / "qwen3.5-35b-a3b.yaml").read_text())["config"]
    assert config["mamba_ssm_dtype"] == "float32"
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(dict(config, mamba_ssm_dtype="float8")))
    with pytest.raises(InputError, match="mamba_ssm_dtype.*'float8'.*float32"):
        planner.model(str(bad))


HYBRID_SCENARIO = """\
name: qnext-states
model: qwen3-next-80b-a3b
workload:
  rate: 20
  input: {dist: fixed, value: 8000}
  output: {dist: fixed, value: 1000}
slo:
  ttft_s: {p90: 3.0}
  tpot_s: {p90: 0.05}
engine: {framework: vllm, state_dtype: fp32}
search: {hardware: [h200], tp: [2], weight_dtype: [bf16]}
"""


def test_scenario_engine_state_dtype_plans_and_launches_that_format(tmp_path):
    """engine.state_dtype is the engine's command-line format: it beats vLLM's BF16 default, so
    FP32 states (2 x the bytes of the 16 value heads x 128 x 128 per GDN layer and rank) hold
    fewer sequences per H200 and the plan needs at least as many instances; the plan says which
    format it assumed, and the vLLM / SGLang launch files set it."""
    import json

    from typer.testing import CliRunner

    from planner.cli import app
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    fp32, bf16 = tmp_path / "fp32.yaml", tmp_path / "bf16.yaml"
    fp32.write_text(HYBRID_SCENARIO)
    bf16.write_text(HYBRID_SCENARIO.replace("state_dtype: fp32", "state_dtype: bf16"))
    a, b = run_scenario(load_scenario(fp32)).best, run_scenario(load_scenario(bf16)).best
    assert (a.state_dtype, b.state_dtype) == ("fp32", "bf16")
    assert a.instances >= b.instances and a.max_rate_per_instance < b.max_rate_per_instance
    runner = CliRunner()
    for engine, flag in (("vllm", "--mamba-ssm-cache-dtype float32"), ("sglang", "--mamba-ssm-dtype float32")):
        r = runner.invoke(app, ["plan", str(fp32), "--json", "--emit", engine, str(tmp_path / engine)])
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["best"]["state_dtype"] == "fp32"
        assert flag in (tmp_path / engine / f"{engine}.sh").read_text().replace("\\\n", " ").replace("  ", " ")
    r = runner.invoke(app, ["plan", str(fp32), "--emit", "trtllm", str(tmp_path / "trt")])
    assert r.exit_code == 2 and "mamba_ssm_cache_dtype" in r.stderr and not (tmp_path / "trt").exists()


def test_scenario_state_dtype_on_a_model_without_states_is_a_located_error(tmp_path):
    from planner.errors import InputError
    from planner.scenario import load_scenario

    p = tmp_path / "dense.yaml"
    p.write_text(HYBRID_SCENARIO.replace("qwen3-next-80b-a3b", "llama-3.1-8b"))
    with pytest.raises(InputError, match=r"dense.yaml:10 engine.state_dtype: llama-3.1-8b has no linear-attention"):
        load_scenario(p)
    p.write_text(HYBRID_SCENARIO.replace("state_dtype: fp32", "state_dtype: int8"))
    with pytest.raises(InputError, match=r"engine.state_dtype"):
        load_scenario(p)
