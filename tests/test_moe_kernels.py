"""Kernels per MoE operator (``Efficiency.moe_kernels``): SGLang's NPU backend runs the expert MLP
of a decode step as three kernels (grouped GEMM, dequant-SwiGLU-quant, grouped GEMM) and routes
with two (gate GEMM, NPU top-k), and each pays the profile's fixed kernel time; engines whose
entry states none keep one kernel per operator."""

import numpy as np
import pytest

import planner
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import MoeKernels, hardware
from planner.perf.ops import DTypes, Step, layer_ops
from planner.perf.parallel import Layout
from planner.perf.roofline import op_time


def _moe_ops(hw):
    m = planner.model("qwen3-235b-a22b")
    ops = layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1, 2048), DTypes())
    return {o.name: op_time(hw, o, DTypes()) for o in ops}


def test_sglang_on_ascend_pays_three_expert_kernels_and_two_router_kernels():
    base = hardware("ascend-910c")
    sgl = with_framework(base, "sglang-ascend")
    latency = base.efficiency.kernel_latency.value
    assert latency == pytest.approx(8.3e-6)
    t = _moe_ops(sgl)
    assert float(t["experts"].fixed_s) == pytest.approx(3 * latency)
    assert float(t["router"].fixed_s) == pytest.approx(2 * latency)
    assert float(t["moe_permute"].fixed_s) == pytest.approx(latency)
    assert float(t["qkv_proj"].fixed_s) == pytest.approx(latency)          # dense operators: one kernel
    # everything else about the operator is the engine's and unchanged
    one = with_framework(base, "vllm-ascend")
    u = _moe_ops(one)
    assert float(u["experts"].fixed_s) == pytest.approx(latency)           # no count stated: one
    assert one.efficiency.moe_kernels is None


def test_the_extra_kernels_cost_a_decode_step_their_fixed_time_per_layer():
    """94 MoE layers x 3 extra kernels (2 in the experts, 1 in the router) x 8.3 us = 2.34 ms."""
    base = with_framework(hardware("ascend-910c"), "sglang-ascend")
    plain = base.model_copy(update={"efficiency": base.efficiency.model_copy(update={"moe_kernels": None})})
    m = planner.model("qwen3-235b-a22b")
    ops = layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1, 2048), DTypes())

    def step(hw):            # an operator's time is over all the layers that hold it
        return sum(float(np.max(op_time(hw, o, DTypes()).time_s)) for o in ops)

    assert step(base) - step(plain) == pytest.approx(94 * 3 * 8.3e-6, rel=1e-6)


def test_draft_module_moe_operators_count_as_the_models_own():
    k = MoeKernels(router=2, experts=3, source="test")
    assert (k.of("experts"), k.of("mtp_experts"), k.of("mtp_extend_experts")) == (3, 3, 3)
    assert (k.of("mtp_router"), k.of("moe_permute"), k.of("attention"), k.of("mtp_qkv_proj")) == (2, 1, 1, 1)


def test_a_kernel_count_below_one_is_refused_with_its_field(tmp_path):
    from planner.catalog.frameworks import load_framework_file
    from planner.errors import InputError

    bad = tmp_path / "fw.yaml"
    bad.write_text("description: x\nmoe_kernels: {router: 2, experts: 0, source: me}\n")
    with pytest.raises(InputError, match=r"fw\.yaml.*moe_kernels"):
        load_framework_file(bad)


def test_explain_names_the_kernel_count_and_its_source():
    from planner.perf.roofline import explain_op

    hw = with_framework(hardware("ascend-910c"), "sglang-ascend")
    m = planner.model("qwen3-235b-a22b")
    op = next(o for o in layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1, 2048), DTypes()) if o.name == "experts")
    _, applied, source = explain_op(hw, op_time(hw, op, DTypes()), DTypes())
    assert "3 x 8.3 us/kernel" in applied
    assert "kernels: sgl-project/sglang" in source and "fused_moe_method_npu.py" in source
    dense = next(o for o in layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1, 2048), DTypes()) if o.name == "o_proj")
    _, applied, source = explain_op(hw, op_time(hw, dense, DTypes()), DTypes())
    assert " x 8.3" not in applied and "kernels:" not in source
