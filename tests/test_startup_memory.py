"""Memory already taken when an engine's process starts (Memory.startup_used: the driver's share of
the listed total and the CUDA / HIP / CANN and PyTorch context): every engine sizes its KV pool
without it. vLLM and SGLang read free memory after it exists (total-fraction policies lose all of
it); TensorRT-LLM's free fraction is of what it leaves (loses that fraction of it)."""

import pytest

import planner
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import hardware
from planner.perf.estimate import resolve_dtypes
from planner.perf.memory import free_kv_bytes_device, startup_bytes
from planner.perf.parallel import Layout

MIB = 2**20


def _without(hw):
    return hw.model_copy(update={"memory": hw.memory.model_copy(update={"startup_used": None})})


def test_profiles_hold_the_logged_figures():
    # capacity less the free memory the engines log at start-up (see each profile's source)
    assert startup_bytes(hardware("h100-sxm")) == 1103 * MIB        # 81,559 MiB - 78.57 GiB
    assert startup_bytes(hardware("ascend-910b")) == 369 * MIB      # 60.96 - 60.6 GiB
    assert startup_bytes(hardware("h800")) == 1103 * MIB            # inherits the H100 board's
    assert startup_bytes(hardware("a10g")) == 0.0                   # not measured: not modelled


# vLLM counts it against gpu_memory_utilization x total; SGLang takes its fraction (its own pick on
# an H100 at TP1, 0.835) of the memory free at start-up, so its pool loses that fraction of it;
# TensorRT-LLM its free fraction
@pytest.mark.parametrize("fw,share", [("vllm", 1.0), ("sglang", 0.835), ("tensorrt-llm", 0.9)])
def test_kv_pool_loses_it_as_the_engine_sizes_the_pool(fw, share):
    m = planner.model("llama-3.1-8b")
    lay, dtypes = Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None)
    hw = with_framework(hardware("h100-sxm"), fw)
    lost = float(free_kv_bytes_device(m, _without(hw), lay, dtypes)) - float(free_kv_bytes_device(m, hw, lay, dtypes))
    assert lost == pytest.approx(share * 1103 * MIB, rel=1e-9)


def test_a_die_of_a_package_pays_it_per_process():
    """Each die of a 910C is its own rank and process: the package loses two contexts."""
    m = planner.model("qwen3-32b")
    lay, dtypes = Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None)
    hw = with_framework(hardware("ascend-910c"), "vllm-ascend")
    lost = float(free_kv_bytes_device(m, _without(hw), lay, dtypes)) - float(free_kv_bytes_device(m, hw, lay, dtypes))
    assert lost == pytest.approx(2 * 389 * MIB, rel=1e-9)


def test_whatif_names_it_and_it_never_adds_room():
    kw = dict(tp=2, batch=8, input_len=2000, output_len=500)
    e = planner.estimate("llama-3.1-70b", "h100-sxm", **kw)
    assert e.memory.startup_bytes == 1103 * MIB
    assert e.memory.used_bytes <= e.memory.capacity_bytes
    a10 = planner.estimate("llama-3.1-8b", "a10g", batch=1, input_len=100, output_len=10)
    assert a10.memory.startup_bytes == 0.0


def test_a_profile_whose_start_up_takes_the_whole_device_is_refused_at_its_field(tmp_path):
    from planner.errors import InputError

    f = tmp_path / "p.yaml"
    f.write_text("base: h100-sxm\nname: odd\ndescription: x\nmemory:\n  capacity: {value: 81559 MiB, source: gib_smi}\n"
                 "  bandwidth: {value: 3.35 TB/s, source: nv_h100_ds}\n"
                 "  startup_used: {value: 90 GiB, source: gib_smi}\n")
    with pytest.raises(InputError, match="startup_used"):
        hardware(str(f))
