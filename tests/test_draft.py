"""EAGLE-3 draft models: catalog entries, local config.json files and the errors around them."""

import json

import pytest

import planner
from planner.catalog.draft import draft, list_drafts
from planner.errors import InputError


def test_bundled_drafts_read_their_configs():
    assert {"qwen3-235b-a22b-eagle3", "qwen3-32b-eagle3", "llama-3.1-8b-eagle3", "llama-3.1-70b-eagle3",
            "deepseek-v3-eagle3"} <= set(list_drafts())
    d = draft("qwen3-235b-a22b-eagle3")
    assert (d.layer.num_layers, d.layer.hidden_size, d.layer.intermediate_size) == (1, 4096, 24576)
    assert (d.layer.num_heads, d.layer.num_kv_heads, d.layer.head_dim, d.layer.vocab_size) == (64, 4, 128, 32000)
    assert d.fused_hidden == 3 * 4096 and d.weight_dtype.value == "bf16"
    assert draft("qwen3-32b-eagle3").layer.head_dim == 80       # SpecForge's choice, not the target's 128
    # Qwen3-30B-A3B's: the target's width (2,048), 32 / 4 heads of 128, a 6,144-wide MLP
    small = draft("qwen3-30b-a3b-eagle3").layer
    assert (small.hidden_size, small.intermediate_size, small.num_heads, small.num_kv_heads) == (2048, 6144, 32, 4)
    assert draft(None) is None and draft(d) is d
    # fc 3h^2 + q/k/v over 2h + o + SwiGLU MLP + 32,000-row head = 592.4 M (the embedding is the target's)
    h = 4096
    assert d.params == 3 * h * h + 2 * h * (64 + 8) * 128 + 64 * 128 * h + 3 * h * 24576 + h * 32000
    assert round(d.params / 1e6, 1) == 592.4
    for name in list_drafts():      # each bundled draft reads its target's hidden states
        target = {"qwen3-235b-a22b-eagle3": "qwen3-235b-a22b", "qwen3-32b-eagle3": "qwen3-32b",
                  "llama-3.1-8b-eagle3": "llama-3.1-8b", "llama-3.1-70b-eagle3": "llama-3.1-70b",
                  "deepseek-v3-eagle3": "deepseek-v3", "qwen3-30b-a3b-eagle3": "qwen3-30b-a3b"}[name]
        draft(name).check_target(planner.model(target))


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg) if not isinstance(cfg, str) else cfg)
    return p


LLAMA_EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
                "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                "num_hidden_layers": 1, "vocab_size": 128256, "draft_vocab_size": 32000}


def test_local_eagle3_config(tmp_path):
    d = draft(str(_write(tmp_path, LLAMA_EAGLE3)))
    assert d.layer.vocab_size == 32000 and d.target_hidden == 4096 and d.aux_layers == 3
    assert draft(str(tmp_path)).layer.hidden_size == 4096          # a directory holding config.json
    no_draft_vocab = {k: v for k, v in LLAMA_EAGLE3.items() if k != "draft_vocab_size"}
    assert draft(str(_write(tmp_path, no_draft_vocab, "b.json"))).layer.vocab_size == 128256
    wide = LLAMA_EAGLE3 | {"target_hidden_size": 8192, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 9]}}
    assert draft(str(_write(tmp_path, wide, "c.json"))).fused_hidden == 2 * 8192


@pytest.mark.parametrize("cfg, match", [
    ({**LLAMA_EAGLE3, "architectures": ["LlamaForCausalLM"]}, "expected an EAGLE-3 draft"),
    ({**LLAMA_EAGLE3, "architectures": ["DeepseekV3ForCausalLMEagle3"], "model_type": "deepseek_v3"},
     "not a Llama-style EAGLE-3 layer"),
    ({**LLAMA_EAGLE3, "draft_vocab_size": -5}, "'draft_vocab_size' must be a positive integer"),
    ({**LLAMA_EAGLE3, "target_hidden_size": "wide"}, "'target_hidden_size' must be a positive integer"),
    ({k: v for k, v in LLAMA_EAGLE3.items() if k != "hidden_size"}, "missing field 'hidden_size'"),
    ([1, 2], "must hold a JSON object"),
    ({**LLAMA_EAGLE3, "architectures": "LlamaForCausalLMEagle3"}, "must be a list of class names"),
    ("{not json", "not readable JSON"),
])
def test_bad_draft_configs_are_input_errors(tmp_path, cfg, match):
    with pytest.raises(InputError, match=match):
        draft(str(_write(tmp_path, cfg)))


def test_unknown_or_missing_drafts(tmp_path):
    with pytest.raises(InputError, match="unknown draft 'qwen3-eagle'"):
        draft("qwen3-eagle")
    with pytest.raises(InputError, match="not found"):
        draft(str(tmp_path / "nowhere.json"))
    with pytest.raises(InputError, match="empty draft name"):
        draft(" ")


def test_estimate_checks_the_draft_against_the_model():
    kw = dict(tp=1, batch=1, input_len=100, output_len=10)
    with pytest.raises(InputError, match="it is a draft for another model"):
        planner.estimate("llama-3.1-70b", "h100-sxm", mtp_tokens=2, mtp_acceptance=0.5,
                         draft="llama-3.1-8b-eagle3", **kw)
    with pytest.raises(InputError, match="without draft tokens"):
        planner.estimate("llama-3.1-8b", "h100-sxm", draft="llama-3.1-8b-eagle3", **kw)
    e = planner.estimate("llama-3.1-8b", "h100-sxm", mtp_tokens=2, mtp_acceptance=0.5, draft="llama-3.1-8b-eagle3",
                         **kw)
    assert e.draft == "llama-3.1-8b-eagle3"
    names = {r["op"] for r in planner.perf.estimate.operator_breakdown(e)}
    assert {"mtp_qkv_embed", "mtp_fc"} <= names and "mtp_eh_proj" not in names


SCENARIO = """\
name: draft-check
model: llama-3.1-8b
workload: {{rate: 2, input: {{dist: fixed, value: 200}}, output: {{dist: fixed, value: 50}}}}
slo: {{ttft_s: {{p90: 5}}, tpot_s: {{p90: 0.2}}}}
engine: {engine}
search: {{hardware: [h100-sxm], tp: [1]}}
"""


def test_scenario_draft_paths_and_errors(tmp_path):
    from planner.scenario import load_scenario

    (tmp_path / "d").mkdir()
    _write(tmp_path / "d", LLAMA_EAGLE3)
    ok = tmp_path / "ok.yaml"
    ok.write_text(SCENARIO.format(engine="{mtp_tokens: 2, mtp_acceptance: 0.6, draft: d/config.json}"))
    assert load_scenario(ok).engine.speculation.draft.target_hidden == 4096     # relative to the scenario file
    for engine, match in (("{mtp_tokens: 2, mtp_acceptance: 0.6, draft: llama-3.1-70b-eagle3}",
                           "engine.draft.*draft for another model"),
                          ("{mtp_tokens: 2, mtp_acceptance: 0.6, draft: nope-eagle3}", "engine.draft.*unknown draft"),
                          ("{draft: llama-3.1-8b-eagle3}", "engine.draft.*without mtp_tokens")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(SCENARIO.format(engine=engine))
        with pytest.raises(planner.errors.PlannerError, match=match):
            load_scenario(bad)


def test_models_drafts_lists_them():
    import json as _json

    from typer.testing import CliRunner

    from planner.cli import app

    r = CliRunner().invoke(app, ["models", "drafts", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in _json.loads(r.stdout)}
    assert set(rows) == set(list_drafts())
    row = rows["llama-3.1-70b-eagle3"]
    assert row["draft_vocab"] == 32000 and "SpecForge" in row["source"]


def test_draft_weights_take_memory():
    # An EAGLE-3 draft stores its layer, fc and head in BF16 (424.7 M parameters for Llama-3.1-8B's:
    # 849 MB) beside the target; the target's own MTP module (DeepSeek-V3: eh_proj and one MoE
    # block, 11.6 B parameters, its embedding and head shared) adds its block in the model's format:
    # at TP8 in FP8 at least the experts' eighth, 256 x 3 x 7168 x 2048 / 8 bytes, and eh_proj.
    from planner.catalog.hardware import hardware
    from planner.perf.estimate import resolve_dtypes
    from planner.perf.parallel import Layout
    from planner.perf.speculation import Speculation
    from planner.serving.simulate import kv_capacity

    kw = dict(tp=1, batch=8, input_len=2048, output_len=64)
    base = planner.estimate("llama-3.1-8b", "h100-sxm", **kw).memory
    eagle = planner.estimate("llama-3.1-8b", "h100-sxm", mtp_tokens=3, mtp_acceptance=0.7,
                             draft="llama-3.1-8b-eagle3", **kw).memory
    assert eagle.weights_bytes - base.weights_bytes == pytest.approx(2 * draft("llama-3.1-8b-eagle3").params, rel=1e-4)
    assert eagle.max_batch < base.max_batch
    kw = dict(tp=8, batch=8, input_len=2048, output_len=64, weight_dtype="fp8")
    extra = (planner.estimate("deepseek-v3", "h200", mtp_tokens=1, mtp_acceptance=0.8, **kw).memory.weights_bytes
             - planner.estimate("deepseek-v3", "h200", **kw).memory.weights_bytes)
    experts, eh_proj = 256 * 3 * 7168 * 2048 / 8, 2 * 7168 * 7168      # eh_proj is not sharded
    assert experts + eh_proj < extra < 1.15 * experts
    m = planner.model("llama-3.1-8b")
    hw, lay, dt = hardware("h100-sxm"), Layout.of(1, 1, 1), resolve_dtypes(m, "bf16", None)
    free = kv_capacity(m, hw, lay, dt)[0]
    with_draft = kv_capacity(m, hw, lay, dt, Speculation(3, 0.7, draft=draft("llama-3.1-8b-eagle3")))[0]
    assert free - with_draft == pytest.approx(2 * draft("llama-3.1-8b-eagle3").params, rel=1e-4)
