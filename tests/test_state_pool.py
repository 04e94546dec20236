"""SGLang's recurrent-state pool (MemoryPolicy.state_pool): a hybrid model's cache memory is split
state : KV = 0.9 : 1 (--mamba-full-memory-ratio), the state part cut into whole per-request
slots, three per running request with the radix cache on; the KV pool gets what the slots leave
and the slots cap the batch. vLLM pages states and KV from one pool."""

import math

import numpy as np
import pytest

import planner
from planner.catalog.dtypes import DType
from planner.catalog.frameworks import with_framework, with_memory_fraction
from planner.catalog.hardware import hardware
from planner.errors import InfeasibleError
from planner.perf.estimate import resolve_dtypes
from planner.perf.memory import (
    free_kv_bytes_device,
    kv_bytes_per_token_device,
    state_bytes_per_sequence_device,
    state_pool_split,
)
from planner.perf.parallel import Layout
from planner.serving.batching import Engine
from planner.serving.simulate import cache_pools, kv_capacity

# Qwen3.6-27B at TP1 (config.json): 48 Gated DeltaNet layers of 48 value heads x 128 x 128 (FP32
# under SGLang) and a conv window of (2 x 16 x 128 + 48 x 128) = 10,240 channels x 3 (BF16);
# 16 full-attention layers of 4 KV heads x 256 (BF16 K and V)
QWEN36_STATE_B = 48 * (48 * 128 * 128 * 4 + 10240 * 3 * 2)
QWEN36_KV_PER_TOKEN_B = 16 * 4 * 256 * 2 * 2


def _sglang_b200():
    return with_framework(hardware("b200"), "sglang")


def test_state_and_kv_bytes_by_hand():
    m, hw = planner.model("qwen3.6-27b"), _sglang_b200()
    lay = Layout.of(1, 1, 1)
    assert float(state_bytes_per_sequence_device(m, lay, DType.bf16, hw)) == QWEN36_STATE_B
    assert float(kv_bytes_per_token_device(m, lay, DType.bf16)) == QWEN36_KV_PER_TOKEN_B


def test_split_by_hand():
    """0.9 / 1.9 of the cache memory in whole slots, three slots per request, the rest KV."""
    hw = _sglang_b200()
    free = 100e9
    kv, cap = state_pool_split(hw, free, QWEN36_STATE_B)
    slots = math.floor(free * 0.9 / 1.9 / QWEN36_STATE_B)
    assert float(cap) == slots // 3
    assert float(kv) == pytest.approx(free - slots * QWEN36_STATE_B)
    assert 0.52 < float(kv) / free < 0.53          # 1 / 1.9 and a part of a slot
    # no states (a dense model) or no split (vLLM): all of it is KV, nothing caps the batch
    assert state_pool_split(hw, free, 0.0)[1] == np.inf
    kv_v, cap_v = state_pool_split(with_framework(hardware("b200"), "vllm"), free, QWEN36_STATE_B)
    assert float(kv_v) == free and cap_v == np.inf


def test_estimate_caps_the_batch_and_reports_the_slots():
    kw = dict(input_len=8192, output_len=1024, memory_fraction=0.8)
    e = planner.estimate("qwen3.6-27b", "b200", framework="sglang", batch=64, **kw)
    m, hw = planner.model("qwen3.6-27b"), with_memory_fraction(with_framework(hardware("b200"), "sglang"), 0.8)
    free = float(free_kv_bytes_device(m, hw, Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None)))
    kv, cap = state_pool_split(hw, free, QWEN36_STATE_B)
    assert e.memory.state_slot_cap == int(cap)
    assert e.memory.state_pool_bytes == pytest.approx(free - float(kv))
    # the KV pool holds floor(kv / (9,216 tokens x 65,536 B)) sequences: fewer than the slots here
    assert e.memory.max_batch == min(int(cap), math.floor(float(kv) / (9216 * QWEN36_KV_PER_TOKEN_B)))
    # vLLM keeps states in the KV pool: more sequences of this length fit the same memory
    v = planner.estimate("qwen3.6-27b", "b200", framework="vllm", batch=64, **kw)
    assert v.memory.state_slot_cap is None and v.memory.max_batch > e.memory.max_batch
    # a dense model has no state pool under SGLang either
    assert planner.estimate("qwen3-32b", "b200", framework="sglang", batch=8, input_len=100,
                            output_len=10).memory.state_slot_cap is None


def test_a_batch_past_the_slots_does_not_fit_and_says_why():
    """Short requests: the KV pool would hold thousands, the state slots only ~100."""
    e = planner.estimate("qwen3.6-27b", "b200", framework="sglang", batch=400, input_len=100, output_len=10,
                         memory_fraction=0.8)
    assert e.memory.state_slot_cap < 400 and not e.fits
    assert "recurrent-state pool" in e.infeasible_reason and "400 sequences" in e.infeasible_reason
    ok = planner.estimate("qwen3.6-27b", "b200", framework="sglang", batch=e.memory.state_slot_cap,
                          input_len=100, output_len=10, memory_fraction=0.8)
    assert ok.fits


def test_simulator_caps_running_sequences_in_the_engine_scope():
    m, hw = planner.model("qwen3.6-27b"), with_memory_fraction(with_framework(hardware("b200"), "sglang"), 0.8)
    lay, dtypes = Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None)
    free, per_tok, state = kv_capacity(m, hw, lay, dtypes)
    kv, per_tok2, state2, eng = cache_pools(m, hw, lay, dtypes, Engine(framework="sglang"))
    _, cap = state_pool_split(hw, free, state)
    assert per_tok2 == per_tok and state2 == 0.0           # a request holds only its tokens in the KV pool
    assert kv == pytest.approx(float(state_pool_split(hw, free, state)[0]))
    assert eng.max_num_seqs == int(cap) < 1024
    # vLLM: the state stays with each sequence in the one pool (beside half a 16-token KV page)
    vhw = with_framework(hardware("b200"), "vllm")
    v = cache_pools(m, vhw, lay, dtypes, Engine(framework="vllm"))
    assert v[2] == float(state_bytes_per_sequence_device(m, lay, DType.bf16, vhw)) + 7.5 * QWEN36_KV_PER_TOKEN_B
    assert v[3].max_num_seqs == 1024


def test_fewer_slots_never_raise_throughput():
    """The split only removes capacity: SGLang's simulated closed loop is no faster than the same
    engine with states in the KV pool (a physical invariant of taking memory away)."""
    m = planner.model("qwen3.6-27b")
    lay, dtypes = Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None)
    n = 256
    inp, out = np.full(n, 4096), np.full(n, 512)
    from planner.serving.simulate import simulate

    split = with_memory_fraction(with_framework(hardware("b200"), "sglang"), 0.8)
    shared = split.model_copy(update={"memory_policy": split.memory_policy.model_copy(update={"state_pool": None})})
    r = {k: simulate(m, h, lay, dtypes, Engine(framework="sglang"), np.zeros(n), inp, out, warmup_frac=0.0)
         for k, h in (("split", split), ("shared", shared))}
    assert r["split"].makespan_s >= r["shared"].makespan_s


def test_no_slot_for_one_request_is_an_answer():
    m = planner.model("qwen3.6-27b")
    hw = with_memory_fraction(with_framework(hardware("b200"), "sglang"), 0.8)
    tiny = hw.model_copy(update={"memory_policy": hw.memory_policy.model_copy(update={
        "state_pool": hw.memory_policy.state_pool.model_copy(update={
            "ratio": hw.memory_policy.state_pool.ratio.model_copy(update={"value": 1e-6})})})})
    with pytest.raises(InfeasibleError, match="recurrent-state pool"):
        cache_pools(m, tiny, Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None), Engine(framework="sglang"))


def test_a_model_that_does_not_fit_is_reported_as_such_not_as_the_state_pool():
    """No memory left after the weights: the simulator's answer is the KV shortfall (what the
    request needs, its state included), not an empty state pool."""
    from planner.serving.simulate import simulate

    m = planner.model("qwen3-next-80b-a3b")
    hw = with_framework(hardware("l4"), "sglang")
    with pytest.raises(InfeasibleError, match="free after weights") as e:
        simulate(m, hw, Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None), Engine(framework="sglang"),
                 np.zeros(4), np.full(4, 100), np.full(4, 10))
    assert "recurrent-state pool" not in str(e.value) and "needs 0.08 GB" in str(e.value)
