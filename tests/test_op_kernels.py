"""Kernels per modelled operator (``Efficiency.op_kernels``): SGLang's NPU backend runs the expert
MLP of a decode step as three kernels (grouped GEMM, dequant-SwiGLU-quant, grouped GEMM) and routes
with two (gate GEMM, NPU top-k); CloudMatrix-Infer fuses the MLA pre-attention projections into one
kernel (MLAProlog) and the MoE permute into its dispatch and combine. Each kernel pays the profile's
fixed kernel time, a fused operator none; engines whose entry states none keep one per operator."""

import numpy as np
import pytest

import planner
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import OPERATORS, OpKernels, hardware
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
    # the dense part: the QKV projection and its split / q-k-norm / RoPE kernel, two add-RMSNorms
    assert float(t["qkv_proj"].fixed_s) == pytest.approx(2 * latency)
    assert float(t["norms_residual"].fixed_s) == pytest.approx(2 * latency)
    assert float(t["o_proj"].fixed_s) == pytest.approx(latency)            # operators it does not name: one
    # everything else about the operator is the engine's and unchanged
    one = with_framework(base, "vllm-ascend")
    u = _moe_ops(one)
    assert float(u["experts"].fixed_s) == pytest.approx(latency)           # no count stated: one
    assert one.efficiency.op_kernels is None


def test_the_extra_kernels_cost_a_decode_step_their_fixed_time_per_layer():
    """94 MoE layers x 5 extra kernels (2 in the experts, 1 in the router, the second add-RMSNorm and
    the QKV split / q-k-norm / RoPE kernel) x 8.3 us = 3.90 ms."""
    base = with_framework(hardware("ascend-910c"), "sglang-ascend")
    plain = base.model_copy(update={"efficiency": base.efficiency.model_copy(update={"op_kernels": None})})
    m = planner.model("qwen3-235b-a22b")
    ops = layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1, 2048), DTypes())

    def step(hw):            # an operator's time is over all the layers that hold it
        return sum(float(np.max(op_time(hw, o, DTypes()).time_s)) for o in ops)

    assert step(base) - step(plain) == pytest.approx(94 * 5 * 8.3e-6, rel=1e-6)


def test_draft_module_moe_operators_count_as_the_models_own():
    k = OpKernels(counts={"router": 2, "experts": 3}, source="test")
    assert (k.of("experts"), k.of("mtp_experts"), k.of("mtp_extend_experts")) == (3, 3, 3)
    assert (k.of("mtp_router"), k.of("moe_permute"), k.of("attention"), k.of("mtp_qkv_proj")) == (2, 1, 1, 1)


@pytest.mark.parametrize("counts, says", [("{router: 2, experts: -1}", "kernel count is >= 0"),
                                          ("{expert: 3}", "unknown operator 'expert'")])
def test_a_bad_kernel_count_is_refused_with_its_field(tmp_path, counts, says):
    from planner.catalog.frameworks import load_framework_file
    from planner.errors import InputError

    bad = tmp_path / "fw.yaml"
    bad.write_text(f"description: x\nop_kernels: {{counts: {counts}, source: me}}\n")
    with pytest.raises(InputError, match=rf"fw\.yaml.*op_kernels(.|\n)*{says}"):
        load_framework_file(bad)


def test_explain_names_the_kernel_count_and_its_source():
    from planner.perf.roofline import explain_op

    hw = with_framework(hardware("ascend-910c"), "sglang-ascend")
    m = planner.model("qwen3-235b-a22b")
    op = next(o for o in layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1, 2048), DTypes()) if o.name == "experts")
    _, applied, source = explain_op(hw, op_time(hw, op, DTypes()), DTypes())
    assert "3 x 8.3 us/kernel" in applied
    assert "; kernels: " in source and "fused_moe_method_npu.py" in source and "models/qwen3.py" in source
    dense = next(o for o in layer_ops(m, Layout.of(8, 1, 1), Step.of(1, 1, 2048), DTypes()) if o.name == "o_proj")
    _, applied, source = explain_op(hw, op_time(hw, dense, DTypes()), DTypes())
    assert " x 8.3" not in applied and "kernels:" not in source


def test_every_modelled_operator_can_be_named():
    """OPERATORS (what op_kernels may name) holds every operator the model builds: dense GQA, MLA with
    MoE and an MTP module, hybrid linear attention, prefill and decode steps."""
    names = set()
    for model, lay in (("llama-3.1-8b", Layout.of(2, 1, 1)), ("deepseek-r1", Layout.of(1, 8, 1)),
                       ("qwen3-next-80b-a3b", Layout.of(2, 2, 1)), ("qwen3-235b-a22b", Layout.of(4, 4, 1))):
        m = planner.model(model)
        for step in (Step.of(1, 1, 2048), Step.of(4, 2048, 0)):
            names |= {o.name for o in layer_ops(m, lay, step, DTypes())}
    assert names <= OPERATORS, names - OPERATORS
    assert {"q_a_proj", "linear_attention", "experts", "qkv_proj"} <= names


def test_cloudmatrix_fuses_the_mla_prolog_and_the_permute():
    """MLAProlog: q_a + q_b + kv_a in one kernel (q_a_proj's); the permute inside dispatch/combine;
    kv_b (its W_UV half after attention) and o_proj keep one each. A decode step of DeepSeek-R1's
    61 MLA layers (58 of them MoE) saves (2 x 61 + 58) x 8.3 us = 1.49 ms."""
    base = hardware("cloudmatrix384")
    cm = with_framework(base, "cloudmatrix-infer")
    plain = cm.model_copy(update={"efficiency": cm.efficiency.model_copy(update={"op_kernels": None})})
    m = planner.model("deepseek-r1")
    ops = layer_ops(m, Layout.of(1, 8, 1), Step.of(4, 1, 4096), DTypes())
    t = {o.name: op_time(cm, o, DTypes()) for o in ops if o.count == 58}
    assert float(np.max(t["q_b_proj"].fixed_s)) == float(np.max(t["kv_a_proj"].fixed_s)) == 0.0
    assert float(np.max(t["moe_permute"].fixed_s)) == 0.0
    assert float(np.max(t["q_a_proj"].fixed_s)) > 0 and float(np.max(t["kv_b_proj"].fixed_s)) > 0

    def step(hw):
        return sum(float(np.max(op_time(hw, o, DTypes()).time_s)) for o in ops)

    latency = base.efficiency.kernel_latency.value
    assert step(plain) - step(cm) == pytest.approx((2 * 61 + 58) * latency, rel=1e-6)


def test_explain_says_a_fused_operator_has_no_kernel_of_its_own():
    from planner.perf.roofline import explain_op

    hw = with_framework(hardware("cloudmatrix384"), "cloudmatrix-infer")
    ops = layer_ops(planner.model("deepseek-r1"), Layout.of(1, 8, 1), Step.of(4, 1, 4096), DTypes())
    op = next(o for o in ops if o.name == "kv_a_proj")
    _, applied, source = explain_op(hw, op_time(hw, op, DTypes()), DTypes())
    assert "no kernel of its own (fused)" in applied and "us/kernel" not in applied
    assert "kernels: cm384_paper" in source


def test_explain_names_the_expert_load_and_where_the_skew_comes_from():
    """An expert-parallel operator's explanation gives its load factor (statistical maximum x the
    engine's routing skew) and the skew's source; a dense operator's gives neither."""
    from planner.perf.roofline import explain_op

    hw = with_framework(hardware("cloudmatrix384"), "cloudmatrix-infer")
    ops = {o.name: o for o in layer_ops(planner.model("deepseek-r1"), Layout.of(1, 8, 1), Step.of(32, 1, 4096),
                                        DTypes()) if o.count == 58}
    skew = hw.efficiency.moe_imbalance.value
    for name in ("ep_dispatch", "ep_combine", "experts"):
        op = ops[name]
        _, applied, source = explain_op(hw, op_time(hw, op, DTypes()), DTypes())
        load = float(np.ravel(op.imbalance)[0]) * skew
        assert f"expert load x{load:.2f}" in applied, (name, applied)
        assert "expert load: calibrated (the one Table 3 row" in source
    _, applied, source = explain_op(hw, op_time(hw, ops["o_proj"], DTypes()), DTypes())
    assert "expert load" not in applied and "expert load" not in source
