"""vllm-ascend launched FULL_DECODE_ONLY (the ``vllm-ascend-graph`` entry): the ``vllm-ascend``
entry with one graph per decode step (msModeling's trace: ~1.2 ms of host time per step, not the
default mode's fitted 40 ms), no graphs for prompt steps, and the kernels the engine launches per
layer counted (its profile: 14 per MoE layer where the default entry charges 7). Numbers derived by
hand; the nightly CI rows checked with stated tolerances."""

from __future__ import annotations

import pytest

from planner import validate as V
from planner.catalog.frameworks import framework, load_framework_file
from planner.perf.estimate import estimate

KERNEL_S = 8.3e-6            # the ascend-910b profile's fixed time per kernel


def test_the_graph_entry_is_the_default_entry_but_for_its_step_its_graphs_and_its_kernels():
    base, graph = framework("vllm-ascend"), framework("vllm-ascend-graph")
    own = {"name", "description", "step_overhead", "graph_max_tokens", "op_kernels", "launch_args"}
    for field in type(base).model_fields:
        if field not in own:
            assert getattr(graph, field) == getattr(base, field), field
    assert graph.step_overhead.value == pytest.approx(1.2e-3) and base.step_overhead.value == pytest.approx(40e-3)
    assert graph.graph_max_tokens.value == 0 and base.graph_max_tokens.value == 512
    assert base.op_kernels is None
    assert base.launch_args == {} and graph.launch_args["vllm"].args == [
        "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}', "--async-scheduling"]
    assert graph.op_kernels.counts == {"norms_residual": 2, "qkv_proj": 2, "attention": 2, "router": 2,
                                       "moe_permute": 2, "experts": 3, "ffn_up": 2}


def test_a_decode_step_is_the_default_modes_less_its_host_time_plus_the_counted_kernels():
    """Qwen3-30B-A3B (48 MoE layers) BF16, TP4 on 910B, one sequence: the graph entry's step is
    the default entry's - 40 ms + 1.2 ms + 48 layers x 7 more kernels (a second add-RMSNorm, the
    QKV split/norm/RoPE kernel, the KV-cache write, the top-k, the unpermute, the SwiGLU and the
    second grouped GEMM) x 8.3 us = -36.01 ms."""
    def tpot(fw):
        return estimate("qwen3-30b-a3b", "ascend-910b", tp=4, batch=1, input_len=1024, output_len=256,
                        framework=fw).tpot_s
    assert tpot("vllm-ascend-graph") - tpot("vllm-ascend") == pytest.approx(-38.8e-3 + 48 * 7 * KERNEL_S,
                                                                          abs=1e-9)


def test_a_prompt_step_is_launched_eagerly_at_any_size():
    """FULL_DECODE_ONLY captures no graph for a step with prompt tokens: a 64-token prompt (inside
    the default mode's 512-token graphs) pays the host's launches, 0.66 ms per modelled operator."""
    def ttft(fw):
        return estimate("qwen3-30b-a3b", "ascend-910b", tp=4, batch=1, input_len=64, output_len=2,
                        framework=fw).ttft_s
    ops = 48 * 9 + 2        # 9 operators a layer (its two all-reduces span the 4 devices), embedding, head
    assert ttft("vllm-ascend-graph") == pytest.approx(5e-3 + 1.2e-3 + 20e-6 + ops * 0.66e-3, rel=1e-9)
    assert ttft("vllm-ascend") < ttft("vllm-ascend-graph") - 0.2     # graphs: the device time, 40 ms host


def test_a_framework_file_may_start_from_the_graph_entry(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("base: vllm-ascend-graph\nstep_overhead: {value: 1.6 ms, source: 'my trace'}\n")
    fw = load_framework_file(f)
    assert fw.step_overhead.value == pytest.approx(1.6e-3) and fw.graph_max_tokens.value == 0
    assert fw.op_kernels == framework("vllm-ascend-graph").op_kernels


_ROWS = {p.id: p for p in V.load_points().points if p.source == "vllm_ascend_nightly_a2_rerun"}


@pytest.mark.parametrize("metric", ["throughput", "tpot", "ttft"])
def test_the_nightly_bf16_run_within_ten_percent(metric):
    """Tolerance 10%: the CI job's own spread (781-807 output tokens/s over a month of runs, +-2%)
    plus the small-batch kernel times the entry does not carry (attention ~62 us a call against the
    model's ~38; routing 16 us against 8.3): the model was within 5% on every metric when added."""
    p = _ROWS[f"vllmasc-nightly-qwen3-30b-a3b-a2-tp4-bf16-c45-{metric}"]
    assert V.predict(p) == pytest.approx(p.value, rel=0.10)


def test_the_nightly_w8a8_run_is_optimistic_by_the_dense_quantization_kernels_it_does_not_carry():
    """Known gap, kept visible: the expert chain's W8A8 cost is in the entry (its measured streaming
    and 54 us per layer, the chain's quantization and group-list cumsum: tests/test_moe_chain.py),
    which took this row from +27% to +11%; what the run's profile shows outside the chain, the
    quantized attention projections (QuantBatchMatmulV3 14.9 us against MatMulV2's 9.2), is not
    modelled, so it stays optimistic. This test fails when that changes, either way."""
    p = _ROWS["vllmasc-nightly-qwen3-30b-a3b-a2-tp4-w8a8-c45-throughput"]
    assert 1.03 * p.value < V.predict(p) < 1.20 * p.value
