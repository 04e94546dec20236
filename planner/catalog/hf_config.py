"""Read a local HuggingFace ``config.json`` into a ModelSpec.

Supported ``model_type`` families: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, qwen3_next,
qwen3_5_text / qwen3_5_moe_text (Qwen3.5 / 3.6: a multimodal checkpoint's ``text_config``),
deepseek_v2/v3, kimi_k2, kimi_linear, bloom, gpt_oss, gemma2, gemma3_text, llama4_text, opt. Local
attention is read from ``layer_types`` (``sliding_attention`` / ``chunked_attention``), else from
``sliding_window`` (all layers, Mistral; Gemma's every-other / ``sliding_window_pattern``) or
``attention_chunk_size`` with ``no_rope_layers`` (Llama 4: chunked layers, global NoPE ones).
Multimodal configs (a vision or audio encoder) are refused, naming the encoder. Anything else,
or a config missing a field these need, gets an ``InputError`` naming the field. Nothing is ever
downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.catalog.model import MAX_LAYERS, MLA, AttentionWindow, LinearAttention, ModelSpec, MoE
from planner.errors import InputError

_LLAMA_LIKE = {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "llama4_text"}
_DEEPSEEK_LIKE = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
# Gated DeltaNet hybrids (3 linear : 1 gated full-attention layer): Qwen3-Next and Qwen3.5's text models
_QWEN_HYBRID = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
SUPPORTED = sorted(_LLAMA_LIKE | _DEEPSEEK_LIKE | _QWEN_HYBRID | {"mixtral", "qwen3_moe", "kimi_linear", "bloom",
                                                                  "gpt_oss", "opt"})
# Keys that mark a multimodal checkpoint: the catalog models the text decoder only.
_ENCODERS = {"vision_config": "vision encoder", "audio_config": "audio encoder",
             "vision_tower": "vision encoder", "mm_projector_type": "multimodal projector"}


class _Config:
    """Typed access to config keys; a missing or ill-typed key names itself in the error."""

    def __init__(self, data: dict[str, Any], origin: str):
        self.data, self.origin = data, origin

    def int(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            if key in self.data and self.data[key] is not None:
                value = self.data[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InputError(f"{self.origin}: field {key!r} must be a non-negative integer, got {value!r}")
                return value
        if default is not None:
            return default
        raise InputError(f"{self.origin}: missing field {keys[0]!r} needed for model_type "
                         f"{self.data.get('model_type')!r}")

    def opt_int(self, key: str) -> int | None:
        return self.int(key) if self.data.get(key) is not None else None

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def spec_from_hf_dict(data: dict[str, Any], *, name: str, source: str, origin: str = "config") -> ModelSpec:
    """Build a ModelSpec from a parsed ``config.json`` mapping; a value the model's parts refuse
    (0 experts, more experts per token than experts, ...) is an ``InputError`` naming it."""
    try:
        return _spec_from_hf_dict(data, name=name, source=source, origin=origin)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise InputError(f"{origin}: inconsistent config" + (f" ({field})" if field else "") + f": {msg}") from None


def _spec_from_hf_dict(data: dict[str, Any], *, name: str, source: str, origin: str) -> ModelSpec:
    if not isinstance(data, dict):
        raise InputError(f"{origin}: a config.json must hold a JSON object")
    c = _Config(data, origin)
    model_type = data.get("model_type")
    if model_type is None:
        raise InputError(f"{origin}: missing field 'model_type'")
    _refuse_multimodal(data, origin)
    quant = data.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise InputError(f"{origin}: field 'quantization_config' is a {type(quant).__name__}; expected an object "
                         "(e.g. {\"quant_method\": \"fp8\"}) or no such field")
    if model_type not in SUPPORTED:
        raise InputError(f"{origin}: field 'model_type' is {model_type!r}, which is not supported; "
                         f"supported: {', '.join(SUPPORTED)}")
    hidden = c.int("hidden_size", "n_embed")
    heads = c.int("num_attention_heads", "n_head")
    if heads and hidden % heads and c.get("head_dim") is None and model_type not in _DEEPSEEK_LIKE | {"kimi_linear"}:
        raise InputError(f"{origin}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}, and no "
                         "head_dim says how wide a head is (transformers refuses such a config too)")
    spec: dict[str, Any] = dict(
        name=name, source=source, family=model_type,
        num_layers=c.int("num_hidden_layers", "n_layer"), hidden_size=hidden,
        vocab_size=c.int("vocab_size"), tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        num_heads=heads, num_kv_heads=c.int("num_key_value_heads", default=heads),
        head_dim=c.int("head_dim", default=hidden // heads if heads else 0),
        intermediate_size=c.int("intermediate_size", default=4 * hidden),
        native_dtype=_native_dtype(data),
        unquantized=_unquantized(data),
        max_context=c.opt_int("max_position_embeddings") or c.opt_int("model_max_length"),
        qk_norm=model_type in {"qwen3", "qwen3_moe"} | _QWEN_HYBRID,
    )
    if not 0 < spec["num_layers"] <= MAX_LAYERS:     # before any per-layer list is built
        raise InputError(f"{origin}: num_hidden_layers is {spec['num_layers']:.3g}; expected 1 to {MAX_LAYERS:,}")
    if model_type == "bloom":
        spec.update(gated_ffn=False, biases=True, embedding_norm=True, num_kv_heads=heads,
                    tie_word_embeddings=True)
    if model_type == "gpt_oss":   # every layer MoE; expert width = intermediate_size; MXFP4 experts
        spec["moe"] = MoE(num_experts=c.int("num_local_experts"),
                          experts_per_token=c.int("num_experts_per_tok", "experts_per_token"),
                          expert_intermediate_size=c.int("intermediate_size"))
    spec["window"] = _window(c, model_type, spec["num_layers"])
    if model_type == "opt":     # MHA, ReLU MLP of ffn_dim with biases, tied embeddings (learned positions not counted)
        spec.update(gated_ffn=False, biases=True, num_kv_heads=heads, intermediate_size=c.int("ffn_dim"),
                    tie_word_embeddings=bool(c.get("tie_word_embeddings", True)))
    if model_type == "mixtral" or model_type == "qwen3_moe":
        every = c.int("decoder_sparse_step", default=1)
        only_dense = tuple(c.get("mlp_only_layers") or ())
        spec["moe"] = MoE(
            num_experts=c.int("num_local_experts", "num_experts"),
            experts_per_token=c.int("num_experts_per_tok"),
            expert_intermediate_size=c.int("moe_intermediate_size", "intermediate_size"),
            dense_layers=tuple(i for i in range(spec["num_layers"]) if i in only_dense or (i + 1) % every),
        )
    if model_type in _DEEPSEEK_LIKE or model_type == "kimi_linear":
        spec["mla"] = MLA(
            q_lora_rank=c.opt_int("q_lora_rank"), kv_lora_rank=c.int("kv_lora_rank"),
            qk_nope_head_dim=c.int("qk_nope_head_dim"), qk_rope_head_dim=c.int("qk_rope_head_dim"),
            v_head_dim=c.int("v_head_dim"),
        )
        spec["num_kv_heads"] = heads
        spec["head_dim"] = spec["mla"].qk_nope_head_dim + spec["mla"].qk_rope_head_dim
        spec["moe"] = MoE(
            num_experts=c.int("n_routed_experts", "num_experts"),
            experts_per_token=c.int("num_experts_per_tok", "num_experts_per_token"),
            expert_intermediate_size=c.int("moe_intermediate_size"),
            num_shared_experts=c.int("n_shared_experts", "num_shared_experts", default=0),
            shared_intermediate_size=c.int("moe_intermediate_size"),
            dense_layers=tuple(range(c.int("first_k_dense_replace", default=0))),
            num_groups=c.opt_int("n_group"), groups_per_token=c.opt_int("topk_group"),
        )
    if model_type in _QWEN_HYBRID:
        n_layers = spec["num_layers"]
        spec["attention_output_gate"] = bool(c.get("attn_output_gate", True))
        if model_type != "qwen3_5_text":       # the MoE ones; Qwen3.5's dense models keep the SwiGLU FFN
            spec["moe"] = MoE(
                num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
                expert_intermediate_size=c.int("moe_intermediate_size"),
                num_shared_experts=1 if c.get("shared_expert_intermediate_size") else 0,
                shared_intermediate_size=c.int("shared_expert_intermediate_size", default=0),
                dense_layers=tuple(c.get("mlp_only_layers") or ()),
            )
        spec["state_dtype"] = _state_dtype(c)
        spec["linear_attention"] = LinearAttention(
            kind="gated_deltanet", layers=_linear_layers(c, n_layers),
            num_key_heads=c.int("linear_num_key_heads"), num_value_heads=c.int("linear_num_value_heads"),
            key_head_dim=c.int("linear_key_head_dim"), value_head_dim=c.int("linear_value_head_dim"),
            conv_kernel=c.int("linear_conv_kernel_dim"),
        )
    if model_type == "kimi_linear":
        la = c.get("linear_attn_config")
        if not isinstance(la, dict):
            raise InputError(f"{origin}: missing field 'linear_attn_config' needed for model_type 'kimi_linear'")
        lac = _Config(la, f"{origin} linear_attn_config")
        kda = la.get("kda_layers")
        if not isinstance(kda, list) or not all(isinstance(i, int) and i >= 1 for i in kda):
            raise InputError(f"{origin}: field 'linear_attn_config.kda_layers' must list 1-based layer numbers")
        d = lac.int("head_dim")
        spec["linear_attention"] = LinearAttention(
            kind="kda", layers=tuple(i - 1 for i in kda), num_key_heads=lac.int("num_heads"),
            num_value_heads=lac.int("num_heads"), key_head_dim=d, value_head_dim=d,
            conv_kernel=lac.int("short_conv_kernel_size"), gate_rank=d,
        )
    return ModelSpec(**spec)


_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _state_dtype(c: _Config) -> str | None:
    """The recurrent-state format a checkpoint declares (``mamba_ssm_dtype``), or None."""
    v = c.get("mamba_ssm_dtype")
    if v is None:
        return None
    if v not in _STATE_DTYPES:
        raise InputError(f"{c.origin}: field 'mamba_ssm_dtype' is {v!r}; expected one of {', '.join(_STATE_DTYPES)}")
    return _STATE_DTYPES[v]


def _linear_layers(c: _Config, n_layers: int) -> tuple[int, ...]:
    """Gated DeltaNet layers of a Qwen hybrid: ``layer_types`` (``linear_attention`` /
    ``full_attention``, Qwen3.5) where given, else all but every ``full_attention_interval``-th."""
    types = c.get("layer_types")
    if isinstance(types, list) and types:
        bad = sorted({t for t in types if t not in ("linear_attention", "full_attention")}, key=str)
        if len(types) != n_layers or bad:
            raise InputError(f"{c.origin}: field 'layer_types' must list 'linear_attention' / 'full_attention' "
                             f"for each of the {n_layers} layers" + (f" (got {bad[0]!r})" if bad else
                                                                     f" (it lists {len(types)})"))
        return tuple(i for i, t in enumerate(types) if t == "linear_attention")
    every = c.int("full_attention_interval")
    return tuple(i for i in range(n_layers) if (i + 1) % every)


def _refuse_multimodal(data: dict[str, Any], origin: str) -> None:
    """Refuse configs with an encoder the catalog cannot model, naming it (and the way out)."""
    found = [f"{what} ({key})" for key, what in _ENCODERS.items() if data.get(key)]
    if found:
        raise InputError(
            f"{origin}: model_type {data.get('model_type')!r} is multimodal; its {', '.join(found)} is not "
            "modelled (the catalog covers decoder-only text models). To plan its language model alone, "
            "save the config's 'text_config' as its own config.json")


def _window(c: _Config, model_type: str, n_layers: int) -> AttentionWindow | None:
    """Local-attention layers of a config, or None (every layer attends to the whole context)."""
    types = c.get("layer_types")
    chunk = c.get("attention_chunk_size")
    if isinstance(types, list) and types:
        if len(types) != n_layers:
            raise InputError(f"{c.origin}: field 'layer_types' lists {len(types)} layers, not {n_layers}")
        local = tuple(i for i, t in enumerate(types) if t in ("sliding_attention", "chunked_attention"))
        kind = "chunked" if "chunked_attention" in types else "sliding"
    elif model_type == "llama4_text" and chunk:
        nope = c.get("no_rope_layers") or []          # 1 = RoPE + chunked, 0 = NoPE + global
        local = tuple(i for i, r in enumerate(nope) if r) if nope else tuple(
            i for i in range(n_layers) if (i + 1) % 4)
        kind = "chunked"
    elif c.get("sliding_window") and c.get("use_sliding_window", True):
        # every pattern-th layer is global (HF defaults: Gemma 2 alternates, Gemma 3 is 5 local : 1)
        pattern = c.get("sliding_window_pattern") or {"gemma2": 2, "gemma3_text": 6}.get(model_type, 1)
        local = tuple(i for i in range(n_layers) if pattern == 1 or (i + 1) % int(pattern))
        kind = "sliding"
    else:
        return None
    if not local:
        return None
    size = c.int("attention_chunk_size") if kind == "chunked" else c.int("sliding_window")
    return AttentionWindow(kind=kind, size=size, layers=local, sink_logits=model_type == "gpt_oss")


def _native_dtype(data: dict[str, Any]) -> str:
    quant = data.get("quantization_config") or {}
    if quant.get("quant_method") == "fp8":
        return "fp8"
    if quant.get("quant_method") == "mxfp4":
        return "fp4"
    dtype = str(data.get("torch_dtype") or data.get("dtype") or "bfloat16")
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(dtype, "bf16")


def _unquantized(data: dict[str, Any]) -> tuple[str, ...]:
    """Module classes the checkpoint's quantization config keeps unquantized (BF16): its list of
    excluded modules under any of the names the quantizers write (HF ``modules_to_not_convert``,
    llm-compressor ``ignore``, ModelOpt ``exclude_modules``, vLLM ``ignored_layers``); attention
    where a pattern names the attention block. Without such a list, the LM head (the default)."""
    quant = data.get("quantization_config") or {}
    nested = quant.get("quantization") if isinstance(quant.get("quantization"), dict) else {}
    names = next((v for src in (quant, nested) for key in ("modules_to_not_convert", "ignore", "exclude_modules",
                                                              "ignored_layers")
                  if isinstance(v := src.get(key), list)), None)
    if names is None:
        return ("lm_head",)
    text = [str(n) for n in names]
    kept = [cls for cls, marks in (("attention", ("self_attn", "attention")), ("lm_head", ("lm_head",)))
            if any(mark in n for n in text for mark in marks)]
    return tuple(kept)


class _NonFinite(Exception):
    pass


def _no_constant(name: str) -> float:
    raise _NonFinite(name)


def model_from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a local HuggingFace ``config.json`` (never downloaded)."""
    from planner.checks import as_path, is_dir

    path = as_path(path, "a config.json")
    if is_dir(path):
        path = path / "config.json"
    from planner.yamlio import read_text

    try:
        data = json.loads(read_text(path, "config.json"), parse_constant=_no_constant)
    except _NonFinite as e:
        raise InputError(f"{path}: {e} is not a finite number (config.json values are finite)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
    default = path.parent.name if path.name == "config.json" else path.stem
    return spec_from_hf_dict(data, name=name or default.lower(), source=f"HuggingFace config.json at {path}",
                             origin=str(path))
