"""Decode and draft-verify steps run a linear-attention layer's recurrent update, whose measured
kernels stream far below the weights' HBM fraction and cost a fixed time per call
(``Efficiency.linear_decode``, fitted to the bundled batch sweeps)."""

import numpy as np
import pytest

import planner
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import hardware
from planner.microbench import linear_decode_sweeps
from planner.perf.ops import DTypes, Op, OpKind, Step, layer_ops, merge_ops
from planner.perf.parallel import Layout
from planner.perf.roofline import op_time


def test_the_bundled_sweeps_are_replayed_within_their_fit():
    """Two-parameter least-squares fits (fixed time, HBM fraction) per device: every call within
    11% (the smallest call of each sweep sits 6-10% off the line), the median within 2% on the
    GPUs' 7-10 calls and 5% on the 910B's four (+8.4 / -4.9 / -3.3 / +1.5%)."""
    sweeps = {s["hardware"]: s for s in linear_decode_sweeps()}
    assert set(sweeps) == {"h200", "b200", "ascend-910b"}
    for s in sweeps.values():
        bound = 0.05 if s["hardware"] == "ascend-910b" else 0.02
        assert s["median_abs_rel_error"] < bound and s["max_abs_rel_error"] < 0.11, s["file"]


def test_the_910b_batch_16_call_by_hand():
    """vLLM-Ascend's multi-op decode core at 16 sequences x 32 value heads x 128 x 128, BF16 state
    read and written (33,554,432 B) plus q/k/v in and the output out (393,216 B): 33,947,648 B at
    1.6 TB/s x 0.335 = 63.3 us (the 67 MFLOP update at 2.7% of the BF16 peak, 7.0 us, is hidden
    under it), + 42.2 us per call = 105.5 us; measured 103.9 us."""
    hw = hardware("ascend-910b")
    op = Op("linear_attention", OpKind.attention, 1, flops=8.0 * 16 * 32 * 128 * 128, act_bytes=393216,
            kv_bytes=33554432, linear=True, recurrent=True)
    assert float(op_time(hw, op, DTypes()).time_s) * 1e6 == pytest.approx(33947648 / (1.6e12 * 0.335) * 1e6 + 42.2,
                                                                          rel=1e-9)
    # the same operator in a prompt step runs the chunked kernel: the weights' fraction, one kernel latency
    chunked = Op("linear_attention", OpKind.attention, 1, flops=8.0 * 16 * 32 * 128 * 128, act_bytes=393216,
                 kv_bytes=33554432, linear=True)
    assert float(op_time(hw, chunked, DTypes()).time_s) * 1e6 == pytest.approx(
        33947648 / (1.6e12 * 0.84) * 1e6 + 8.3, rel=1e-9)


def test_decode_ops_are_recurrent_prompt_ops_chunked_and_a_mixed_step_keeps_both():
    q = planner.model("qwen3-next-80b-a3b")
    lay = Layout.of(2, 1, 1)
    dec = layer_ops(q, lay, Step.of(8, 1.0, 4000), DTypes())
    pre = layer_ops(q, lay, Step.of(1, 2000, 0, prompt=True), DTypes())
    (d,) = [op for op in dec if op.linear]
    (p,) = [op for op in pre if op.linear]
    assert d.recurrent and not p.recurrent
    merged = [op for op in merge_ops(dec, pre) if op.linear]
    assert [(op.name, op.recurrent) for op in merged] == [("linear_attention", True),
                                                          ("linear_attention_prefill", False)]


def test_a_hybrid_decode_step_slows_where_the_kernel_was_measured_and_nowhere_else():
    kw = dict(tp=4, batch=64, input_len=2000, output_len=1000)
    h200 = with_framework(hardware("h200"), "vllm")
    bare = h200.model_copy(update={"efficiency": h200.efficiency.model_copy(update={"linear_decode": None})})
    slow, fast = (planner.estimate("qwen3-next-80b-a3b", h, **kw) for h in (h200, bare))
    assert slow.tpot_s > fast.tpot_s and slow.ttft_s == fast.ttft_s
    # 36 layers x (8.0 - 5.75 us fixed + the stream at 0.55 instead of 0.85 of 4.8 TB/s)
    layer_bytes = 64 * (2 * 8 * 128 * 128 * 2 + (2 * 4 * 128 + 2 * 8 * 128) * 2) + 64 * 3 * 4096 * 2 * 2
    extra = 36 * (8.0e-6 - 5.75e-6 + layer_bytes / 4.8e12 * (1 / 0.55 - 1 / 0.85))
    assert slow.tpot_s - fast.tpot_s == pytest.approx(extra, rel=0.1)
    # a dense model does not run the kernel
    d = [planner.estimate("llama-3.1-8b", h, batch=8, input_len=1000, output_len=100).tpot_s for h in (h200, bare)]
    assert d[0] == d[1]
    assert np.isfinite(slow.tpot_s)
