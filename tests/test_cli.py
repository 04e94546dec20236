import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
WHATIF = ["whatif", "--model", "llama-3.1-70b", "--tp", "8", "--batch", "16", "--input-len", "2048",
          "--output-len", "256", "--json"]


@pytest.mark.parametrize("hw", ["h100-sxm", "mi300x", "ascend-910c"])
def test_whatif_json(hw):
    r = runner.invoke(app, [*WHATIF, "--hardware", hw])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    for key in ("ttft_s", "tpot_s", "output_tokens_per_s", "total_tokens_per_s", "fits"):
        assert key in data
    assert data["fits"] and 0 < data["tpot_s"] < data["ttft_s"]


def test_whatif_deepseek_with_ep():
    r = runner.invoke(app, ["whatif", "--model", "deepseek-v3", "--hardware", "h200", "--tp", "8", "--ep", "8",
                            "--batch", "32", "--input-len", "2048", "--output-len", "256", "--weight-dtype", "fp8",
                            "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ep"] == 8


def test_whatif_draft_flag():
    base = [*WHATIF, "--hardware", "h100-sxm", "--mtp-tokens", "3", "--mtp-acceptance", "0.7"]
    r = runner.invoke(app, [*base, "--draft", "llama-3.1-70b-eagle3"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["draft"] == "llama-3.1-70b-eagle3"
    r = runner.invoke(app, [*base, "--draft", "llama-70b-eagle"])
    assert r.exit_code == 2 and "unknown draft" in r.output and "llama-3.1-70b-eagle3" in r.output
    r = runner.invoke(app, [*base, "--draft", "llama-3.1-8b-eagle3"])
    assert r.exit_code == 2 and "draft for another model" in r.output


def test_whatif_explain_lists_operators():
    r = runner.invoke(app, [*WHATIF[:-1], "--hardware", "h100-sxm", "--explain"])
    assert r.exit_code == 0
    for op in ("qkv_proj", "attention", "ffn_up", "ffn_all_reduce", "step_overhead"):
        assert op in r.stdout


def test_explain_works_on_local_model_and_hardware_files(tmp_path):
    # the breakdown re-evaluates what the estimate resolved: a local config.json whose model name is
    # not in the catalog and a profile file whose name is not bundled (both failed after the table)
    import shutil

    from planner.catalog.hardware import bundled_profiles_dir

    hw = tmp_path / "site-h100.yaml"
    hw.write_text((bundled_profiles_dir() / "h100-sxm.yaml").read_text().replace("name: h100-sxm", "name: site-h100"))
    cfg = tmp_path / "my-model" / "config.json"
    cfg.parent.mkdir()
    shutil.copy(Path(__file__).parent.parent / "scenarios" / "models" / "kimi-k2-linear-1t.json", cfg)
    args = ["whatif", "--model", str(cfg), "--hardware", str(hw), "--tp", "8", "--ep", "8", "--input-len", "1000",
            "--output-len", "10", "--weight-dtype", "int4", "--explain"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "linear_attention" in r.stdout and "unknown" not in r.output
    doc = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert doc["hardware"] == "site-h100" and any(row["op"] == "linear_attention" for row in doc["breakdown"])


def test_explain_cuts_long_sources_and_json_keeps_them():
    # sglang-ascend's INT8 GEMM source is a paragraph: the table shows its first clause, --json all
    from planner.report.whatif import short_source

    args = ["whatif", "--model", "qwen3-32b", "--hardware", "ascend-910c", "--tp", "2", "--input-len", "2048",
            "--output-len", "64", "--weight-dtype", "int8", "--framework", "sglang-ascend", "--explain"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "#2514 ..." in r.stdout and "W8A8 performance no" not in r.stdout
    full = json.loads(runner.invoke(app, [*args, "--json"]).stdout)["breakdown"]
    assert any("W8A8 performance no better than BF16" in row["source"] for row in full)
    assert short_source("fa3_h100") == "fa3_h100"
    assert short_source("x" * 60) == "x" * 48 + " ..."


def test_does_not_fit_exits_1_with_advice():
    r = runner.invoke(app, ["whatif", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--tp", "4",
                            "--input-len", "100", "--output-len", "10"])
    assert r.exit_code == 1
    assert "does not fit" in r.stderr and "would fit" in r.stderr


def test_does_not_fit_at_any_nearby_layout_names_the_batch_one_holds():
    """64 sequences of 100,100 tokens of Llama-3.1-70B need ~2 TB of KV (327,680 B/token): no nearby
    layout of 22.4 GiB L4s holds them, so the advice is the layout holding the most, with its batch."""
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-70b", "-H", "l4", "-i", "100000", "-o", "100", "-b", "64"])
    assert r.exit_code == 1
    m = re.search(r"would fit: (--tp \d+.*) --batch (\d+) \(no nearby layout holds 64", r.stderr)
    assert m, r.stderr
    b = int(m.group(2))
    assert 1 <= b < 64
    flags = m.group(1).split()
    ok = runner.invoke(app, ["whatif", "-m", "llama-3.1-70b", "-H", "l4", "-i", "100000", "-o", "100", "-b", str(b),
                             *flags])
    assert ok.exit_code == 0, ok.stderr                       # the advice holds
    more = runner.invoke(app, ["whatif", "-m", "llama-3.1-70b", "-H", "l4", "-i", "100000", "-o", "100", "-b",
                               str(b + 1), *flags])
    assert more.exit_code == 1                                # and is the most that layout holds


@pytest.mark.parametrize("args,match", [
    (["--hardware", "h100-sx"], "did you mean 'h100-sxm'"),
    (["--hardware", "h100-sxm", "--tp", "3"], "tp must divide the 64 attention heads"),
    (["--hardware", "h100-sxm", "--batch", "0"], "batch"),
    (["--hardware", "h100-sxm", "--input-len", "-1"], "input-len"),
])
def test_bad_input_exit_2_one_line(args, match):
    r = runner.invoke(app, ["whatif", "--model", "llama-3.1-70b", "--input-len", "10", "--output-len", "10", *args])
    assert r.exit_code == 2
    assert match in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_malformed_profile_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbase: h100-sxm\ndescription: x\nmemory:\n  capacity: {value: lots, source: x}\n")
    r = runner.invoke(app, ["whatif", "--model", "llama-3.1-8b", "--hardware", str(bad), "-i", "10", "-o", "1"])
    assert r.exit_code == 2 and "bad.yaml:5" in r.stderr


def test_catalog_commands():
    for cmd in (["hardware", "list"], ["hardware", "show", "cloudmatrix384"], ["models", "list"],
                ["models", "show", "deepseek-v3"]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 0, (cmd, r.output)
    r = runner.invoke(app, ["models", "show", "deepseek-v3", "--json"])
    assert json.loads(r.stdout)["kv_bytes_per_token_bf16"] == 70272


def test_memory_fraction_as_given_on_the_engines_command_line():
    """Llama-3.1-70B BF16 at TP2 on A100-80G under vLLM: 85.9 GB per GPU, 70.6 GB of weights; the
    KV pool is f x total - weights - workspace, and each 2,100-token sequence holds 2,100 x 327,680 / 2
    bytes per GPU (344 MB). At 0.90 the pool is ~6.0 GB (16-17 sequences), at 0.95 ~10.3 GB (29-30):
    raising the setting by 0.05 x 85.9 GB = 4.3 GB admits 4.3 GB / 344 MB = 12.5 more sequences."""
    import planner

    kw = dict(tp=2, input_len=2000, output_len=100, framework="vllm")
    base = planner.estimate("llama-3.1-70b", "a100-80g", **kw).memory
    more = planner.estimate("llama-3.1-70b", "a100-80g", memory_fraction=0.95, **kw).memory
    assert (base.memory_fraction, more.memory_fraction, more.fraction_of) == (0.9, 0.95, "total")
    assert more.reserved_bytes == pytest.approx(base.reserved_bytes - 0.05 * base.capacity_bytes)
    per_seq = 2100 * 327_680 / 2
    assert more.max_batch - base.max_batch == pytest.approx(0.05 * base.capacity_bytes / per_seq, abs=1)
    r = runner.invoke(app, ["whatif", "-m", "llama-3.1-70b", "-H", "a100-80g", "--tp", "2", "-i", "2000", "-o", "100",
                            "--memory-fraction", "0.95", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["memory"]["max_batch"] == more.max_batch
    from planner.errors import InputError

    with pytest.raises(InputError, match=r"memory_fraction must be in \(0, 1\], got 1.5"):
        planner.estimate("llama-3.1-70b", "a100-80g", memory_fraction=1.5, **kw)
    # TensorRT-LLM's setting is a share of what the weights leave, in its own sense
    trt = planner.estimate("llama-3.1-70b", "a100-80g", **(kw | {"framework": "tensorrt-llm"}), memory_fraction=0.5)
    assert (trt.memory.memory_fraction, trt.memory.fraction_of) == (0.5, "free")
