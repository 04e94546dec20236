import json

import pytest

import planner
from planner.errors import InputError
from planner.perf.params import parameter_counts

REQUIRED = ["llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "bloom-176b", "mixtral-8x7b",
            "qwen3-235b-a22b", "deepseek-v3"]

# Published / independently derived totals (shared/data/hf-configs/README.md table 4.3: HF totals,
# BLOOM model card 176,247,271,424, Kimi-Linear = its summed safetensors listing).
PARAMS = {
    "llama-2-70b": (68_976_648_192, 68_976_648_192),
    "llama-3.1-8b": (8_030_261_248, 8_030_261_248),
    "llama-3.1-70b": (70_553_706_496, 70_553_706_496),
    "llama-3.1-405b": (405_853_388_800, 405_853_388_800),
    "bloom-176b": (176_247_271_424, 176_247_271_424),
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248),
    "qwen3-235b-a22b": (235_093_634_560, 22_190_763_520),
    "qwen3-32b": (32_762_123_264, 32_762_123_264),
    "deepseek-v3": (671_026_419_200, 37_552_297_472),
    "kimi-k2": (1_026_408_232_448, 32_861_500_928),
    "qwen3-next-80b-a3b": (79_674_391_296, 3_874_929_408),
    "kimi-linear-48b-a3b": (49_122_681_728, 3_484_459_904),
}


def test_required_models_and_a_hybrid():
    names = planner.list_models()
    assert set(REQUIRED) <= set(names)
    assert any(planner.model(n).linear_attention is not None for n in names)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_parameter_counts_match_published(name):
    # Exact for dense and GQA/MoE models. DeepSeek/Kimi-K2 omit the per-expert router bias
    # (e_score_correction_bias: 256 x 58 = 14,848 params); the hybrids' small gate/conv vectors
    # are approximated: all within 0.01%.
    total, active = parameter_counts(planner.model(name))
    assert total == pytest.approx(PARAMS[name][0], rel=1e-4)
    assert active == pytest.approx(PARAMS[name][1], rel=5e-4)


def test_kv_bytes_per_token_by_hand():
    # Llama-3.1-70B bf16: 80 layers x 8 KV heads x 128 x 2 (K,V) x 2 B
    assert planner.kv_cache_bytes_per_token("llama-3.1-70b") == 80 * 8 * 128 * 2 * 2 == 327_680
    # DeepSeek-V3 MLA bf16: 61 layers x (512 latent + 64 rope) x 2 B
    assert planner.kv_cache_bytes_per_token("deepseek-v3") == 61 * (512 + 64) * 2 == 70_272
    # BLOOM-176B is MHA: 70 x 112 heads x 128 x 2 x 2 B
    assert planner.kv_cache_bytes_per_token("bloom-176b") == 70 * 112 * 128 * 2 * 2
    # Qwen3-Next: only the 12 full-attention layers cache per token: 12 x 2 KV heads x 256 x 2 x 2 B
    assert planner.kv_cache_bytes_per_token("qwen3-next-80b-a3b") == 12 * 2 * 256 * 2 * 2 == 24_576
    # fp8 KV halves it
    assert planner.kv_cache_bytes_per_token("llama-3.1-70b", "fp8") == 163_840


def test_hybrid_layer_layout():
    q = planner.model("qwen3-next-80b-a3b")
    assert q.num_attention_layers == 12 and q.mixer(3).value == "attention" and q.mixer(0).value == "linear"
    k = planner.model("kimi-linear-48b-a3b")
    assert [i for i in range(k.num_layers) if k.mixer(i).value == "attention"] == [3, 7, 11, 15, 19, 23, 26]
    # Per-sequence recurrent + conv state (elements), shared/data/hf-configs README 4.4
    assert q.linear_attention.state_elements == 524_288 + 24_576
    assert k.linear_attention.state_elements == 524_288 + 36_864


def test_deepseek_dense_first_layers():
    m = planner.model("deepseek-v3")
    kinds = {(a.value, f.value): n for (a, f), n in m.layer_kinds().items()}
    assert kinds == {("attention", "dense"): 3, ("attention", "moe"): 58}
    assert m.moe.num_shared_experts == 1 and m.mla.kv_lora_rank == 512


@pytest.mark.parametrize("fname,catalog", [
    ("mistralai--Mixtral-8x7B-v0.1.json", "mixtral-8x7b"),
    ("Qwen--Qwen3-235B-A22B.json", "qwen3-235b-a22b"),
    ("deepseek-ai--DeepSeek-V3.json", "deepseek-v3"),
    ("Qwen--Qwen3-Next-80B-A3B-Thinking.json", "qwen3-next-80b-a3b"),
    ("moonshotai--Kimi-Linear-48B-A3B-Instruct.json", "kimi-linear-48b-a3b"),
    ("openai--gpt-oss-120b.json", "gpt-oss-120b"),
])
def test_local_config_json_matches_catalog(hf_configs, fname, catalog):
    mine = planner.model_from_hf_config(hf_configs / fname)
    ref = planner.model(catalog)
    assert mine.model_dump(exclude={"name", "source"}) == ref.model_dump(exclude={"name", "source"})


def test_unsupported_family_is_named(tmp_path, hf_configs):
    cfg = json.loads((hf_configs / "openai--gpt-oss-120b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "model_type": "falcon_mamba"}))
    with pytest.raises(InputError, match="'falcon_mamba', which is not supported"):
        planner.model_from_hf_config(path)


def test_missing_field_is_named(tmp_path, hf_configs):
    cfg = json.loads((hf_configs / "deepseek-ai--DeepSeek-V3.json").read_text())
    del cfg["kv_lora_rank"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="missing field 'kv_lora_rank'"):
        planner.model_from_hf_config(p)


def test_bad_json_has_line(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{\n  "model_type": "llama",\n  oops\n}')
    with pytest.raises(InputError, match=r"config\.json:3: not valid JSON"):
        planner.model_from_hf_config(p)


def test_inconsistent_heads(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(model_type="llama", hidden_size=4096, num_attention_heads=32,
                                 num_key_value_heads=5, num_hidden_layers=2, vocab_size=100,
                                 intermediate_size=1000)))
    with pytest.raises(InputError, match=r"inconsistent config: num_heads 32 is not a multiple of num_kv_heads 5$"):
        planner.model_from_hf_config(p)


def test_heads_that_do_not_split_the_width_need_a_head_dim(tmp_path):
    """4,096 over 30 heads is no whole head: without head_dim the width of a head is unknown (it
    was silently floored to 136); with it the config is read as given."""
    cfg = dict(model_type="llama", hidden_size=4096, num_attention_heads=30, num_hidden_layers=2, vocab_size=100,
               intermediate_size=1000)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="hidden_size 4096 is not a multiple of num_attention_heads 30"):
        planner.model_from_hf_config(p)
    p.write_text(json.dumps(cfg | {"head_dim": 128}))
    assert planner.model_from_hf_config(p).head_dim == 128


def test_unknown_model_suggests():
    with pytest.raises(InputError, match="did you mean 'deepseek-v3'"):
        planner.model("deepseek-v4")


@pytest.mark.parametrize("quant, kept", [
    (None, ("lm_head",)),                                                   # the default: every public checkpoint
    ({"quant_method": "fp8", "fmt": "e4m3"}, ("lm_head",)),                 # DeepSeek-V3: no list, BF16 head
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]},
     ("attention", "lm_head")),                                             # gpt-oss
    ({"quant_method": "compressed-tensors", "ignore": ["lm_head"]}, ("lm_head",)),   # llm-compressor
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "exclude_modules": []}}, ()),
])
def test_unquantized_modules_from_the_quantization_config(tmp_path, quant, kept):
    cfg = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
               num_hidden_layers=2, vocab_size=1000, intermediate_size=1000)
    if quant is not None:
        cfg["quantization_config"] = quant
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert planner.model_from_hf_config(p).unquantized == kept


def test_quantization_config_that_is_not_an_object_is_named(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                                 num_hidden_layers=2, vocab_size=1000, intermediate_size=1000,
                                 quantization_config="fp8")))
    with pytest.raises(InputError, match="field 'quantization_config' is a str; expected an object"):
        planner.model_from_hf_config(p)


def test_qwen35_hybrids_from_their_text_configs():
    """Qwen3.5's text models (a multimodal checkpoint's text_config): Gated DeltaNet layers where
    layer_types says linear_attention, gated full attention (head dim 256, q/k norms) on every
    4th, 512 / 256 routed experts plus one shared. Totals come within 1.5% of the names (which
    count the vision tower too); KV per token and recurrent state by hand."""
    big, small = planner.model("qwen3.5-397b-a17b"), planner.model("qwen3.5-35b-a3b")
    assert len(big.linear_attention.layers) == 45 and big.num_attention_layers == 15
    assert small.num_attention_layers == 10 and small.mixer(3).value == "attention" and small.mixer(0).value == "linear"
    assert big.attention_output_gate and big.qk_norm and big.moe.num_experts == 512
    total, active = parameter_counts(big)
    assert total == pytest.approx(397e9, rel=0.015) and active == pytest.approx(17e9, rel=0.03)
    total, _ = parameter_counts(small)
    assert total == pytest.approx(35e9, rel=0.015)
    # 10 full-attention layers x 2 KV heads x 256 x (K, V) x 2 B
    assert planner.kv_cache_bytes_per_token("qwen3.5-35b-a3b") == 10 * 2 * 256 * 2 * 2 == 20_480
    # per GDN layer: 32 value heads x 128 x 128 state, conv over (2 x 16 + 32) x 128 channels x 3
    assert small.linear_attention.state_elements == 524_288 + 24_576


def test_qwen36_dense_hybrid():
    """Qwen3.6-27B, the dense member of the Qwen3.5/3.6 text family: 48 Gated DeltaNet and 16 gated
    full-attention layers (every 4th), a dense 17,408-wide SwiGLU FFN, FP32 recurrent states as its
    config declares. Total within 1.5% of the name; KV and state by hand."""
    m = planner.model("qwen3.6-27b")
    assert len(m.linear_attention.layers) == 48 and m.num_attention_layers == 16 and m.moe is None
    assert m.mixer(3).value == "attention" and m.mixer(2).value == "linear" and m.state_dtype == "fp32"
    total, active = parameter_counts(m)
    assert total == active == pytest.approx(27e9, rel=0.015)
    # 16 full-attention layers x 4 KV heads x 256 x (K, V) x 2 B
    assert planner.kv_cache_bytes_per_token("qwen3.6-27b") == 16 * 4 * 256 * 2 * 2 == 65_536
    # per GDN layer: 48 value heads x 128 x 128 state, conv over (2 x 16 + 48) x 128 channels x 3
    assert m.linear_attention.state_elements == 48 * 128 * 128 + 80 * 128 * 3 == 817_152


def test_qwen35_configs_name_what_is_wrong(tmp_path):
    import yaml

    text = yaml.safe_load((planner.catalog.model_catalog.MODELS_DIR / "qwen3.5-35b-a3b.yaml").read_text())["config"]
    bad = dict(text, layer_types=["linear_attention"] * 39 + ["mamba"])
    p = tmp_path / "config.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="layer_types.*'mamba'"):
        planner.model(str(p))
    wrapper = {"model_type": "qwen3_5_moe", "text_config": text, "vision_config": {"depth": 27}}
    p.write_text(json.dumps(wrapper))
    with pytest.raises(InputError, match="multimodal.*text_config"):
        planner.model(str(p))
    p.write_text(json.dumps(text))
    assert planner.model(str(p)).linear_attention.layers == planner.model("qwen3.5-35b-a3b").linear_attention.layers
