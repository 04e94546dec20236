"""Per-die accounting on multi-die packages (Ascend 910C: two dies, each its own rank)."""

import numpy as np
import pytest

import planner
from planner.catalog.dtypes import DType
from planner.catalog.hardware import hardware
from planner.catalog.model_catalog import model
from planner.perf.estimate import estimate
from planner.perf.memory import free_kv_bytes_device, kv_bytes_per_token_device
from planner.perf.ops import DTypes, Step
from planner.perf.parallel import Layout, on_dies
from planner.perf.roofline import step_time


def test_a_910c_die_has_half_the_package():
    pkg = hardware("ascend-910c")
    die = pkg.per_die()
    assert pkg.dies_per_device == 2 and die.dies_per_device == 1
    assert die.peak_flops[DType.bf16].value == pytest.approx(353.9e12)       # 707.8 / 2
    assert die.memory.capacity.value == pkg.memory.capacity.value / 2 == 65_787_658_240   # 61.27 GiB a process sees
    assert die.memory.bandwidth.value == pytest.approx(1.6e12)
    assert die.scale_up.bandwidth_per_direction.value == pytest.approx(196e9)  # cm384_paper: per die
    assert die.domain_size == 16                                               # an A3 node: 16 ranks
    assert die.efficiency == pkg.efficiency and die.power == pkg.power
    assert die.per_die() is die and pkg.per_die() is die                       # idempotent, cached
    assert hardware("ascend-910b").per_die() is hardware("ascend-910b")        # one die: itself


@pytest.mark.parametrize("tp, ep, ranks", [(4, 1, (8, 1)), (1, 1, (2, 1)), (1, 8, (1, 16)), (2, 8, (4, 16)),
                                           (8, 8, (16, 16))])
def test_layout_over_dies(tp, ep, ranks):
    """TP and EP groups span every die of their packages; attention data parallelism (tp 1, ep > 1)
    stays data-parallel on each die (SGLang --enable-dp-attention, CloudMatrix-Infer DP320)."""
    hw, lay = on_dies(hardware("ascend-910c"), Layout.of(tp, ep, 1))
    assert (int(lay.tp), int(lay.ep)) == ranks and int(lay.pp) == 1
    assert int(lay.stage_devices) == 2 * max(tp, ep)                           # two ranks per package
    assert on_dies(hw, lay)[1] is lay                                          # a die is not split again


def test_a_package_step_is_one_die_step():
    """A 910C at tp 4 runs exactly what one die of a tp 8 group over dies runs."""
    m, pkg = model("qwen3-32b"), hardware("ascend-910c")
    step, dt = Step.of(16, 1.0, 4000.0), DTypes()
    a = step_time(m, pkg, Layout.of(4, 1, 1), step, dt).total_s
    b = step_time(m, pkg.per_die(), Layout.of(8, 1, 1), step, dt).total_s
    assert float(a) == float(b)


def test_all_reduce_over_dies_moves_each_die_the_full_payload():
    """Per-die accounting makes a TP all-reduce slower than the package view: each die reduces the
    whole activation over its own half of the link, and the ring has twice the ranks."""
    from planner.perf.comm import collective_time

    pkg = hardware("ascend-910c")
    payload = 64e6                                                             # bandwidth-bound
    t_pkg = float(collective_time(pkg, "all_reduce", payload, 4))
    t_die = float(collective_time(pkg.per_die(), "all_reduce", payload, 8))
    bw = 392e9 * pkg.efficiency.scale_up.value
    assert t_pkg == pytest.approx(2 * 3 / 4 * payload / bw + 20e-6)
    assert t_die == pytest.approx(2 * 7 / 8 * payload / (bw / 2) + 20e-6)


def test_a_small_all_reduce_over_an_a3_node_takes_what_its_profiler_measures():
    """HCCL's 160 KB decode all-reduce over an A3 node's 16 dies: 19.8-24.1 us in serving (the
    Ascend profiler's stable medians at 1-32 clients, hardware_profiles/_sources.yaml
    hccl_a3_allreduce). The profile gives 20 us + 2 x 15/16 x 160 KB over 196 GB/s x 0.70 = 22.2 us;
    SGLang-on-Ascend no longer replaces it by 2 x 15 ring hops of 2.5 us (75 us)."""
    from planner.catalog.frameworks import with_framework
    from planner.perf.comm import collective_time

    die = hardware("ascend-910c").per_die()
    t = float(collective_time(die, "all_reduce", 160e3, 16))
    assert t == pytest.approx(20e-6 + 2 * 15 / 16 * 160e3 / (196e9 * 0.70))
    assert 19.8e-6 <= t <= 24.1e-6
    sgl = with_framework(hardware("ascend-910c"), "sglang-ascend").per_die()
    assert float(collective_time(sgl, "all_reduce", 160e3, 16)) == pytest.approx(t)


def test_explain_names_the_all_reduce_latency_and_its_source():
    """whatif --explain shows a small all-reduce's fixed time and where it comes from: the profile's
    measured HCCL figure on Ascend, the ring's hop where an engine all-reduces in rings (vllm-2023)."""
    from planner.catalog.frameworks import with_framework
    from planner.perf.ops import layer_ops
    from planner.perf.roofline import explain_op, op_time

    m = model("qwen3-32b")
    for hw_name, fw, lay, text, source in (
            ("ascend-910c", "sglang-ascend", Layout.of(8, 1, 1), "+ 20 us", "latency: hccl_a3_allreduce"),
            ("a100-80g", "vllm-2023", Layout.of(8, 1, 1), "ring: 2 (n-1) hops x 5.0 us", "hop: calibrated")):
        hw, ranks = on_dies(with_framework(hardware(hw_name), fw), lay)
        op = next(o for o in layer_ops(m, ranks, Step.of(1, 1, 2048), DTypes()) if o.name == "attn_all_reduce")
        _, applied, src = explain_op(hw, op_time(hw, op, DTypes()), DTypes())
        assert text in applied and source in src


def test_gqa_heads_are_replicated_once_dies_outnumber_them():
    """Qwen3-32B has 8 KV heads: at tp 8 over packages = 16 dies, each die holds one head (two
    dies per head), so a package holds 2 x 64 layers x 2 (K, V) x 128 x 2 bytes per token."""
    m, pkg = model("qwen3-32b"), hardware("ascend-910c")
    per_tok = float(kv_bytes_per_token_device(m, Layout.of(8, 1, 1), DType.bf16, pkg))
    assert per_tok == 2 * 64 * 2 * 1 * 128 * 2
    assert float(kv_bytes_per_token_device(m, Layout.of(8, 1, 1), DType.bf16)) == 64 * 2 * 1 * 128 * 2
    # at tp 2 (4 dies, 2 heads each) nothing is replicated: the package view holds
    assert float(kv_bytes_per_token_device(m, Layout.of(2, 1, 1), DType.bf16, pkg)) == 64 * 2 * 4 * 128 * 2


def test_package_memory_is_its_dies_together():
    m, pkg = model("qwen3-32b"), hardware("ascend-910c")
    free_pkg = float(free_kv_bytes_device(m, pkg, Layout.of(2, 1, 1), DTypes()))
    free_die = float(free_kv_bytes_device(m, pkg.per_die(), Layout.of(4, 1, 1), DTypes()))
    assert free_pkg == 2 * free_die
    e = estimate("qwen3-32b", "ascend-910c", tp=2, batch=8, input_len=1000, output_len=100)
    assert e.memory.capacity_bytes == 2 * 65_787_658_240 and e.accelerators == 2
    d = estimate("qwen3-32b", pkg.per_die(), tp=4, batch=8, input_len=1000, output_len=100)
    assert e.memory.weights_bytes == pytest.approx(2 * d.memory.weights_bytes)
    assert e.memory.max_batch == d.memory.max_batch and e.tpot_s == d.tpot_s


def test_mla_under_attention_dp_is_not_replicated_per_die():
    """DeepSeek's latent cache with DP attention: a sequence lives on one die, so a token costs a
    package one latent row, as in the package view."""
    m, pkg = model("deepseek-r1"), hardware("ascend-910c")
    lay = Layout.of(1, 8, 1)
    assert np.array_equal(kv_bytes_per_token_device(m, lay, DType.bf16, pkg),
                          kv_bytes_per_token_device(m, lay, DType.bf16))


def test_heads_that_do_not_split_over_dies_are_a_clear_error():
    """12 heads at tp 4 divide over 4 packages but not over their 8 dies: an answer naming the
    dies, not a fractional head count; the search skips such layouts."""
    from planner.errors import InputError
    from planner.search import layouts

    m = model("qwen3-32b").model_copy(update={"num_heads": 12, "num_kv_heads": 4})
    with pytest.raises(InputError, match="2 dies per package"):
        estimate(m, "ascend-910c", tp=4, batch=1, input_len=100, output_len=10)
    with pytest.raises(InputError, match="2 dies per package"):    # every check_layout given the profile
        planner.throughput(m, "ascend-910c", tp=4, input_len=100, output_len=10)
    assert estimate(m, "ascend-910b", tp=4, batch=1, input_len=100, output_len=10).tpot_s > 0
    lay = layouts(m, hardware("ascend-910c"), [1, 2, 4], [1], [1])
    assert sorted(lay.tp.tolist()) == [1, 2]


def test_memory_tips_only_name_layouts_that_split_over_dies():
    """A 910C that runs out of memory is offered more TP or PP, but never a TP the dies cannot
    split (12 heads: tp 2 = 4 dies yes, tp 4 = 8 dies no; the package view offered --tp 4 --pp 4)."""
    m = model("qwen3-32b").model_copy(update={"num_heads": 12, "num_kv_heads": 4})
    e = estimate(m, "ascend-910c", tp=1, batch=200, input_len=30000, output_len=10)
    assert not e.fits and any(t.startswith("--tp 2") for t in e.suggestions)
    assert not any(t.startswith(("--tp 4", "--tp 8")) for t in e.suggestions)


@pytest.mark.parametrize("name, tp, ep, pp, groups", [
    ("ascend-910c", 1, 8, 1, 1),     # attention DP + EP16 over dies: the EP communicator
    ("ascend-910c", 4, 1, 1, 1),     # TP8 over dies: the all-reduce communicator
    ("ascend-910c", 2, 8, 1, 2),     # TP4 attention groups and EP16: two
    ("ascend-910b", 4, 1, 2, 2),     # TP4 and a pipeline: two
    ("ascend-910b", 1, 1, 1, 0),     # one NPU: no collectives, no buffers
])
def test_hccl_communicators_keep_their_buffers_out_of_the_kv_pool(name, tp, ep, pp, groups):
    """CANN's HCCL_BUFFSIZE page: every HCCL communicator holds 2 x HCCL_BUFFSIZE (default 200 MiB)
    on each rank for itself. The KV pool of a package loses exactly dies x groups x 400 MiB against
    the same profile without the term; the memory breakdown names it."""
    m, hw, lay, dt = model("qwen3-235b-a22b"), hardware(name), Layout.of(tp, ep, pp), DTypes(weight=DType.int8)
    bare = hw.model_copy(update={"memory": hw.memory.model_copy(update={"comm_buffer": None})})
    lost = float(free_kv_bytes_device(m, bare, lay, dt) - free_kv_bytes_device(m, hw, lay, dt))
    assert lost == pytest.approx(hw.dies_per_device * groups * 400 * 2**20)
    e = estimate(m, hw, tp=tp, ep=ep, pp=pp, batch=8, input_len=2000, output_len=100, weight_dtype="int8")
    assert e.memory.comm_buffer_bytes == pytest.approx(hw.dies_per_device * groups * 400 * 2**20)


def test_gpus_model_no_communicator_buffers():
    e = estimate("llama-3.1-70b", "h100-sxm", tp=8, batch=8, input_len=2000, output_len=100)
    assert hardware("h100-sxm").memory.comm_buffer is None and e.memory.comm_buffer_bytes == 0


def test_sglang_holds_hccl_buffers_in_its_reserve():
    """SGLang sizes its KV pool before the first collective creates an HCCL communicator (and
    DeepEP-Ascend its window), so the buffers sit in the (1 - mem_fraction_static) headroom: at the
    default 400 MiB per communicator the pool does not shrink at all; where the buffers outgrow
    the headroom (HCCL_BUFFSIZE 8 GiB: 2 x 8 GiB per communicator, two groups = 32 GiB against
    0.15 x the 60.89 GiB free at start-up, less the activations it also holds, per die) it shrinks
    by exactly the excess on each die."""
    from planner.catalog.frameworks import framework

    m, lay, dt = model("qwen3-235b-a22b"), Layout.of(1, 8, 2), DTypes(weight=DType.int8)   # EP and PP groups
    hw = framework("sglang-ascend").apply(hardware("ascend-910c"))
    assert hw.memory_policy.comm_buffers.value == "reserve"

    def with_buffer(b):
        return hw.model_copy(update={"memory": hw.memory.model_copy(update={"comm_buffer": b})})

    none = float(free_kv_bytes_device(m, with_buffer(None), lay, dt))
    assert float(free_kv_bytes_device(m, hw, lay, dt)) == pytest.approx(none)
    big = hw.memory.comm_buffer.model_copy(update={"value": 16 * 2**30})
    # the headroom is 0.15 of what a die has free at start-up, less the activations it also holds
    from planner.perf.memory import startup_bytes, workspace_bytes
    from planner.perf.parallel import on_dies

    die_hw, ranks = on_dies(hw, lay)
    reserve_die = 0.15 * (hw.memory.capacity.value / 2 - startup_bytes(die_hw)) - float(workspace_bytes(m, ranks, dt))
    excess = 2 * 16 * 2**30 - reserve_die
    assert float(free_kv_bytes_device(m, with_buffer(big), lay, dt)) == pytest.approx(none - 2 * excess)
    # vLLM-Ascend profiles a forward pass first: its pool loses the buffers whole
    v = framework("vllm-ascend").apply(hardware("ascend-910c"))
    bare = v.model_copy(update={"memory": v.memory.model_copy(update={"comm_buffer": None})})
    lost = float(free_kv_bytes_device(m, bare, lay, dt) - free_kv_bytes_device(m, v, lay, dt))
    assert lost == pytest.approx(2 * 2 * 400 * 2**20)
    # the estimate says which (whatif's memory line reads it)
    kw = dict(tp=1, ep=8, pp=2, batch=8, input_len=2000, output_len=100, weight_dtype="int8")
    assert planner.estimate(m, "ascend-910c", framework="sglang-ascend", **kw).memory.comm_buffers_in_reserve
    assert not planner.estimate(m, "ascend-910c", framework="vllm-ascend", **kw).memory.comm_buffers_in_reserve
