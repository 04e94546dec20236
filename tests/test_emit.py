"""``planner plan --emit``: the launch files use each engine's documented flag names and carry the
plan's numbers (layout, limits, replicas)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent

# Flag names as the engines document them (looked up, not taken from planner.emit):
# vLLM engine arguments, https://docs.vllm.ai/en/latest/models/engine_args.html (and vllm/engine/arg_utils.py
# for --data-parallel-size / --enable-expert-parallel); --kv-cache-dtype {auto,fp8,fp8_e5m2,fp8_e4m3}
VLLM = {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
        "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization", "--kv-cache-dtype",
        "--quantization",
        # the KV pool's block count and block size (engine args: "--num-gpu-blocks-override ... Used for
        # testing preemption"; --block-size)
        "--num-gpu-blocks-override", "--block-size",
        # vllm-ascend launched as the vllm-ascend-graph entry assumes (its nightly CI configs)
        "--compilation-config", "--async-scheduling",
        # the longest request the engine takes, which its KV pool must hold at start-up (--max-model-len)
        "--max-model-len"}
# SGLang server arguments, https://docs.sglang.io/advanced_features/server_arguments.html; the prefill
# delayer's two from python/sglang/srt/server_args.py (enable_prefill_delayer, prefill_delayer_max_delay_passes)
SGLANG = {"--model-path", "--tp-size", "--dp-size", "--enable-dp-attention", "--ep-size", "--mem-fraction-static",
          "--max-running-requests", "--chunked-prefill-size", "--enable-mixed-chunk", "--kv-cache-dtype",
          "--quantization", "--enable-prefill-delayer", "--prefill-delayer-max-delay-passes",
          # the NPU backend, as SGLang's "Best Practice on Ascend NPU" commands launch it
          "--device", "--attention-backend",
          # the KV pool's token cap (server arguments: --max-total-tokens)
          "--max-total-tokens"}
# trtllm-serve options, https://nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html (+ --ep_size)
TRTLLM = {"--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens",
          "--kv_cache_free_gpu_memory_fraction"}
KV_DTYPES = {"vllm": {"auto", "fp8", "fp8_e5m2", "fp8_e4m3"}, "sglang": {"fp8_e4m3", "fp8_e5m2"}}

MOE = """\
name: moe-ep
model: mixtral-8x7b
workload:
  rate: 4
  input: {dist: fixed, value: 1024}
  output: {dist: fixed, value: 128}
slo:
  ttft_s: {p90: 2.0}
  tpot_s: {p90: 0.1}
search:
  hardware: [h100-sxm]
  tp: [1]
  ep: [4]
  weight_dtype: [fp8]
  kv_dtype: fp8
"""


def _plan(tmp_path, scenario, engine):
    out = tmp_path / engine
    r = runner.invoke(app, ["plan", str(scenario), "--json", "--emit", engine, str(out)])
    assert r.exit_code == 0, r.stderr
    import json

    return json.loads(r.stdout)["best"], out


def _command(path: Path) -> list[str]:
    text = path.read_text()
    line = text[text.index("exec "):].replace("\\\n", " ")
    return shlex.split(line)[1:]


def _flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            out[a] = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
    return out


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    p = tmp_path_factory.mktemp("moe") / "moe.yaml"
    p.write_text(MOE)
    return p


def test_vllm_flags_documented_and_carry_the_plan(tmp_path, moe):
    best, out = _plan(tmp_path, moe, "vllm")
    argv = _command(out / "vllm.sh")
    assert argv[:3] == ["vllm", "serve", "$MODEL"]
    f = _flags(argv)
    assert set(f) <= VLLM
    # ep 4 on tp 1: 4 attention replicas, EP over all of them (vLLM: EP = TP x DP)
    assert (f["--tensor-parallel-size"], f["--data-parallel-size"]) == ("1", "4")
    assert "--enable-expert-parallel" in f and f["--enable-expert-parallel"] is None
    assert int(f["--max-num-seqs"]) == best["max_num_seqs"]
    assert f["--kv-cache-dtype"] in KV_DTYPES["vllm"] and f["--kv-cache-dtype"] == "fp8"
    assert f["--quantization"] == "fp8" and 0 < float(f["--gpu-memory-utilization"]) <= 1
    assert "predicted TTFT" in (out / "vllm.sh").read_text()
    # the scenario's 1,024 + 128 tokens, rounded up to 256: not the model's 32,768-token default, which
    # vLLM checks its KV pool against at start-up
    assert f["--max-model-len"] == "1280"


def test_sglang_flags_documented(tmp_path, moe):
    best, out = _plan(tmp_path, moe, "sglang")
    argv = _command(out / "sglang.sh")
    f = _flags(argv)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"] and f["--model-path"] == "$MODEL"
    assert set(f) <= SGLANG
    # --tp-size counts all 4 ranks (SGLang asserts tp_size % dp_size == 0); with DP attention SGLang
    # divides --max-running-requests and --chunked-prefill-size by --dp-size, so both are the
    # instance's: 4 replicas x the plan's per-replica figure, 4 x the scenario's 8,192-token budget
    assert (f["--tp-size"], f["--dp-size"], f["--ep-size"]) == ("4", "4", "4")
    assert int(f["--max-running-requests"]) == 4 * best["max_num_seqs"]
    assert int(f["--chunked-prefill-size"]) == 4 * 8192
    assert f["--kv-cache-dtype"] in KV_DTYPES["sglang"]


def test_launch_files_count_ranks_per_die_on_a_910c(tmp_path):
    """A 910C package runs as 2 ranks: ep 4 over packages is SGLang --tp-size 8 --dp-size 8 --ep-size 8 (on
    its NPU backend) and vLLM --data-parallel-size 8; the INT8 plan loads a modelslim W8A8 checkpoint
    (vllm-ascend --quantization ascend, SGLang --quantization modelslim); the plan's max_num_seqs is per
    rank (die), and each vLLM engine core keeps its whole token budget (vLLM's limits are each DP
    engine core's own), not a package's budget split over its two dies: the 2,048 tokens vLLM picks
    itself on a device below 70 GiB, which a 910C die (61 GiB) is, not the 122 GiB package."""
    p = tmp_path / "moe910c.yaml"
    p.write_text(MOE.replace("[h100-sxm]", "[ascend-910c]").replace("weight_dtype: [fp8]", "weight_dtype: [int8]")
                 .replace("kv_dtype: fp8", "kv_dtype: bf16") + "cost:\n  prices: {ascend-910c: 2.0}\n")
    best, out = _plan(tmp_path, p, "sglang")
    f = _flags(_command(out / "sglang.sh"))
    assert set(f) <= SGLANG
    assert (f["--tp-size"], f["--dp-size"], f["--ep-size"]) == ("8", "8", "8")
    assert int(f["--max-running-requests"]) == 8 * best["max_num_seqs"]
    # SGLang's NPU backend, and the INT8 plan's modelslim W8A8 checkpoint under each engine's switch
    assert (f["--device"], f["--attention-backend"], f["--quantization"]) == ("npu", "ascend", "modelslim")
    best, out = _plan(tmp_path, p, "vllm")
    f = _flags(_command(out / "vllm.sh"))
    assert f["--quantization"] == "ascend" and "modelslim checkpoint" in (out / "vllm.sh").read_text()
    assert (f["--tensor-parallel-size"], f["--data-parallel-size"]) == ("1", "8")
    assert int(f["--max-num-seqs"]) == best["max_num_seqs"]
    assert int(f["--max-num-batched-tokens"]) == 2048
    # the default engine on Ascend is vllm-ascend-graph: the launch asks for its decode graphs
    assert json.loads(f["--compilation-config"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}


def test_a_plan_on_vllm_ascend_graph_launches_full_decode_graphs(tmp_path):
    """The plan's step times assume one ACL graph per decode step (the vllm-ascend-graph entry), so
    the launch asks for it: cudagraph_mode FULL_DECODE_ONLY with asynchronous scheduling; the
    default-mode entry's plan launches without them."""
    p = tmp_path / "moe910c-graph.yaml"
    p.write_text(MOE.replace("[h100-sxm]", "[ascend-910c]").replace("weight_dtype: [fp8]", "weight_dtype: [int8]")
                 .replace("kv_dtype: fp8", "kv_dtype: bf16")
                 + "engine: {framework: vllm-ascend-graph}\ncost:\n  prices: {ascend-910c: 2.0}\n")
    _, out = _plan(tmp_path, p, "vllm")
    f = _flags(_command(out / "vllm.sh"))
    assert set(f) <= VLLM
    assert json.loads(f["--compilation-config"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert "--async-scheduling" in f and f["--async-scheduling"] is None
    # a plan on vllm-ascend's default piecewise mode launches it as it is, without the two flags
    text = p.read_text()
    p.write_text(text.replace("framework: vllm-ascend-graph", "framework: vllm-ascend"))
    _, out = _plan(tmp_path, p, "vllm")
    f = _flags(_command(out / "vllm.sh"))
    assert "--compilation-config" not in f and "--async-scheduling" not in f
    # the flags are the entry's data (launch_args), so a file of one's own on it launches them too
    (tmp_path / "mine.yaml").write_text("name: mine\nbase: vllm-ascend-graph\n"
                                        "step_overhead: {value: 1.5 ms, source: my trace}\n")
    p.write_text(text.replace("framework: vllm-ascend-graph", f"framework: {tmp_path / 'mine.yaml'}"))
    _, out = _plan(tmp_path, p, "vllm")
    f = _flags(_command(out / "vllm.sh"))
    assert json.loads(f["--compilation-config"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}


def test_trtllm_flags_documented(tmp_path, moe):
    best, out = _plan(tmp_path, moe, "trtllm")
    f = _flags(_command(out / "trtllm.sh"))
    assert set(f) <= TRTLLM
    assert (f["--tp_size"], f["--pp_size"], f["--ep_size"]) == ("4", "1", "4")
    assert int(f["--max_batch_size"]) == best["max_num_seqs"]
    assert int(f["--max_num_tokens"]) == 8192          # per attention replica, as the scenario's budget
    assert 0 < float(f["--kv_cache_free_gpu_memory_fraction"]) < 1


def test_k8s_deployment_replicas_and_gpus(tmp_path):
    best, out = _plan(tmp_path, ROOT / "scenarios" / "chat-h100.yaml", "k8s")
    (path,) = out.iterdir()
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "Deployment" and doc["spec"]["replicas"] == best["instances"]
    container = doc["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == best["tp"] * best["pp"]
    assert set(_flags(container["args"])) <= VLLM
    assert path.read_text().startswith("# planner plan chat-h100")


@pytest.mark.parametrize("args,needle", [
    (["--emit", "vllmm", "DIR"], "did you mean 'vllm'"),
    (["--emit", "vllm", "/nonexistent/dir/x"], "does not exist"),
])
def test_emit_checked_before_the_run(tmp_path, args, needle):
    args = [a.replace("DIR", str(tmp_path / "o")) for a in args]
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios" / "chat-h100.yaml"), *args])
    assert r.exit_code == 2 and needle in r.stderr


def test_emit_other_designs_is_a_clean_error(tmp_path):
    r = runner.invoke(app, ["plan", str(ROOT / "scenarios" / "llama70b-slo-search.yaml"), "--emit", "vllm",
                            str(tmp_path / "o")])
    assert r.exit_code == 2 and "colocated" in r.stderr and not (tmp_path / "o").exists()


def test_the_prefill_delayer_reaches_sglang_only(tmp_path):
    """A plan that assumed SGLang's prefill delayer launches SGLang with it; vLLM and TensorRT-LLM
    have none, which is a clean error rather than a launch file that serves differently."""
    p = tmp_path / "delay.yaml"
    p.write_text(MOE + "engine: {prefill_delay_passes: 30}\n")
    _, out = _plan(tmp_path, p, "sglang")
    f = _flags(_command(out / "sglang.sh"))
    assert "--enable-prefill-delayer" in f and f["--prefill-delayer-max-delay-passes"] == "30"
    for engine in ("vllm", "trtllm"):
        r = runner.invoke(app, ["plan", str(p), "--emit", engine, str(tmp_path / engine)])
        assert r.exit_code != 0 and "prefill delayer" in r.output + (r.stderr or "")
        assert "Traceback" not in r.output


def test_sglang_is_launched_with_the_iterations_the_plan_assumed(tmp_path):
    """The planner's default engine runs decodes in its prompt-chunk iterations (vLLM's way), which
    SGLang does only with --enable-mixed-chunk; a plan with mixed_prefill: false (SGLang's default
    scheduling) launches SGLang without it, and vLLM and TensorRT-LLM, which always mix, refuse it."""
    _, out = _plan(tmp_path, _write(tmp_path, "mixed.yaml", MOE), "sglang")
    assert "--enable-mixed-chunk" in _flags(_command(out / "sglang.sh"))
    p = _write(tmp_path, "alone.yaml", MOE + "engine: {mixed_prefill: false}\n")
    _, out = _plan(tmp_path, p, "sglang")
    assert "--enable-mixed-chunk" not in _flags(_command(out / "sglang.sh"))
    for engine in ("vllm", "trtllm"):
        r = runner.invoke(app, ["plan", str(p), "--emit", engine, str(tmp_path / engine)])
        assert r.exit_code != 0 and "mixed_prefill" in r.output + (r.stderr or "")
        assert "Traceback" not in r.output


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


# MindIE Service config.json keys as its parameter page names and nests them (Ascend/MindIE-LLM
# docs/en/user_guide/user_manual/service_parameter_configuration.md @ 613aab54; tp / dp / moe_tp /
# moe_ep as MindIE's MoE deployment configs set them in ModelConfig)
MINDIE_MODEL = {"modelName", "modelWeightPath", "worldSize", "npuMemSize", "backendType",
                "tp", "dp", "moe_tp", "moe_ep"}
MINDIE_SCHEDULE = {"templateType", "maxBatchSize", "maxPrefillTokens", "maxIterTimes"}
MINDIE_DEPLOY = {"maxSeqLen", "maxInputTokenLen", "truncation", "ModelConfig"}

MINDIE_SCN = """\
name: qwen3-moe-mindie
model: qwen3-30b-a3b
workload:
  rate: 4
  input: {dist: fixed, value: 520}
  output: {dist: fixed, value: 256}
slo:
  ttft_s: {p90: 1.0}
  tpot_s: {p90: 0.12}
engine:
  framework: mindie
search:
  hardware: [ascend-910b]
  tp: [2]
cost:
  prices: {ascend-910b: 1.5}
"""


def test_mindie_config_carries_the_plan_and_merges_keeping_the_images_own(tmp_path):
    """--emit mindie writes the keys of MindIE's config.json the plan decides, nested as MindIE's
    parameter page nests them (TP2 on two 910B: worldSize 2, devices [[0, 1]]; maxBatchSize the
    plan's sequences; prompts of 520 and outputs of 256 tokens -> maxInputTokenLen 768, maxSeqLen
    1,024, maxIterTimes 256, rounded up to 256; KV sized by MindIE from NPU_MEMORY_FRACTION = the
    mindie entry's 0.8), and a script that merges them into the image's config, keeping that
    config as config.json.orig (merging again starts from it: nothing the image held is lost)."""
    import json
    import os
    import subprocess

    best, out = _plan(tmp_path, _write(tmp_path, "m.yaml", MINDIE_SCN), "mindie")
    cfg = json.loads((out / "mindie-config.json").read_text())["BackendConfig"]
    deploy, schedule = cfg["ModelDeployConfig"], cfg["ScheduleConfig"]
    (model,) = deploy["ModelConfig"]
    assert set(model) <= MINDIE_MODEL and set(schedule) <= MINDIE_SCHEDULE and set(deploy) <= MINDIE_DEPLOY
    assert cfg["npuDeviceIds"] == [[0, 1]] and model["worldSize"] == 2 and model["npuMemSize"] == -1
    assert schedule["maxBatchSize"] == best["max_num_seqs"] and schedule["templateType"] == "Standard"
    assert (deploy["maxInputTokenLen"], deploy["maxSeqLen"], schedule["maxIterTimes"]) == (768, 1024, 256)
    script = (out / "mindie.sh").read_text()
    assert "export NPU_MEMORY_FRACTION=0.8 " in script and "predicted TTFT" in script
    # the merge, run on a stand-in of the image's config
    home = tmp_path / "mindie-service"
    (home / "conf").mkdir(parents=True)
    image = {"ServerConfig": {"port": 1025}, "BackendConfig": {"npuDeviceIds": [[0, 1, 2, 3]], "ModelDeployConfig": {
        "maxSeqLen": 2560, "ModelConfig": [{"modelInstanceType": "Standard", "cpuMemSize": 5, "worldSize": 4}]},
        "ScheduleConfig": {"maxBatchSize": 200, "maxPrefillBatchSize": 50}}}
    (home / "conf" / "config.json").write_text(json.dumps(image))
    merge = script[script.index("<<'EOF'\n") + 8:script.index("\nEOF\n")]
    for _ in range(2):
        subprocess.run(["python3", "-c", merge, str(home / "conf" / "config.json"), str(out / "mindie-config.json"),
                        "/models/q"], check=True, env={**os.environ})
    merged = json.loads((home / "conf" / "config.json").read_text())
    assert json.loads((home / "conf" / "config.json.orig").read_text()) == image
    m = merged["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    assert (m["worldSize"], m["cpuMemSize"], m["modelWeightPath"]) == (2, 5, "/models/q")
    assert merged["ServerConfig"] == {"port": 1025}
    assert merged["BackendConfig"]["ScheduleConfig"]["maxPrefillBatchSize"] == 50


def test_mindie_emits_expert_parallel_plans_and_refuses_mixed_iterations(tmp_path):
    """Experts over 4 packages of a 910C are 8 ranks: worldSize 8, attention DP 8 x TP 1 and experts
    EP 8 x TP 1 (MindIE's tp / dp / moe_tp / moe_ep); a plan whose decodes ride in its prompt
    iterations (the default engine's way) is refused, since MindIE's Standard template batches
    prompts apart."""
    import json

    p = _write(tmp_path, "moe910c.yaml", MOE.replace("[h100-sxm]", "[ascend-910c]").replace(
        "weight_dtype: [fp8]", "weight_dtype: [int8]").replace("kv_dtype: fp8", "kv_dtype: bf16")
        + "engine: {framework: mindie}\ncost:\n  prices: {ascend-910c: 2.0}\n")
    _, out = _plan(tmp_path, p, "mindie")
    (model,) = json.loads((out / "mindie-config.json").read_text())["BackendConfig"]["ModelDeployConfig"]["ModelConfig"]
    assert (model["worldSize"], model["tp"], model["dp"], model["moe_tp"], model["moe_ep"]) == (8, 1, 8, 1, 8)
    assert "modelslim checkpoint" in (out / "mindie.sh").read_text()
    mixed = _write(tmp_path, "mixed.yaml", MOE.replace("[h100-sxm]", "[ascend-910c]").replace(
        "weight_dtype: [fp8]", "weight_dtype: [int8]").replace("kv_dtype: fp8", "kv_dtype: bf16")
        + "cost:\n  prices: {ascend-910c: 2.0}\n")
    r = runner.invoke(app, ["plan", str(mixed), "--emit", "mindie", str(tmp_path / "x")])
    assert r.exit_code != 0 and "Standard template" in r.output + (r.stderr or "")
    assert "Traceback" not in r.output
    # a plan on GPUs is not a MindIE deployment
    r = runner.invoke(app, ["plan", str(_write(tmp_path, "gpu.yaml", MOE)), "--emit", "mindie", str(tmp_path / "y")])
    assert r.exit_code != 0 and "Ascend" in r.output + (r.stderr or "") and not (tmp_path / "y").exists()


def test_emit_never_overwrites_a_users_own_files(tmp_path):
    """A rerun replaces the launch files it wrote; a script of the user's own with the same name
    stops the emit before the run, that file kept and nothing written."""
    scenario = ROOT / "scenarios" / "chat-h100.yaml"
    _plan(tmp_path, scenario, "vllm")
    _plan(tmp_path, scenario, "vllm")                     # its own vllm.sh: replaced
    mine = tmp_path / "vllm" / "vllm.sh"
    mine.write_text("#!/bin/sh\necho my own launcher\n")
    r = runner.invoke(app, ["plan", str(scenario), "--emit", "vllm", str(tmp_path / "vllm")])
    assert r.exit_code == 2 and "vllm.sh exists and was not written by planner" in r.stderr
    assert mine.read_text() == "#!/bin/sh\necho my own launcher\n"
