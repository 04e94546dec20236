"""``engine.kv_pool_tokens`` / ``--kv-pool-tokens``: a launch's cap on the tokens each KV pool holds
(SGLang ``--max-total-tokens``, TensorRT-LLM ``kv_cache_config.max_tokens``, vLLM
``--num-gpu-blocks-override`` x block size). Each attention replica's pool is the smaller of the cap
and what memory gives (vLLM, which allocates its override as given, refuses a cap above that); every
evaluator (whatif, the closed loop, the queueing curve, the simulator, the disaggregated pools, emit)
sizes it so."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import planner
from planner.catalog.dtypes import DType
from planner.catalog.frameworks import as_run
from planner.catalog.model_catalog import model
from planner.cli import app
from planner.errors import InfeasibleError, InputError
from planner.perf.memory import free_kv_bytes_device, kv_bytes_per_token_device, pool_tokens
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving.batching import Engine
from planner.serving.closed_loop import throughput
from planner.serving.queueing import max_decode_batch
from planner.serving.simulate import cache_pools, simulate
from planner.serving.workload import length_stats_of

runner = CliRunner()
KW = dict(tp=1, pp=1, ep=1, input_len=1000, output_len=1000)
BF16 = DTypes(weight=DType.bf16, kv=DType.bf16)


def test_the_cap_holds_a_pool_to_its_tokens_by_hand():
    """Llama-3.1-8B (128 KiB of BF16 KV per token) on one H100 under vLLM (16-token blocks): a
    50,000-token pool holds floor(50,000 / (2,000 + 7.5)) = 24 sequences of 2,000 tokens (a sequence
    holds on average (16 - 1) / 2 tokens of part-filled last block), whatever memory would give."""
    e = planner.estimate("llama-3.1-8b", "h100-sxm", batch=64, kv_pool_tokens=50_000, **KW)
    assert e.memory.max_batch == 24 and e.memory.kv_pool_tokens == 50_000
    assert not e.fits
    assert "caps each KV pool at 50,000 tokens" in e.infeasible_reason and "memory would hold them" in \
        e.infeasible_reason
    assert e.suggestions == ["--kv-pool-tokens 128000"]       # 64 sequences x 2,000 tokens
    free = planner.estimate("llama-3.1-8b", "h100-sxm", batch=64, **KW)
    assert free.fits and free.memory.max_batch > 24 and free.memory.kv_pool_tokens is None


def test_a_cap_above_what_memory_holds_changes_nothing_where_the_engine_takes_the_smaller():
    """TensorRT-LLM (KvCacheConfig.max_tokens) and SGLang (--max-total-tokens) take the smaller of the
    cap and what memory gives."""
    kw = dict(KW, framework="tensorrt-llm")
    base = planner.estimate("llama-3.1-8b", "h100-sxm", batch=8, **kw)
    high = planner.estimate("llama-3.1-8b", "h100-sxm", batch=8, kv_pool_tokens=10**9, **kw)
    assert high.fits
    assert (high.memory.max_batch, high.tpot_s, high.ttft_s) == (base.memory.max_batch, base.tpot_s, base.ttft_s)
    loose = throughput("llama-3.1-8b", "h100-sxm", engine=Engine(kv_pool_tokens=10**9), **kw)
    assert loose.output_tokens_per_s == pytest.approx(throughput("llama-3.1-8b", "h100-sxm", **kw)
                                                      .output_tokens_per_s, rel=1e-12)


def test_vllm_allocates_its_block_override_as_given():
    """vLLM replaces the block count it profiles with --num-gpu-blocks-override, so a cap above what
    memory holds does not start (MemoryPolicy.pool_tokens_exact): at the pool memory gives it runs,
    one token more it is refused with the cap that would serve, by every evaluator."""
    holds = planner.estimate("llama-3.1-8b", "h100-sxm", batch=8, **KW).memory.pool_tokens
    at = planner.estimate("llama-3.1-8b", "h100-sxm", batch=8, kv_pool_tokens=holds, **KW)
    over = planner.estimate("llama-3.1-8b", "h100-sxm", batch=8, kv_pool_tokens=holds + 1, **KW)
    assert at.fits and not over.fits
    assert "allocates the KV pool the launch caps as given" in over.infeasible_reason
    assert over.suggestions == [f"--kv-pool-tokens {holds}"]
    assert throughput("llama-3.1-8b", "h100-sxm", engine=Engine(kv_pool_tokens=holds), **KW).output_tokens_per_s > 0
    with pytest.raises(InfeasibleError, match=f"runs out of memory at start-up; would fit: --kv-pool-tokens {holds}"):
        throughput("llama-3.1-8b", "h100-sxm", engine=Engine(kv_pool_tokens=holds + 1), **KW)
    m, lay = model("llama-3.1-8b"), Layout.of(1, 1, 1)
    hw = as_run("h100-sxm", "vllm", kv_pool_tokens=holds + 1)
    with pytest.raises(InfeasibleError, match="runs out of memory at start-up"):
        cache_pools(m, hw, lay, BF16, Engine())
    n, limit = max_decode_batch(m, hw, lay, BF16, Engine(), length_stats_of(np.array([1000.0]), np.array([1000.0]),
                                                                              np.array([1.0])))
    assert float(np.ravel(n)[0]) == 0 and np.ravel(limit)[0] == "kv_pool_tokens"


def test_each_attention_replica_has_its_own_pool():
    """Mixtral on 4 H100s at ep 4, tp 1: 4 attention replicas, 4 pools. The simulator's instance-wide
    KV bytes are 4 x the cap x the bytes a token takes on a device, and the queueing curve's KV limit
    is 4 x the cap over a sequence's held tokens."""
    m, lay = model("mixtral-8x7b"), Layout.of(1, 4, 1)
    dt = DTypes(weight=DType.fp8, kv=DType.fp8)
    hw = as_run("h100-sxm", "vllm", kv_pool_tokens=30_000)
    per_tok = float(np.ravel(kv_bytes_per_token_device(m, lay, dt.kv, hw))[0])
    free, _, _, _ = cache_pools(m, hw, lay, dt, Engine())
    assert free == pytest.approx(4 * 30_000 * per_tok, rel=1e-12)
    assert free < 4 * float(np.ravel(free_kv_bytes_device(m, hw, lay, dt))[0])    # the cap binds
    stats = length_stats_of(np.array([1000.0]), np.array([500.0]), np.array([1.0]))
    n, why = max_decode_batch(m, hw, lay, dt, Engine(), stats)
    held = stats.mean_decode_ctx + 7.5                       # vLLM's 16-token blocks: 7.5 tokens part-filled
    assert float(n) == pytest.approx(4 * 30_000 / held, rel=1e-9) and str(why) == "kv_pool_tokens"


def test_the_simulator_never_holds_more_than_the_cap():
    """A burst of 40 requests of 1,000 + 500 tokens. Under TensorRT-LLM, which reserves a request's
    whole length at admission, a 20,000-token pool admits 13 of them at once (20,000 / 1,500; its
    part-filled last page leaves room for no 14th), so the 14th prompt waits for a request to leave;
    under vLLM, which admits on the tokens held so far, the same pool overfills as the requests grow
    and the engine preempts. Memory's pool (~460k tokens) does neither."""
    m, lay, n = model("llama-3.1-8b"), Layout.of(1, 1, 1), 40
    inp, out, t0 = np.full(n, 1000), np.full(n, 500), np.zeros(n)
    runs = {}
    for fw in ("tensorrt-llm", "vllm"):
        for cap in (None, 20_000):
            hw = as_run("h100-sxm", fw, kv_pool_tokens=cap)
            runs[fw, cap] = simulate(m, hw, lay, BF16, Engine(framework=fw).for_device(hw, 1), t0, inp, out,
                                     warmup_frac=0.0)
    trt = runs["tensorrt-llm", 20_000]
    assert np.sort(trt.ttft_s)[12] < np.min(trt.e2e_s) <= np.sort(trt.ttft_s)[13]
    assert np.sort(runs["tensorrt-llm", None].ttft_s)[-1] < np.min(runs["tensorrt-llm", None].e2e_s)
    assert runs["vllm", 20_000].preemptions > 0 == runs["vllm", None].preemptions
    assert trt.makespan_s > 2 * runs["tensorrt-llm", None].makespan_s


@settings(max_examples=15, deadline=None)
@given(st.integers(min_value=2_000, max_value=400_000), st.integers(min_value=2_000, max_value=400_000))
@example(161_389, 182_833)
def test_a_larger_pool_never_serves_less(a, b):
    lo, hi = sorted((a, b))
    t = [throughput("llama-3.1-8b", "h100-sxm", engine=Engine(kv_pool_tokens=c), concurrency=64, **KW)
         .output_tokens_per_s for c in (lo, hi)]
    # 2e-3: the closed loop interpolates a grid of batches that spans up to the pool's limit, so a
    # larger pool moves the grid points and the answer by up to ~1e-3 where neither cap binds (the
    # example above, found by hypothesis: neither pool binds 64 x 2,000 tokens, yet the larger one's
    # grid answers 0.100% less); a cap that binds moves it by percents (the CLI test below: over half)
    assert t[1] >= t[0] * (1 - 2e-3)


def test_a_request_longer_than_the_pool_is_an_answer_naming_the_cap():
    m, lay = model("llama-3.1-8b"), Layout.of(1, 1, 1)
    hw = as_run("h100-sxm", "vllm", kv_pool_tokens=1_500)
    with pytest.raises(InfeasibleError, match=r"caps at 1,500 tokens \(kv_pool_tokens\).*raise the cap"):
        simulate(m, hw, lay, BF16, Engine(), np.zeros(2), np.full(2, 1000), np.full(2, 1000))
    with pytest.raises(InfeasibleError, match=r"caps each KV pool at 1,500 tokens.*--kv-pool-tokens 2000"):
        throughput("llama-3.1-8b", hw, **KW)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_a_cap_that_is_not_a_positive_integer_is_refused(bad):
    with pytest.raises(InputError, match="kv_pool_tokens must be a positive integer"):
        as_run("h100-sxm", "vllm", kv_pool_tokens=bad)


def test_the_cli_takes_and_checks_it():
    ok = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "1000", "-o", "1000",
                             "-b", "8", "--kv-pool-tokens", "50000", "--json"])
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["memory"]["kv_pool_tokens"] == 50_000
    bad = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "1000", "-o", "1000",
                              "--kv-pool-tokens", "0"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    tight = runner.invoke(app, ["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "1000", "-o", "1000",
                                "-c", "64", "--kv-pool-tokens", "20000", "--json"])
    loose = runner.invoke(app, ["throughput", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-i", "1000", "-o", "1000",
                                "-c", "64", "--json"])
    assert tight.exit_code == loose.exit_code == 0
    assert json.loads(tight.stdout)["output_tokens_per_s"] < 0.5 * json.loads(loose.stdout)["output_tokens_per_s"]


SCENARIO = """\
name: pool-cap
model: llama-3.1-8b
workload:
  rate: 4
  input: {{dist: fixed, value: 2000}}
  output: {{dist: fixed, value: 500}}
slo:
  ttft_s: {{p90: 3}}
  tpot_s: {{p90: 0.1}}
{engine}search: {{hardware: [h100-sxm], tp: [1], weight_dtype: [bf16]}}
"""


def _plan(tmp_path, engine: str, *extra: str):
    from tests.test_engine_memory_fraction import plan_scenario

    return plan_scenario(tmp_path, SCENARIO, engine, *extra)


def test_a_scenario_cap_sizes_the_plan_and_is_said(tmp_path):
    free = _plan(tmp_path, "")
    capped = _plan(tmp_path, "engine: {kv_pool_tokens: 25000}\n")
    assert free.exit_code == capped.exit_code == 0, capped.stderr
    a, b = json.loads(free.stdout)["best"], json.loads(capped.stdout)["best"]
    # vLLM holds a decoding request's tokens so far, 2,000 + ~250 on average: 11 of them fill the pool,
    # so the capped plan runs smaller batches on more instances
    assert b["decode_batch"] <= 25_000 / 2_250 < a["decode_batch"]
    assert b["binding"] == "kv_pool_tokens" or b["binding"].startswith(("ttft", "tpot"))
    assert b["instances"] >= a["instances"]
    assert "KV pool capped at 25,000 tokens" in capped.stdout
    bad = _plan(tmp_path, "engine: {kv_pool_tokens: 0}\n")
    assert bad.exit_code != 0 and "kv_pool_tokens" in bad.output and "Traceback" not in bad.output
    small = _plan(tmp_path, "engine: {kv_pool_tokens: 1000}\n")      # a request holds 2,500 tokens
    assert small.exit_code != 0 and "capped at 1,000 tokens (engine.kv_pool_tokens)" in small.output


def test_a_scenario_cap_above_memory_does_not_start_under_vllm(tmp_path):
    """vLLM allocates its block override as given: a cap above what memory holds on every candidate
    is refused as a launch that would not start; SGLang holds the same cap to memory and plans."""
    over = _plan(tmp_path, "engine: {kv_pool_tokens: 5000000}\n")
    assert over.exit_code != 0 and "Traceback" not in over.output
    assert "allocates the KV pool the launch caps as given" in over.output and "none would start" in over.output
    held = _plan(tmp_path, "engine: {kv_pool_tokens: 5000000, framework: sglang}\n")
    assert held.exit_code == 0, held.output


def test_emit_writes_the_cap_where_the_engine_has_a_flag(tmp_path):
    from tests.test_emit import SGLANG, VLLM, _command, _flags

    out, p = tmp_path, tmp_path / "s.yaml"
    p.write_text(SCENARIO.format(engine="engine: {kv_pool_tokens: 25000}\n"))
    for engine, flags in (("sglang", SGLANG), ("vllm", VLLM)):
        r = runner.invoke(app, ["plan", str(p), "--json", "--emit", engine, str(out / engine)])
        assert r.exit_code == 0, r.stderr
        f = _flags(_command(out / engine / f"{engine}.sh"))
        assert set(f) <= flags
        if engine == "sglang":
            assert f["--max-total-tokens"] == "25000"
        else:                          # vLLM replaces its block count: ceil(25,000 / 16) blocks of 16
            assert (f["--num-gpu-blocks-override"], f["--block-size"]) == ("1563", "16")
        assert "KV pool: 25,000 tokens per attention replica" in (out / engine / f"{engine}.sh").read_text()
    r = runner.invoke(app, ["plan", str(p), "--json", "--emit", "trtllm", str(out / "trt")])
    assert r.exit_code != 0 and "kv_cache_config.max_tokens" in r.output and "Traceback" not in r.output


def test_the_validation_run_that_sets_it_replays_with_it():
    """SGLang's Qwen3-Next c80 run launches with --max-total-tokens 450560: its replay's pool is capped."""
    from planner import validate as V

    p = next(q for q in V.load_points().points if q.id == "sglasc-qwen3next-a3-2card-w8a8-3584-1536-c80-tpot")
    assert p.kv_pool_tokens == 450_560
    _, hw, _ = V._replay_inputs(V._as_run(None, p).model_dump_json(), p)
    assert pool_tokens(hw) == 450_560


def test_whatif_says_where_vllm_would_not_start_at_its_default_length():
    """vLLM checks at start-up that one replica's pool holds a request of --max-model-len tokens, by
    default the model's context (131,072 for Llama-3.1-70B): at TP2 on two A100-80Gs the pool holds
    about 35,000 (the memory left beside the weights over 320 KiB a token per GPU), so the estimate
    says to launch with a shorter maximum; SGLang and TensorRT-LLM run no such check."""
    kw = dict(tp=2, batch=8, input_len=1000, output_len=1000)
    e = planner.estimate("llama-3.1-70b", "a100-80g", **kw)
    m, lay = model("llama-3.1-70b"), Layout.of(2, 1, 1)
    hw = as_run("a100-80g", "vllm")
    by_hand = float(np.ravel(free_kv_bytes_device(m, hw, lay, BF16))[0]) / float(
        np.ravel(kv_bytes_per_token_device(m, lay, DType.bf16, hw))[0])
    assert e.memory.pool_tokens == int(by_hand) and 30_000 < by_hand < 40_000
    assert len(e.notes) == 1 and f"--max-model-len {e.memory.pool_tokens} or less" in e.notes[0]
    assert "131,072" in e.notes[0]
    for fw in ("sglang", "tensorrt-llm"):
        assert planner.estimate("llama-3.1-70b", "a100-80g", framework=fw, **kw).notes == []
    assert planner.estimate("llama-3.1-8b", "h100-sxm", **KW, batch=1).notes == []   # its pool holds 131,072


def test_emit_counts_the_pool_whatif_counts_for_a_hybrid_model(tmp_path):
    """SGLang gives Qwen3-Next's recurrent states a pool of their own: the launch file's 'what memory
    holds' is what they leave, the same tokens whatif gives (not the whole cache memory's, ~1.9x)."""
    p = tmp_path / "h.yaml"
    p.write_text(SCENARIO.replace("llama-3.1-8b", "qwen3-next-80b-a3b").replace("tp: [1]", "tp: [4]").format(
        engine="engine: {framework: sglang, kv_pool_tokens: 1000000000}\n"))
    r = runner.invoke(app, ["plan", str(p), "--json", "--emit", "sglang", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    e = planner.estimate("qwen3-next-80b-a3b", "h100-sxm", tp=4, input_len=2000, output_len=500, framework="sglang")
    assert f"what memory holds ({e.memory.pool_tokens:,})" in (tmp_path / "sglang.sh").read_text()
