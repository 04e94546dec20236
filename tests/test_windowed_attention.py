"""Sliding-window and chunked attention: KV bytes and attention FLOPs at long context, derived by
hand from the configs; multimodal configs are refused cleanly."""

import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

import planner
from planner.catalog.dtypes import DType
from planner.catalog.hf_config import spec_from_hf_dict
from planner.cli import app
from planner.errors import InputError
from planner.perf.memory import kv_bytes_per_token_device, state_bytes_per_sequence_device
from planner.perf.ops import DTypes, Step, layer_ops
from planner.perf.parallel import Layout

GPT_OSS = "gpt-oss-120b"
# gpt-oss-120b: 36 layers alternating sliding (window 128) / full, 8 KV heads of 64, 64 query heads
KV_TOKEN_LAYER = 2 * 8 * 64 * 2          # K and V, bf16: 2,048 bytes per token and layer
HEAD_FLOPS_PER_PAIR = 4 * 64 * 64        # QK^T and PV, 2 FLOPs per MAC, 64 heads x 64 dims


def _attention_flops(model, batch, q_len, ctx):
    ops = layer_ops(model, Layout.of(), Step.of(batch, q_len, ctx), DTypes())
    return sum(op.count * np.asarray(op.flops, dtype=float) for op in ops if op.name == "attention")


def _kv_per_sequence(model, context, tp=1):
    lay = Layout.of(tp=tp)
    per_tok = kv_bytes_per_token_device(model, lay, DType.bf16)
    return float(per_tok * context + state_bytes_per_sequence_device(model, lay, DType.bf16))


def test_gpt_oss_layers_alternate_sliding_and_full():
    m = planner.model(GPT_OSS)
    assert m.window.kind == "sliding" and m.window.size == 128 and m.window.sink_logits
    assert m.window.layers == tuple(range(0, 36, 2))
    assert (m.num_attention_layers, m.num_local_layers) == (18, 18)


def test_gpt_oss_kv_bytes_at_long_context():
    m = planner.model(GPT_OSS)
    # only the 18 full layers grow with the context: 18 x 2,048 = 36,864 B per token (not 73,728)
    assert planner.kv_cache_bytes_per_token(m) == 18 * KV_TOKEN_LAYER == 36864
    L = 131072
    expected = 18 * KV_TOKEN_LAYER * L + 18 * KV_TOKEN_LAYER * 128        # 4.8318 GB + 4.72 MB
    assert _kv_per_sequence(m, L) == pytest.approx(expected)
    assert _kv_per_sequence(m, L) / L == pytest.approx(36900, rel=1e-3)
    # TP 8 splits the 8 KV heads: one head per device, 256 B per token and layer
    assert _kv_per_sequence(m, L, tp=8) == pytest.approx(expected / 8)


def test_gpt_oss_decode_attention_flops_at_long_context():
    m = planner.model(GPT_OSS)
    ctx = 100_000
    # one new token: full layers score ctx + 1 keys, sliding layers 128
    expected = HEAD_FLOPS_PER_PAIR * (18 * (ctx + 1) + 18 * 128)
    assert _attention_flops(m, 1, 1, ctx) == pytest.approx(expected)


def test_gpt_oss_prefill_attention_flops():
    m = planner.model(GPT_OSS)
    # 1,000-token prompt: full layers 1000 x 1001 / 2 = 500,500 pairs; sliding layers
    # sum_{x=1}^{1000} min(x, 128) = 128 x 129 / 2 + 872 x 128 = 119,872
    expected = HEAD_FLOPS_PER_PAIR * (18 * 500_500 + 18 * 119_872)
    assert _attention_flops(m, 1, 1000, 0) == pytest.approx(expected)


def _config(model_type, **extra):
    base = dict(model_type=model_type, hidden_size=1024, num_attention_heads=8, num_key_value_heads=2,
                head_dim=128, num_hidden_layers=8, intermediate_size=4096, vocab_size=32000)
    return {**base, **extra}


def test_mistral_sliding_window_on_every_layer():
    m = spec_from_hf_dict(_config("mistral", sliding_window=4096), name="m", source="test")
    assert m.num_local_layers == 8 and planner.kv_cache_bytes_per_token(m) == 0
    # at any context the cache is bounded by 8 layers x 4,096 tokens x 2 x 2 heads x 128 x 2 B
    assert _kv_per_sequence(m, 32768) == 8 * 4096 * 2 * 2 * 128 * 2
    # at 32K a decode token scores 4,096 keys per head in every layer
    assert _attention_flops(m, 1, 1, 32767) == pytest.approx(8 * 4 * 8 * 128 * 4096)


def test_gemma_style_local_global_pattern():
    g2 = spec_from_hf_dict(_config("gemma2", sliding_window=4096), name="g2", source="test")
    assert g2.window.layers == (0, 2, 4, 6)                        # every other layer local
    g3 = spec_from_hf_dict(_config("gemma3_text", num_hidden_layers=12, sliding_window=1024,
                                   sliding_window_pattern=6), name="g3", source="test")
    assert g3.num_attention_layers == 2 and g3.num_local_layers == 10   # 5 local : 1 global
    assert g3.window.layers == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10)           # layers 5 and 11 global
    # a Gemma 3 config that omits the pattern gets the HF default of 6
    g3d = spec_from_hf_dict(_config("gemma3_text", num_hidden_layers=12, sliding_window=1024), name="g", source="t")
    assert g3d.window == g3.window


def test_chunked_attention_pairs_and_visible_cache():
    m = spec_from_hf_dict(_config("llama4_text", attention_chunk_size=8192, no_rope_layers=[1, 1, 1, 0] * 2),
                          name="l4", source="test")
    assert m.window.kind == "chunked" and m.window.layers == (0, 1, 2, 4, 5, 6)
    # a 10,000-token prompt: one full chunk 8192 x 8193 / 2 plus a partial one 1808 x 1809 / 2
    assert float(m.window.pairs(10_000, 0)) == 8192 * 8193 / 2 + 1808 * 1809 / 2
    # the next token sees only its chunk: 10,000 mod 8,192 = 1,808 cached tokens, 1,809 keys
    assert float(m.window.visible_cached(10_000)) == 1808
    assert float(m.window.pairs(1, 10_000)) == 1809


@pytest.mark.parametrize("ctx,q", [(0, 1), (0, 37), (90, 1), (50, 60)])
def test_window_wider_than_context_is_full_attention(ctx, q):
    m = spec_from_hf_dict(_config("mistral", sliding_window=4096), name="m", source="test")
    assert float(m.window.pairs(q, ctx)) == q * ctx + q * (q + 1) / 2


def test_windowed_ops_cost_no_more_than_full():
    full = spec_from_hf_dict(_config("mistral"), name="f", source="test")
    slid = spec_from_hf_dict(_config("mistral", sliding_window=512), name="s", source="test")
    ctx = np.array([10.0, 511, 512, 5000, 100_000])
    assert np.all(_attention_flops(slid, 1, 1, ctx) <= _attention_flops(full, 1, 1, ctx) + 1e-6)


def test_multimodal_config_refused_without_warnings():
    cfg = _config("llama4", vision_config={"hidden_size": 1408}, text_config={"model_type": "llama4_text"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match=r"multimodal; its vision encoder \(vision_config\) is not modelled"):
            spec_from_hf_dict(cfg, name="x", source="test", origin="cfg.json")


def test_multimodal_config_cli_exit_2_one_line(tmp_path):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config("qwen2_5_vl", vision_config={"depth": 32})))
    res = CliRunner().invoke(app, ["models", "show", str(path)])
    assert res.exit_code == 2
    assert "vision encoder" in res.output and "Traceback" not in res.output
