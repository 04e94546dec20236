"""Scheduler limits and memory settings an engine picks by itself from the device it runs on
(``Framework.batch_defaults`` -> ``HardwareProfile.engine_defaults``; SGLang's
``MemoryPolicy.static_reserve``), where the launch gives none. Figures by hand from the engines'
rules: vLLM ``EngineArgs.get_batch_defaults``, SGLang ``_handle_gpu_memory_settings``."""

import numpy as np
import pytest

from planner.catalog.frameworks import as_run
from planner.perf.memory import engine_fraction, free_kv_bytes_device
from planner.perf.parallel import Layout
from planner.perf.speculation import Speculation
from planner.serving.batching import Engine


@pytest.mark.parametrize("hw, fw, limits", [
    ("h100-sxm", "vllm", (1024, 8192)),        # >= 70 GiB
    ("b200", "vllm", (1024, 8192)),
    ("a100-80g", "vllm", (256, 2048)),         # 80 GiB, but vLLM skips A100s (its PR #17885)
    ("l40s", "vllm", (256, 2048)),             # below 70 GiB
    ("mi300x", "vllm-rocm", (1024, 8192)),
    ("b200", "sglang", (2048, 16384)),         # 160 GiB and up
    ("h200", "sglang", (2048, 8192)),
    ("l40s", "sglang", (2048, 4096)),          # 35-60 GiB
    ("l4", "sglang", (2048, 2048)),            # below 35 GiB
    ("ascend-910b", "sglang-ascend", (2048, 32768)),   # an Atlas A2 die, SGLang's NPU row
])
def test_engine_takes_its_own_defaults_for_the_device(hw, fw, limits):
    seqs, tokens, _ = Engine(framework=fw).batch_limits(as_run(hw, fw))
    assert (seqs, tokens) == limits


def test_a_limit_the_launch_gives_wins_and_sglang_sizes_each_dp_worker():
    hw = as_run("b200", "sglang")
    assert Engine(framework="sglang", max_batched_tokens=4096).batch_limits(hw)[1] == 4096
    # SGLang's own request limit is each DP worker's; its chunk (and a limit given) the instance's
    assert Engine(framework="sglang").instance_limits(8, hw) == (2048 * 8, 16384)
    assert Engine(framework="sglang", max_num_seqs=512).instance_limits(8, hw) == (512, 16384)
    eng = Engine(framework="sglang").for_device(hw, 8)
    assert (eng.max_num_seqs, eng.max_batched_tokens) == (2048 * 8, 16384)
    assert eng.for_device(hw, 8) == eng                     # written out once, kept


def test_without_a_framework_rule_the_engine_fields_stand():
    hw = as_run("h100-sxm", "tensorrt-llm")
    assert Engine(framework="tensorrt-llm").batch_limits(hw)[:2] == (2048, 8192)


@pytest.mark.parametrize("lay, spec, reserve_mib", [
    (Layout.of(1), None, 512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024),                   # 13,440 MiB
    (Layout.of(8), None, 512 + 8192 * 1.5 + 512 * 2 + 8 / 8 * 1024),                   # 14,848
    (Layout.of(1, 8), None, 512 + 8192 * 1.5 + 512 * 2 + 1024 + 512 * 8 * (3 + 1.5)),  # DP attention: 33,280
    (Layout.of(1), Speculation(3, 0.7), 13440 + 2048),                                # an EAGLE draft
])
def test_sglang_picks_its_memory_fraction_by_hand(lay, spec, reserve_mib):
    hw = as_run("h100-sxm", "sglang")
    cap_mib = 81559                                          # nvidia-smi's 80 GB H100
    assert hw.memory.capacity.value == cap_mib * 2**20
    assert float(engine_fraction(hw, lay, spec)) == pytest.approx(round((cap_mib - reserve_mib) / cap_mib, 3))


def test_sglang_floor_and_small_gpus():
    # below 60 GiB there is no 10 GiB floor: an L4 keeps 512 + 2048 x 1.5 + 24 x 2 + 128 MiB back
    hw = as_run("l4", "sglang")
    cap_mib = hw.memory.capacity.value / 2**20
    assert float(engine_fraction(hw)) == pytest.approx(round((cap_mib - 3760) / cap_mib, 3))
    # a B200's reserve (512 + 16384 x 1.5 + 1024 + 128 = 26,240 MiB) is above the floor
    b = as_run("b200", "sglang")
    assert float(engine_fraction(b)) == pytest.approx(round((183359 - 26240) / 183359, 3))


def test_a_fraction_the_launch_gives_replaces_the_engines_pick():
    hw = as_run("h100-sxm", "sglang", memory_fraction=0.8)
    assert hw.memory_policy.static_reserve is None
    assert float(engine_fraction(hw, Layout.of(8), Speculation(3, 0.7))) == 0.8
    assert engine_fraction(as_run("h100-sxm", "vllm"), Layout.of(8)) == 0.9   # vLLM's is fixed


def test_sglang_pool_shrinks_by_the_draft_reserve_and_more_ranks():
    from planner.catalog.model_catalog import model
    from planner.perf.ops import DTypes

    m, hw, dt = model("llama-3.1-8b"), as_run("h100-sxm", "sglang"), DTypes()
    plain = float(free_kv_bytes_device(m, hw, Layout.of(1), dt))
    drafted = float(free_kv_bytes_device(m, hw, Layout.of(1), dt, Speculation(3, 0.7)))
    # the 2 GiB reserve and the draft's own weights (its MTP block) both come out of the pool
    assert plain - drafted > 2048 * 2**20 * 0.99
    # the fraction never grows with TP (the per-rank term and the larger graph batch at TP 4)
    fr = [float(engine_fraction(hw, Layout.of(t))) for t in (1, 2, 4, 8)]
    assert all(np.diff(fr) <= 0)


def test_simulator_runs_the_devices_limits():
    """The simulator's engine takes the device's budget: vLLM on an L40S prefills 2,048 tokens an
    iteration, so a 6,000-token prompt takes three iterations and waits longer than on the 8,192
    budget the same engine gets when told so."""
    from planner.catalog.model_catalog import model
    from planner.perf.ops import DTypes
    from planner.serving.simulate import cache_pools, simulate

    m, hw, dt, lay = model("llama-3.1-8b"), as_run("l40s", "vllm"), DTypes(), Layout.of(1)
    assert cache_pools(m, hw, lay, dt, Engine())[3].max_batched_tokens == 2048
    one = dict(arrival_s=np.zeros(1), input_len=np.array([6000]), output_len=np.array([8]), warmup_frac=0.0)
    small = simulate(m, hw, lay, dt, Engine(), **one)
    told = simulate(m, hw, lay, dt, Engine(max_batched_tokens=8192), **one)
    assert small.iterations > told.iterations
    assert small.ttft_s[0] > told.ttft_s[0]


def test_a_plan_names_the_limits_the_engine_picked_for_its_device():
    from planner.run import _device_limits

    assert _device_limits(Engine(), "a100-80g") == [
        "engine limits on a100-80g: 2,048 tokens per iteration, 256 sequences (vllm's own default for this device; "
        "engine.max_batched_tokens / engine.max_num_seqs to change)"]
    assert _device_limits(Engine(framework="sglang"), "b200")[0].startswith(
        "engine limits on b200: 16,384 tokens per iteration, 2,048 sequences per attention-DP worker")
    assert _device_limits(Engine(max_batched_tokens=4096, max_num_seqs=64), "a100-80g") == []
    assert _device_limits(Engine(framework="tensorrt-llm"), "h100-sxm") == []    # no rule by device


def test_sglang_pool_by_hand_its_fraction_of_the_memory_free_at_start():
    """SGLang's pool is f x (memory free at start-up) - weights: its activations live in the 1 - f
    it keeps back (model_runner: rest = free after load - free before load x (1 - f)), where vLLM's
    profiled activations (the workspace) count against its fraction of total memory."""
    from planner.catalog.model_catalog import model
    from planner.perf.memory import startup_bytes, weight_bytes_device, workspace_bytes
    from planner.perf.ops import DTypes, Step, layer_ops

    m, dt, lay = model("llama-3.1-8b"), DTypes(), Layout.of(1)
    weights = float(weight_bytes_device(layer_ops(m, lay, Step.of(1, 1, 0), dt), lay, dt))
    sg, vl = as_run("h100-sxm", "sglang"), as_run("h100-sxm", "vllm")
    cap, start = sg.memory.capacity.value, startup_bytes(sg)
    assert float(free_kv_bytes_device(m, sg, lay, dt)) == pytest.approx(0.835 * (cap - start) - weights, rel=1e-12)
    act = float(workspace_bytes(m, lay, dt))
    assert float(free_kv_bytes_device(m, vl, lay, dt)) == pytest.approx(0.9 * cap - start - weights - act, rel=1e-12)


def test_throughput_reports_the_limits_it_ran_with():
    import planner

    s = planner.throughput("llama-3.1-8b", "l40s", input_len=1000, output_len=200)
    assert (s.max_num_seqs, s.max_batched_tokens) == (256, 2048)            # vLLM below 70 GiB
    s = planner.throughput("llama-3.1-8b", "l40s", input_len=1000, output_len=200,
                           engine=Engine(max_batched_tokens=8192))
    assert (s.max_num_seqs, s.max_batched_tokens) == (256, 8192)


def test_a_multi_die_package_is_seen_die_by_die():
    """SGLang on a 910C runs one rank per die: the die's 61 GiB pick the Atlas A2/A3 row (32,768
    tokens), not the package's 122 GiB."""
    for name in ("ascend-910c", "cloudmatrix384"):
        assert Engine(framework="sglang-ascend").batch_limits(as_run(name, "sglang-ascend"))[1] == 32768
