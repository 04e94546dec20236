"""FLOPs, bytes and times derived by hand from the architecture, compared with the engine."""

import numpy as np
import pytest

import planner
from planner.catalog.dtypes import DType
from planner.perf.memory import weight_bytes_device
from planner.perf.ops import DTypes, Op, OpKind, Step, layer_ops
from planner.perf.parallel import Layout
from planner.perf.roofline import op_time

BF16 = DTypes()


def _per_layer_flops(ops, names):
    return sum(float(np.asarray(o.flops)) for o in ops if o.name in names)


def test_dense_layer_prefill_flops_by_hand():
    m = planner.model("llama-3.1-70b")
    s = 1024                       # one prompt of 1024 tokens, nothing cached
    ops = layer_ops(m, Layout.of(1, 1, 1), Step.of(1, s, 0), BF16)
    h, nh, nkv, d, inter = 8192, 64, 8, 128, 28672
    gemm = 2 * s * (h * (nh + 2 * nkv) * d + nh * d * h + 3 * h * inter)
    attention = 4 * nh * d * s * (s + 1) / 2       # QK^T and PV over causal pairs
    got = _per_layer_flops(ops, {"qkv_proj", "attention", "o_proj", "ffn_up", "ffn_down"})
    assert got == pytest.approx(gemm + attention, rel=1e-12)


def test_dense_layer_decode_flops_and_kv_bytes_by_hand():
    m = planner.model("llama-3.1-70b")
    b, ctx = 8, 4000
    ops = layer_ops(m, Layout.of(1, 1, 1), Step.of(b, 1, ctx), BF16)
    att = next(o for o in ops if o.name == "attention")
    assert float(att.flops) == pytest.approx(4 * 64 * 128 * b * (ctx + 1))
    # reads ctx+1 cached tokens and writes 1, each 2 x 8 x 128 x 2 B per layer
    assert float(att.kv_bytes) == pytest.approx(b * (ctx + 2) * 2 * 8 * 128 * 2)


def test_moe_layer_flops_by_hand():
    m = planner.model("mixtral-8x7b")
    T = 512
    ops = layer_ops(m, Layout.of(1, 1, 1), Step.of(1, T, 0), BF16)
    h, inter, E, k = 4096, 14336, 8, 2
    assert _per_layer_flops(ops, {"experts"}) == pytest.approx(2 * T * k * 3 * h * inter)
    assert _per_layer_flops(ops, {"router"}) == pytest.approx(2 * T * h * E)


def test_moe_touched_expert_weights_at_small_batch():
    # One decode token of DeepSeek-V3 hits 8 of 256 experts: 8 x 3 x 7168 x 2048 B in fp8.
    m = planner.model("deepseek-v3")
    ops = layer_ops(m, Layout.of(1, 1, 1), Step.of(1, 1, 100), DTypes(weight=DType.fp8))
    experts = next(o for o in ops if o.name == "experts")
    assert float(experts.weight_bytes) == pytest.approx(8 * 3 * 7168 * 2048)


def test_weight_bytes_per_device_under_tp_by_hand():
    m = planner.model("llama-3.1-70b")
    lay = Layout.of(8, 1, 1)
    ops = layer_ops(m, lay, Step.of(1, 1, 0), BF16)
    h, nh, nkv, d, inter, V, L = 8192, 64, 8, 128, 28672, 128256, 80
    gemm_per_layer = (h * (nh + 2 * nkv) * d + nh * d * h + 3 * h * inter) / 8
    norms_per_layer = 2 * h                                   # replicated on every rank
    expected = 2 * (L * (gemm_per_layer + norms_per_layer) + 2 * V * h / 8 + h)
    assert float(weight_bytes_device(ops, lay, BF16)) == pytest.approx(expected)


def test_expert_weights_per_device_under_ep_by_hand():
    m = planner.model("deepseek-v3")
    lay = Layout.of(1, 32, 1)
    ops = layer_ops(m, lay, Step.of(1, 1, 0), DTypes(weight=DType.fp8))
    experts = next(o for o in ops if o.name == "experts")
    assert float(experts.params) == pytest.approx(256 / 32 * 3 * 7168 * 2048)



def test_expert_activation_bytes_under_expert_tp_by_hand():
    # Mixtral 8x7B, 512 prompt tokens, TP4 experts (ep 1): every rank holds all 8 experts at a
    # quarter of the intermediate width, so it takes all T k = 1024 routed copies - reads each
    # hidden vector and writes a partial hidden-size output (2 h), and writes/reads its 3 I / 4
    # intermediate slice - and permutes all of them (read + write, into and out of expert order).
    # FLOPs are the layer's over 4. Under EP4 (tp 4, ep 4) a rank takes only its T k / 4 copies.
    m = planner.model("mixtral-8x7b")
    T, h, inter, k, ab = 512, 4096, 14336, 2, 2
    tp = next(o for o in layer_ops(m, Layout.of(4, 1, 1), Step.of(1, T, 0), BF16) if o.name == "experts")
    assert float(tp.act_bytes) == pytest.approx(T * k * (2 * h + 3 * inter / 4) * ab)
    assert float(tp.flops) == pytest.approx(2 * T * k * 3 * h * inter / 4)
    ops = layer_ops(m, Layout.of(4, 4, 1), Step.of(1, T, 0), BF16)
    ep = next(o for o in ops if o.name == "experts")
    assert float(ep.act_bytes) == pytest.approx(T * k / 4 * (2 * h + 3 * inter) * ab)
    permute = next(o for o in layer_ops(m, Layout.of(4, 1, 1), Step.of(1, T, 0), BF16) if o.name == "moe_permute")
    assert float(permute.act_bytes) == pytest.approx(T * k * 4 * h * ab)

def test_roofline_time_of_one_gemm():
    hw = planner.hardware("h100-sxm")
    M, K, N = 4096, 8192, 8192
    op = Op("g", OpKind.gemm, 1, flops=2 * M * K * N, weight_bytes=K * N * 2, act_bytes=M * (K + N) * 2)
    t = op_time(hw, op, BF16)
    compute = 2 * M * K * N / (989.4e12 * 0.78)          # dense BF16 peak x GEMM plateau efficiency
    memory = (K * N + M * (K + N)) * 2 / (3.35e12 * 0.85)
    kernel = 5.75e-6                                      # fixed per-kernel time
    # a GEMM takes the 2-norm of its compute and memory times (roofline.ridge_overlap): here
    # memory is 0.13 of compute, which adds 0.9% (the cube-norm added 0.07%)
    assert float(t.time_s) == pytest.approx(kernel + (compute**2 + memory**2) ** 0.5) and compute > memory
    assert float(t.time_s) == pytest.approx((kernel + compute) * 1.0086, rel=0.0005)
    assert str(t.bound) == "compute"
    gemv = Op("g", OpKind.gemm, 1, flops=2 * K * N, weight_bytes=K * N * 2, act_bytes=(K + N) * 2)
    t1 = op_time(hw, gemv, BF16)
    # batch 1: the compute time is 1/295 of the streaming time and adds 6 ppm to it
    assert float(t1.time_s) == pytest.approx(kernel + (K * N + K + N) * 2 / (3.35e12 * 0.85), rel=1e-5)
    assert str(t1.bound) == "memory"
    three = Op("g", OpKind.gemm, 3, flops=2 * K * N, weight_bytes=K * N * 2, act_bytes=(K + N) * 2)
    assert float(op_time(hw, three, BF16).time_s) == pytest.approx(3 * float(t1.time_s))   # per layer


def test_weight_only_moe_experts_run_at_the_marlin_plateau():
    # INT4 experts with BF16 activations (W4A16) dequantize in the kernel's main loop: on an H100 a
    # compute-bound grouped GEMM reaches 0.30 of the BF16 peak (vLLM's Marlin MoE, 293 TFLOP/s),
    # not the BF16 grouped rate (0.78 x 0.93); FP8 experts (a matrix format), BF16 experts and a
    # dense INT4 GEMM (Machete's BF16 parity on Hopper) keep theirs; an H20 reaches 0.50
    hw = planner.hardware("h100-sxm")
    M, K, N = 8192, 7168, 4096
    flops = 2.0 * M * K * N
    experts = Op("experts", OpKind.gemm, 1, flops=flops, weight_bytes=K * N * 0.5, act_bytes=M * (K + N) * 2,
                 grouped=True)
    int4 = DTypes(weight=DType.int4)
    assert float(op_time(hw, experts, int4).compute_s) == pytest.approx(flops / (989.4e12 * 0.30))
    assert float(op_time(hw, experts, BF16).compute_s) == pytest.approx(flops / (989.4e12 * 0.78 * 0.93))
    fp8 = op_time(hw, experts, DTypes(weight=DType.fp8)).compute_s
    assert float(fp8) == pytest.approx(flops / (1978.9e12 * hw.efficiency.gemm_plateau(DType.fp8) * 0.93))
    dense = Op("ffn_up", OpKind.gemm, 1, flops=flops, weight_bytes=K * N * 0.5, act_bytes=M * (K + N) * 2)
    assert float(op_time(hw, dense, int4).compute_s) == pytest.approx(flops / (989.4e12 * 0.78))
    assert float(op_time(planner.hardware("h20"), experts, int4).compute_s) == pytest.approx(flops / (148e12 * 0.50))
    # an A100 holds dense W4A16 GEMMs to Marlin's flat 141 of 312 TFLOP/s (0.45), and its experts
    # (no grouped measurement) to the same; its INT8 weights keep the INT8 matrix rate
    a100 = planner.hardware("a100-80g")
    assert float(op_time(a100, dense, int4).compute_s) == pytest.approx(flops / (312e12 * 0.45))
    assert float(op_time(a100, experts, int4).compute_s) == pytest.approx(flops / (312e12 * 0.45))
    assert float(op_time(a100, dense, DTypes(weight=DType.int8)).compute_s) == pytest.approx(
        flops / (624e12 * a100.efficiency.gemm_plateau(DType.int8)))


def test_tp_all_reduce_time_by_hand():
    hw = planner.hardware("h100-sxm")
    m = planner.model("llama-3.1-70b")
    ops = layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1000, 0), BF16)
    ar = next(o for o in ops if o.name == "ffn_all_reduce")
    payload = 1000 * 8192 * 2
    # alpha-beta alone (a profile without a measured sweep): busbw convention + one latency
    bare = hw.model_copy(update={"scale_up": hw.scale_up.model_copy(update={"all_reduce_sweep": None})})
    expected = 2 * 7 / 8 * payload / (450e9 * 1.0) + 10e-6
    assert float(op_time(bare, ar, BF16).comm_s) == pytest.approx(expected)
    # with the bundled 8x H100 NCCL sweep: 16,384,000 B lies between 8 MiB (172.13 GB/s) and
    # 16 MiB (234.45 GB/s), log-interpolated: 232.3 GB/s busbw -> 123 us, above the alpha-beta
    # 73.7 us and below a one-shot kernel's 7 x 16.4 MB / 450 GB/s + 10 us = 265 us
    frac = np.log(payload / 8388608) / np.log(2)
    busbw = (172.13 + frac * (234.45 - 172.13)) * 1e9
    assert float(op_time(hw, ar, BF16).comm_s) == pytest.approx(2 * 7 / 8 * payload / busbw)
    assert float(op_time(hw, ar, BF16).comm_s) == pytest.approx(123.4e-6, rel=2e-3)


def test_pcie_all_reduce_spanning_both_sockets_by_hand():
    """8 x L40S is two 4-GPU islands behind their CPUs' root complexes: a TP4 all-reduce stays in
    one island at the intra-island ring rate (25.46 of 32 GB/s, FlashInfer PR #4870), a TP8 one
    crosses the sockets at the flat 8-rank ring rate (20.75 of 32 GB/s). 16 MiB, alpha-beta."""
    from planner.perf.comm import collective_time

    hw, payload = planner.hardware("l40s"), 16 * 2**20
    assert float(collective_time(hw, "all_reduce", payload, 4)) == pytest.approx(
        2 * 3 / 4 * payload / (32e9 * 0.80) + 25e-6)
    assert float(collective_time(hw, "all_reduce", payload, 8)) == pytest.approx(
        2 * 7 / 8 * payload / (32e9 * 0.65) + 25e-6)
    # a profile without islands (the H800's NVLink) keeps one fraction for every group
    assert planner.hardware("h800").scale_up.island is None


def test_measured_all_reduce_curve_bounds():
    """min(one-shot, max(alpha-beta, measured)): a 32 KiB all-reduce of 8 GPUs takes the one-shot
    kernel (10 us + 7 x 32 KiB / 450 GB/s, where NCCL measured 33.5 us); the time grows with the
    message, is never below the alpha-beta bound, and ring engines (vllm-2023) keep their form."""
    from planner.catalog.frameworks import framework
    from planner.perf.comm import collective_time

    hw = planner.hardware("h100-sxm")
    assert float(collective_time(hw, "all_reduce", 32768, 8)) == pytest.approx(10e-6 + 7 * 32768 / 450e9)
    sizes = np.geomspace(1e3, 8e9, 200)
    t = collective_time(hw, "all_reduce", sizes, 8)
    assert np.all(np.diff(t) > 0)
    assert np.all(t >= 2 * 7 / 8 * sizes / 450e9 + 10e-6 - 1e-15)
    ring = framework("vllm-2023").apply(hw)
    hop = ring.scale_up.ring_hop_latency.value
    link = ring.scale_up.bandwidth_per_direction.value * ring.efficiency.scale_up.value   # x its link scale
    ring_t = float(collective_time(ring, "all_reduce", 8388608, 8))
    assert ring_t == pytest.approx(2 * 7 / 8 * 8388608 / link + 14 * hop)
    # more link bandwidth is never slower
    fast = hw.model_copy(update={"scale_up": hw.scale_up.model_copy(update={
        "bandwidth_per_direction": hw.scale_up.bandwidth_per_direction.model_copy(update={"value": 900e9})})})
    assert np.all(collective_time(fast, "all_reduce", sizes, 8) <= t + 1e-15)



def test_blackwell_and_cdna4_sweeps_by_hand():
    """GB200 NVL72 and MI355X name their own measured curves. MI355X, 8 GPUs, 8 MiB: the RCCL
    sweep's 206.39 GB/s busbw gives 1.75 x 8 MiB / 206.39 GB/s = 71.1 us, above the alpha-beta
    15 us + 1.75 x 8 MiB / (537.5 GB/s x 0.75) = 51.4 us and below the one-shot 15 us + 7 x 8 MiB /
    403.1 GB/s = 160.7 us. GB200, 4 GPUs (Azure's 4-GPU sweep): at 64 MiB 1.5 x 64 MiB / 550.73 GB/s
    = 182.8 us (alpha-beta 121.8 us, one-shot 233.7 us); at 8 MiB the one-shot kernel, 10 us + 3 x
    8 MiB / 900 GB/s = 38.0 us, beats NCCL's measured 49.6 us. B200 has no public sweep and stays
    on alpha-beta."""
    from planner.perf.comm import collective_time

    mi = planner.hardware("mi355x")
    assert mi.scale_up.all_reduce_sweep.path.name == "mi355x-allreduce8-nccl.csv"
    t = float(collective_time(mi, "all_reduce", 8388608, 8))
    assert t == pytest.approx(1.75 * 8388608 / 206.39e9)
    assert 15e-6 + 1.75 * 8388608 / (537.5e9 * 0.75) < t < 15e-6 + 7 * 8388608 / (537.5e9 * 0.75)
    gb = planner.hardware("gb200-nvl72")
    assert gb.scale_up.all_reduce_sweep.path.name == "gb200-nvl72-allreduce4-nccl.csv"
    assert float(collective_time(gb, "all_reduce", 67108864, 4)) == pytest.approx(1.5 * 67108864 / 550.73e9)
    assert float(collective_time(gb, "all_reduce", 8388608, 4)) == pytest.approx(10e-6 + 3 * 8388608 / 900e9)
    b200 = planner.hardware("b200")
    assert b200.scale_up.all_reduce_sweep is None
    assert float(collective_time(b200, "all_reduce", 8388608, 8)) == pytest.approx(10e-6 + 1.75 * 8388608 / 900e9)

def test_vectorized_over_candidates():
    m = planner.model("llama-3.1-70b")
    tp = np.array([1, 2, 4, 8])
    ops = layer_ops(m, Layout.of(tp, 1, 1), Step.of(np.array([1, 1, 1, 1]), 1, 100), BF16)
    qkv = next(o for o in ops if o.name == "qkv_proj")
    assert np.allclose(np.asarray(qkv.flops) * tp, float(np.asarray(qkv.flops)[0]))


def test_ring_all_reduce_latency_grows_with_the_group():
    # An engine that all-reduces with NCCL rings pays 2 (n - 1) hop latencies per all-reduce; a
    # one-shot kernel (the profile default) pays the link latency once, whatever the group.
    from planner.catalog.frameworks import framework
    from planner.perf.comm import collective_time

    hw = planner.hardware("h100-sxm")
    ring = framework("vllm-2023").apply(hw)
    hop = ring.scale_up.ring_hop_latency.value
    for n in (2, 4, 8):
        assert float(collective_time(hw, "all_reduce", 0.0, n)) == pytest.approx(10e-6)
        assert float(collective_time(ring, "all_reduce", 0.0, n)) == pytest.approx(2 * (n - 1) * hop)
    assert float(collective_time(ring, "all_to_all", 0.0, 8)) == pytest.approx(10e-6)   # rings only for all-reduce


def test_explain_names_the_all_reduce_form_it_used():
    # 8 x H100: a 32 KiB all-reduce takes the one-shot kernel, 6.5 MB the measured NCCL curve (its
    # source is the sweep's), 1 GB the alpha-beta line at the link's bus bandwidth; a ring engine rings
    from planner.catalog.frameworks import framework
    from planner.perf.comm import all_reduce_form
    from planner.perf.ops import Op, OpKind
    from planner.perf.roofline import explain_op

    hw = planner.hardware("h100-sxm")
    assert [all_reduce_form(hw, s, 8) for s in (32768, 6.5e6, 1e9)] == ["one-shot", "measured", "alpha-beta"]
    assert all_reduce_form(framework("vllm-2023").apply(hw), 6.5e6, 8) == "ring"
    assert all_reduce_form(planner.hardware("b200"), 6.5e6, 8) == "alpha-beta"      # no sweep bundled
    op = Op("ffn_all_reduce", OpKind.all_reduce, 1, comm_bytes=6.5e6, group=8)
    _, text, source = explain_op(hw, op_time(hw, op, BF16), BF16)
    assert text.startswith("measured all-reduce curve") and source == "azure_bench"

def test_explain_names_the_weight_format_streaming_it_applied():
    # B200 streams NVFP4 weights of memory-bound GEMMs at its own 0.44 of HBM (memory_by_format):
    # --explain must name that figure and its source, not the 0.85 every other byte gets
    from planner.perf.roofline import explain_op

    hw = planner.hardware("b200")
    fp4 = DTypes(weight=DType.fp4, kv=DType.fp8, act=DType.bf16)
    op = Op("ffn_up", OpKind.gemm, 1, flops=2.0 * 8 * 8192 * 28672, weight_bytes=8192 * 28672 * 0.5,
            act_bytes=8 * (8192 + 28672) * 2.0)
    t = op_time(hw, op, fp4)
    # 117 MB of FP4 weights at 0.44 x 8 TB/s: the streaming time is the operator's memory time
    assert float(t.memory_s) == pytest.approx(8192 * 28672 * 0.5 / (8e12 * 0.44) + 8 * (8192 + 28672) * 2.0
                                              / (8e12 * 0.85))
    _, text, source = explain_op(hw, t, fp4)
    assert "fp4 weights at HBM x 0.44" in text and source.startswith("cutlass_nvfp4_membound")
    _, text, _ = explain_op(hw, op_time(hw, op, BF16), BF16)
    assert text.startswith("HBM x 0.85")


@pytest.mark.parametrize("hw_name, tp, ep", [("ascend-910c", 1, 16), ("h100-sxm", 1, 32), ("h100-sxm", 1, 8)])
def test_explain_never_shows_an_operator_faster_than_its_roofline(hw_name, tp, ep):
    """``whatif --explain``: every operator's time is at least its roofline, the EP all-to-alls
    too when they span scale-up domains (their roofline is the hierarchical transfer at nameplate
    links: tokens cross the network once per remote domain; it was every copy over the network,
    above the time)."""
    from planner.perf.estimate import estimate, operator_breakdown

    e = estimate("deepseek-v3", hw_name, tp=tp, ep=ep, batch=64 * ep, input_len=2048, output_len=256,
                 weight_dtype="int8" if hw_name.startswith("ascend") else "fp8")
    rows = operator_breakdown(e)
    assert any(r["op"] == "ep_dispatch" and r["roofline_s"] > 0 for r in rows)
    for r in rows:
        assert r["time_s"] >= r["roofline_s"] * (1 - 1e-9), r


def test_quantized_checkpoint_reads_its_lm_head_in_bf16():
    # Llama-3.1-8B in FP8 at TP1: every layer GEMM streams 1 byte per weight, the LM head (kept in
    # BF16 by FP8 checkpoints: ModelSpec.unquantized) 2 bytes: 128,256 x 4,096 x 2 B, and runs in BF16.
    m = planner.model("llama-3.1-8b")
    fp8 = DTypes(weight=DType.fp8)
    ops = layer_ops(m, Layout.of(1, 1, 1), Step.of(1, 1, 100), fp8)
    head = next(o for o in ops if o.name == "lm_head")
    qkv = next(o for o in ops if o.name == "qkv_proj")
    assert float(head.weight_bytes) == pytest.approx(128256 * 4096 * 2)
    assert float(qkv.weight_bytes) == pytest.approx(4096 * (32 + 2 * 8) * 128 * 1)
    assert head.weight_dtype is DType.bf16 and qkv.weight_dtype is None
    # stored: the BF16 head adds 128,256 x 4,096 bytes over an all-FP8 count
    h, V, L, inter = 4096, 128256, 32, 14336
    layer = 1 * (h * 48 * 128 + 32 * 128 * h + 3 * h * inter) + 2 * 2 * h
    expected = L * layer + 2 * V * h + 2 * V * h + 2 * h        # layers, BF16 embedding, BF16 head, final norm
    assert float(weight_bytes_device(ops, Layout.of(1, 1, 1), fp8)) == pytest.approx(expected)
    bf16 = layer_ops(m, Layout.of(1, 1, 1), Step.of(1, 1, 100), BF16)
    assert float(next(o for o in bf16 if o.name == "lm_head").weight_bytes) == float(head.weight_bytes)


def test_gpt_oss_keeps_attention_and_head_in_bf16_and_experts_in_fp4():
    # gpt-oss-120b's config lists self_attn and lm_head in modules_to_not_convert: at --weight-dtype
    # fp4 its attention projections stream 2 B per weight, its experts half a byte (the catalog
    # counts no projection biases: BLOOM's flag only).
    m = planner.model("gpt-oss-120b")
    assert set(m.unquantized) == {"attention", "lm_head"}
    ops = layer_ops(m, Layout.of(1, 1, 1), Step.of(1, 1, 100), DTypes(weight=DType.fp4))
    h, heads, kv, d = 2880, 64, 8, 64
    qkv = next(o for o in ops if o.name == "qkv_proj")
    n = (heads + 2 * kv) * d
    assert float(qkv.weight_bytes) == pytest.approx(h * n * 2)
    experts = next(o for o in ops if o.name == "experts")
    assert experts.weight_dtype is None
    assert float(experts.weight_bytes) == pytest.approx(4 * 3 * h * 2880 * DType.fp4.bytes)


def test_verify_step_takes_logits_for_every_verified_token():
    # A decode step verifying 1 + 3 tokens per sequence needs the target's logits at all four
    # positions (2 x 4 b x h x V FLOPs in the head); a prompt step only at each prompt's last token.
    m = planner.model("qwen3-32b")
    h, V, b = 5120, 151936, 16
    verify = layer_ops(m, Layout.of(1, 1, 1), Step.of(b, 4, 1000), BF16)
    prompt = layer_ops(m, Layout.of(1, 1, 1), Step.of(b, 4, 1000, prompt=True), BF16)
    head = {name: next(o for o in ops if o.name == "lm_head") for name, ops in (("v", verify), ("p", prompt))}
    assert float(head["v"].flops) == pytest.approx(2 * 4 * b * h * V)
    assert float(head["p"].flops) == pytest.approx(2 * b * h * V)


def test_draft_extend_pass_runs_the_module_once_more_over_the_verified_tokens():
    # SGLang's EAGLE worker (NEXTN/MTP too) runs the draft module k times over one token per
    # sequence, then once more over the 1 + k verified tokens with logits for the last one only.
    # Qwen3-32B draft block at b = 16, k = 3, one GPU, BF16: the extend pass reads the block's and
    # the head's weights once more; its GEMMs see 4 b tokens, its head b.
    from planner.perf.ops import mtp_draft_ops

    m = planner.model("qwen3-32b")
    h, V, b, k = 5120, 151936, 16, 3
    heads, kv, d, inter = 64, 8, 128, 25600
    lay, step = Layout.of(1, 1, 1), Step.of(b, 1, 1000)
    plain = mtp_draft_ops(m, lay, step, BF16, passes=k)
    both = mtp_draft_ops(m, lay, step, BF16, passes=k, extend=True)
    assert [o.name for o in both[:len(plain)]] == [o.name for o in plain]
    extend = {o.name: o for o in both[len(plain):]}
    assert set(extend) == {f"mtp_extend_{o.name[4:]}" for o in plain}
    assert all(o.count == 1 for o in extend.values())
    mtp = {o.name: o for o in plain}
    assert mtp["mtp_lm_head"].count == k                                              # k passes, b tokens each
    assert float(mtp["mtp_lm_head"].flops) == pytest.approx(2 * b * h * V)
    assert float(extend["mtp_extend_lm_head"].flops) == pytest.approx(2 * b * h * V)  # last verified token only
    assert float(extend["mtp_extend_lm_head"].weight_bytes) == pytest.approx(V * h * 2)
    block = 2 * 4 * b * (2 * h * h + h * (heads + 2 * kv) * d + heads * d * h + 3 * h * inter)
    got = sum(float(extend[f"mtp_extend_{n}"].flops) for n in ("eh_proj", "qkv_proj", "o_proj", "ffn_up", "ffn_down"))
    assert got == pytest.approx(block)
    assert mtp_draft_ops(m, lay, step, BF16, passes=0, extend=True) == []


def test_draft_extend_is_sglangs_and_costs_time():
    from planner.catalog.frameworks import framework
    from planner.catalog.hardware import hardware
    from planner.perf.estimate import estimate

    assert framework("sglang").draft_extend.value and framework("sglang-ascend").draft_extend.value
    assert framework("vllm").draft_extend is None and framework("tensorrt-llm").draft_extend is None
    assert framework("sglang").apply(hardware("h200")).efficiency.draft_extend
    assert not framework("vllm").apply(hardware("h200")).efficiency.draft_extend
    kw = dict(tp=8, batch=32, input_len=2048, output_len=64, weight_dtype="fp8")
    for fw in ("sglang", "vllm"):           # no drafts: the flag changes nothing
        assert estimate("deepseek-v3", "h200", framework=fw, **kw).tpot_s > 0
    spec = dict(mtp_tokens=3, mtp_acceptance=0.7)
    sg = framework("sglang")
    off = sg.model_copy(update={"draft_extend": None})
    hw_on, hw_off = sg.apply(hardware("h200")), off.apply(hardware("h200"))
    on_t = estimate("deepseek-v3", hw_on, **kw, **spec).tpot_s
    off_t = estimate("deepseek-v3", hw_off, **kw, **spec).tpot_s
    assert on_t > off_t
    assert estimate("deepseek-v3", hw_on, **kw).tpot_s == estimate("deepseek-v3", hw_off, **kw).tpot_s


def test_eagle3_draft_ops_by_hand():
    # SpecForge's Qwen3-235B-A22B EAGLE-3 draft (h 4096, 64/4 heads of 128, MLP 24576, draft vocab
    # 32,000, BF16) on one device, 16 sequences, 3 drafts, INT8 target: per pass, q/k/v read 2h
    # (qkv_proj + qkv_embed), o_proj, a dense SwiGLU MLP and a 32,000-row head, all in BF16 whatever
    # the target's format; fc (3h -> h) once per step.
    from planner.catalog.draft import draft
    from planner.perf.ops import mtp_draft_ops

    m, d = planner.model("qwen3-235b-a22b"), draft("qwen3-235b-a22b-eagle3")
    h, qkv, inter, V, b = 4096, (64 + 2 * 4) * 128, 24576, 32000, 16
    ops = {o.name: o for o in mtp_draft_ops(m, Layout.of(1, 1, 1), Step.of(b, 1, 2000),
                                            DTypes(weight=DType.int8), passes=3, draft=d)}
    params = {"mtp_qkv_embed": h * qkv, "mtp_qkv_proj": h * qkv, "mtp_o_proj": 64 * 128 * h,
              "mtp_ffn_up": 2 * inter * h, "mtp_ffn_down": inter * h, "mtp_lm_head": h * V, "mtp_fc": 3 * h * h}
    for name, n in params.items():
        assert float(ops[name].weight_bytes) == pytest.approx(2 * n), name
        assert float(ops[name].flops) == pytest.approx(2 * b * n), name
        assert ops[name].weight_dtype is DType.bf16
        assert ops[name].count == (1 if name == "mtp_fc" else 3)
    assert "mtp_eh_proj" not in ops and "mtp_experts" not in ops      # a dense layer, not the target's MoE block
    # the extend pass adds one more pass over 4 tokens per sequence; fc then runs on those tokens
    ext = {o.name: o for o in mtp_draft_ops(m, Layout.of(1, 1, 1), Step.of(b, 1, 2000), DTypes(weight=DType.int8),
                                            passes=3, extend=True, draft=d)}
    assert float(ext["mtp_fc"].flops) == pytest.approx(2 * 4 * b * 3 * h * h)
    assert float(ext["mtp_extend_ffn_up"].flops) == pytest.approx(2 * 4 * b * 2 * inter * h)
    assert float(ext["mtp_extend_lm_head"].flops) == pytest.approx(2 * b * h * V)


def test_eagle3_draft_is_cheaper_than_a_target_layer_and_head():
    # Llama-3.1-70B at batch 8 (memory-bound decode): its EAGLE-3 draft (~1.4 B parameters with the
    # 32,000-row head) streams fewer bytes per pass than a 70B layer plus the 128,256-row head
    # (~1.9 B), so the same drafts and acceptance give a shorter TPOT.
    kw = dict(tp=4, batch=8, input_len=2000, output_len=200, mtp_tokens=3, mtp_acceptance=0.7)
    mtp = planner.estimate("llama-3.1-70b", "h100-sxm", **kw).tpot_s
    eagle = planner.estimate("llama-3.1-70b", "h100-sxm", draft="llama-3.1-70b-eagle3", **kw).tpot_s
    none = planner.estimate("llama-3.1-70b", "h100-sxm", tp=4, batch=8, input_len=2000, output_len=200).tpot_s
    assert eagle < mtp < none


def test_a2a_backend_scatters_tp_tokens_to_the_experts():
    # SGLang with --moe-a2a-backend at tp 4 = ep 4 (no attention DP): each rank takes 1/4 of the
    # step's tokens, dispatches them (k copies of h values each) and combines them back; the
    # all-gather before the next attention replaces the MoE all-reduce. Qwen3-235B, 64 sequences:
    # 16 tokens per rank x 8 experts x 4096 x 2 bytes.
    m = planner.model("qwen3-235b-a22b")
    step, lay = Step.of(64, 1, 1000), Layout.of(4, 4, 1)
    plain = {o.name: o for o in layer_ops(m, lay, step, BF16)}
    a2a = {o.name: o for o in layer_ops(m, lay, step, BF16, a2a=True)}
    assert "ep_dispatch" not in plain and int(plain["ffn_all_reduce"].group) == 4
    assert float(a2a["ep_dispatch"].comm_bytes) == pytest.approx(16 * 8 * 4096 * 2)
    assert float(a2a["ep_combine"].comm_bytes) == float(a2a["ep_dispatch"].comm_bytes)
    assert int(a2a["ffn_all_reduce"].group) == 1 and int(a2a["attn_all_reduce"].group) == 4
    assert float(a2a["experts"].flops) == pytest.approx(float(plain["experts"].flops))   # the same expert work
    # under attention data parallelism (ep > tp) the tokens go by all-to-all either way
    dp = Layout.of(1, 4, 1)
    assert [(o.name, float(np.asarray(o.comm_bytes).sum())) for o in layer_ops(m, dp, step, BF16)] == \
           [(o.name, float(np.asarray(o.comm_bytes).sum())) for o in layer_ops(m, dp, step, BF16, a2a=True)]
    # a dense model has nothing to dispatch
    dense = planner.model("qwen3-32b")
    names = [[o.name for o in layer_ops(dense, lay, step, BF16, a2a=a)] for a in (False, True)]
    assert names[0] == names[1]


def test_shared_expert_on_its_own_ranks_is_one_more_dispatch_slot():
    # CloudMatrix-Infer's decode EP320 gives DeepSeek's shared expert 32 dies of its own: a decode
    # step under attention DP (tp 1, ep 8) sends each token to 8 + 1 experts (4 tokens per rank x
    # 9 x 7168 x 2 bytes) and no rank runs the shared expert on its own tokens; the routed expert
    # work is unchanged, and a prompt step keeps the shared expert on every rank
    m = planner.model("deepseek-v3")
    lay, step = Layout.of(1, 8, 1), Step.of(32, 1, 4096)
    local = {o.name: o for o in layer_ops(m, lay, step, BF16)}
    aside = {o.name: o for o in layer_ops(m, lay, step, BF16, shared_ranks=True)}
    assert "shared_expert_up" in local and "shared_expert_up" not in aside and "shared_expert_down" not in aside
    assert float(local["ep_dispatch"].comm_bytes) == pytest.approx(4 * 8 * 7168 * 2)
    assert float(aside["ep_dispatch"].comm_bytes) == pytest.approx(4 * 9 * 7168 * 2)
    assert float(aside["ep_combine"].comm_bytes) == float(aside["ep_dispatch"].comm_bytes)
    assert float(aside["experts"].flops) == pytest.approx(float(local["experts"].flops))
    prompt = Step.of(4, 1024, 0, prompt=True)
    assert [o.name for o in layer_ops(m, lay, prompt, BF16, shared_ranks=True)] == \
           [o.name for o in layer_ops(m, lay, prompt, BF16)]
    # without attention DP nothing is dispatched, so the shared expert stays on every rank
    tp = Layout.of(8, 8, 1)
    assert [o.name for o in layer_ops(m, tp, step, BF16, shared_ranks=True)] == \
           [o.name for o in layer_ops(m, tp, step, BF16)]


def test_shared_expert_placement_is_each_candidates_own_in_a_block():
    # a block of layouts with and without the all-to-all (tp 1 ep 8: attention DP, dispatched;
    # tp 8 ep 8: not): each row's shared experts and dispatch slots are what its layout alone
    # gives (the placement was decided for the whole block, so the streaming search's block size
    # changed a CloudMatrix-Infer plan)
    m = planner.model("deepseek-v3")
    step = Step.of(32, 1, 4096)
    block = Layout.of(np.array([[1], [8]]), np.array([[8], [8]]), np.ones((2, 1), int))
    ops = {o.name: o for o in layer_ops(m, block, step, BF16, shared_ranks=True)}
    for row, tp in enumerate((1, 8)):
        alone = {o.name: o for o in layer_ops(m, Layout.of(tp, 8, 1), step, BF16, shared_ranks=True)}
        for name in ("shared_expert_up", "shared_expert_down", "ep_dispatch", "ep_combine"):
            got = ops[name]
            want = alone.get(name)
            for f in ("flops", "weight_bytes", "act_bytes", "comm_bytes"):
                v = float(np.ravel(np.broadcast_to(getattr(got, f), (2, 1)))[row])
                assert v == (float(np.ravel(getattr(want, f))[0]) if want is not None else 0.0), (tp, name, f)


def test_a_mixed_step_keeps_each_groups_shared_expert_placement():
    # continuous batching merges a decode step whose shared experts sit on EP ranks of their own
    # (no shared_expert_* operators, one more dispatch slot) with a prompt chunk that keeps them
    # local: the prompt's shared-expert GEMMs come through alone and the dispatches add (4 decode
    # tokens per rank x 9 slots + a whole 1,024-token prompt on the busiest rank x 8, x 7168 x 2
    # bytes: 4 prompts over 8 attention replicas, one each). The two lists
    # used to be zipped strictly, so any closed-loop run of CloudMatrix-Infer raised ValueError.
    from planner.perf.ops import merge_ops

    m = planner.model("deepseek-v3")
    lay = Layout.of(1, 8, 1)
    dec = layer_ops(m, lay, Step.of(32, 1, 4096), BF16, shared_ranks=True)
    pre = layer_ops(m, lay, Step.of(4, 1024, 0, prompt=True), BF16, shared_ranks=True)
    alone = {o.name: o for o in pre if o.name.startswith("shared_expert")}
    mixed = merge_ops(dec, pre)
    names = [o.name for o in mixed]
    assert names.count("shared_expert_up") == 1 and names.count("ep_dispatch") == 1
    merged = {o.name: o for o in mixed}
    assert float(merged["shared_expert_up"].flops) == float(alone["shared_expert_up"].flops)
    assert float(merged["ep_dispatch"].comm_bytes) == pytest.approx((4 * 9 + 1024 * 8) * 7168 * 2)
    # lists that match pair up one to one, as before: each operator once, attention twice (its
    # decode kernel and, renamed, the prompt's)
    same = layer_ops(m, lay, Step.of(32, 1, 4096), BF16)
    expected = []
    for o in same:
        expected += [o.name, f"{o.name}_prefill"] if o.kind is OpKind.attention and np.any(o.keys) else [o.name]
    assert [o.name for o in merge_ops(same, pre)] == expected    # a prompt step keeps them local either way


def test_cloudmatrix_infer_serves_a_closed_loop():
    # the command that raised: a closed loop (and an open-loop SLO search) of CloudMatrix-Infer
    # on 128 CloudMatrix384 NPUs; the headers count the instance's 128 devices (ep 128, tp 1)
    from typer.testing import CliRunner

    from planner.cli import app

    args = ["throughput", "-m", "deepseek-r1", "-H", "cloudmatrix384", "--ep", "128", "-i", "4096", "-o", "256",
            "--weight-dtype", "int8", "--framework", "cloudmatrix-infer"]
    for extra in (["-c", "64"], ["--tpot-p90", "0.05"]):
        r = CliRunner().invoke(app, args + extra, env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        assert "on 128x cloudmatrix384" in r.output


def test_shared_expert_ranks_are_cloudmatrix_infers():
    # the framework fact reaches the decode step: one memory-bound expert fewer per die shortens
    # CloudMatrix384's small-batch decode step, and leaves its prefill alone
    from planner.catalog.frameworks import framework
    from planner.catalog.hardware import hardware

    fw = framework("cloudmatrix-infer")
    assert fw.shared_expert_ranks.value and framework("sglang").shared_expert_ranks is None
    kw = dict(tp=1, ep=128, batch=1024, input_len=4096, output_len=2, weight_dtype="int8", mtp_tokens=1,
              mtp_acceptance=0.7)
    on = planner.estimate("deepseek-r1", "cloudmatrix384", framework="cloudmatrix-infer", **kw)
    off = planner.estimate("deepseek-r1", fw.model_copy(update={"shared_expert_ranks": None}).apply(
        hardware("cloudmatrix384")), **kw)
    assert on.tpot_s < off.tpot_s and on.ttft_s == pytest.approx(off.ttft_s, rel=1e-12)


def test_moe_a2a_is_the_ascend_sglang_entrys():
    from planner.catalog.frameworks import framework
    from planner.catalog.hardware import hardware

    assert framework("sglang-ascend").moe_a2a.value and framework("sglang").moe_a2a is None
    kw = dict(tp=2, ep=2, batch=80, input_len=3584, output_len=1536, weight_dtype="int8")
    on = planner.estimate("qwen3-next-80b-a3b", "ascend-910c", framework="sglang-ascend", **kw)
    off_fw = framework("sglang-ascend").model_copy(update={"moe_a2a": None})
    off = planner.estimate("qwen3-next-80b-a3b", off_fw.apply(hardware("ascend-910c")), **kw)
    assert on.tpot_s > off.tpot_s        # 48 dispatch + combine pairs cost more than 48 all-reduces


def test_mtp_module_stays_bf16_under_a_foreign_quantization():
    # DeepSeek-V3's checkpoint is FP8 with its MTP module in FP8; quantizers that re-quantize it
    # (ModelOpt FP4, msModelSlim W8A8/W4A8, AutoAWQ) leave the MTP module in BF16. At INT4 the
    # MTP block's expert GEMM streams 2 bytes per weight (per device, tp 8: 256 experts / 8 of
    # them at hit ~1), at FP8 one; the target's own experts stay in the step's format.
    from planner.perf.ops import mtp_draft_ops, mtp_weight_dtype

    m = planner.model("deepseek-v3")
    lay, step = Layout.of(8, 1, 1), Step.of(512, 1, 1000)
    per_device = 256 * 3 * 7168 * 2048 / 8
    for fmt, expect, mtp_bytes in ((DType.int4, DType.bf16, 2), (DType.fp8, None, 1)):
        dt = DTypes(weight=fmt)
        assert mtp_weight_dtype(m, dt) is expect
        ops = {o.name: o for o in mtp_draft_ops(m, lay, step, dt, passes=1)}
        assert ops["mtp_experts"].weight_dtype is expect
        assert float(ops["mtp_experts"].params) == pytest.approx(per_device)
        assert float(ops["mtp_experts"].weight_bytes) == pytest.approx(per_device * mtp_bytes, rel=1e-3)
        target = next(o for o in layer_ops(m, lay, step, dt) if o.name == "experts")
        assert target.weight_dtype is None
    assert mtp_weight_dtype(planner.model("qwen3-32b"), DTypes(weight=DType.bf16)) is None   # nothing to keep
