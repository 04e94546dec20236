"""Engines allocate the KV cache in pages (MemoryPolicy.page_tokens: vLLM block_size 16 on CUDA,
128 on Ascend; TensorRT-LLM tokens_per_block 32; SGLang's CUDA page 1): a sequence holds whole
pages, on average (page - 1) / 2 tokens more than its length."""

import math

import pytest

import planner
from planner.catalog.dtypes import DType
from planner.catalog.frameworks import framework, with_framework
from planner.catalog.hardware import hardware
from planner.perf.estimate import resolve_dtypes
from planner.perf.memory import kv_bytes_per_token_device, page_waste_bytes
from planner.perf.parallel import Layout
from planner.serving.batching import Engine
from planner.serving.simulate import cache_pools, kv_capacity

# Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes (BF16)
LLAMA8B_KV_PER_TOKEN_B = 32 * 8 * 128 * 2 * 2


def test_entries_name_their_page():
    pages = {n: getattr(framework(n).memory_policy.page_tokens, "value", None) if framework(n).memory_policy
             else None for n in ("vllm", "vllm-ascend", "sglang", "sglang-ascend", "tensorrt-llm", "mindie")}
    assert pages == {"vllm": 16, "vllm-ascend": 128, "sglang": None, "sglang-ascend": 128, "tensorrt-llm": 32,
                     "mindie": 128}


@pytest.mark.parametrize("fw,page", [("vllm", 16), ("tensorrt-llm", 32), ("sglang", 1)])
def test_half_a_page_per_sequence_by_hand(fw, page):
    hw = with_framework(hardware("h100-sxm"), fw)
    per_tok = float(kv_bytes_per_token_device(planner.model("llama-3.1-8b"), Layout.of(1, 1, 1), DType.bf16))
    assert per_tok == LLAMA8B_KV_PER_TOKEN_B
    assert float(page_waste_bytes(hw, per_tok)) == LLAMA8B_KV_PER_TOKEN_B * (page - 1) / 2


def test_max_batch_counts_the_part_filled_page():
    """vllm-ascend's 128-token pages: a 1,000-token sequence takes 1,063.5 tokens' worth on average."""
    kw = dict(input_len=900, output_len=100, batch=1)
    e = planner.estimate("llama-3.1-8b", "ascend-910b", framework="vllm-ascend", **kw)
    m = planner.model("llama-3.1-8b")
    free = e.memory.capacity_bytes - e.memory.startup_bytes - e.memory.reserved_bytes - e.memory.weights_bytes \
        - e.memory.workspace_bytes - e.memory.comm_buffer_bytes
    per_tok = float(kv_bytes_per_token_device(m, Layout.of(1, 1, 1), DType.bf16))
    assert e.memory.max_batch == math.floor(free / (per_tok * (1000 + 63.5)))


def test_the_simulator_holds_the_page_with_each_sequence():
    m = planner.model("llama-3.1-8b")
    lay, dtypes = Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None)
    hw = with_framework(hardware("ascend-910b"), "vllm-ascend")
    free, per_tok, state = kv_capacity(m, hw, lay, dtypes)
    kv, per_tok2, held, _ = cache_pools(m, hw, lay, dtypes, Engine(framework="vllm-ascend"))
    assert kv == free and per_tok2 == per_tok and state == 0.0
    assert held == pytest.approx(per_tok * 63.5)
