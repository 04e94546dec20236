"""ModelSpec: the architecture facts the roofline engine needs, for dense, GQA, MLA, MoE and
hybrid (linear + full attention) transformers.

Layer ``i`` (0-based) has a *mixer* (full attention, MLA, or linear attention) and an *FFN*
(dense or mixture-of-experts); ``layer_kinds()`` groups identical layers so the engine builds
each kind once and multiplies by its count.
"""

from __future__ import annotations

import functools
from collections import Counter
from enum import Enum
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from planner.frozen import Frozen

MAX_LAYERS = 100_000
"""The most layers a model may have: ~100x the deepest served today, which bounds per-layer work."""

class Mixer(str, Enum):
    attention = "attention"   # softmax attention over a KV cache (MHA/GQA/MQA, or MLA)
    local = "local"           # softmax attention limited to a window or chunk (AttentionWindow)
    linear = "linear"         # linear attention with a constant-size recurrent state


class FFNKind(str, Enum):
    dense = "dense"
    moe = "moe"


class MLA(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): the cache holds one latent per token."""

    q_lora_rank: int | None = Field(gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(ge=0)
    v_head_dim: int = Field(gt=0)


class MoE(Frozen):
    num_experts: int = Field(gt=0, le=1 << 20)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(0, ge=0)
    shared_intermediate_size: int = Field(0, ge=0, description="per shared expert")
    dense_layers: tuple[int, ...] = Field((), description="0-based layers whose FFN is dense")
    num_groups: int | None = Field(None, gt=0, description="expert groups (DeepSeek n_group)")
    groups_per_token: int | None = Field(None, gt=0, description="groups a token may route to (DeepSeek "
                                         "topk_group: node-limited routing, V3 paper Sec. 2.1.2)")

    @model_validator(mode="after")
    def _check(self) -> MoE:
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token exceeds num_experts")
        return self


class LinearAttention(Frozen):
    """Linear-attention layers (Gated DeltaNet, Kimi Delta Attention): per-sequence state of
    ``num_value_heads x key_head_dim x value_head_dim`` plus a short-convolution state."""

    kind: str
    layers: tuple[int, ...] = Field(description="0-based indices of the linear layers")
    num_key_heads: int = Field(gt=0)
    num_value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(gt=0)
    gate_rank: int = Field(0, ge=0, description="low-rank gate projections (KDA: 128); 0 = none")

    @property
    def conv_channels(self) -> int:
        """Channels carrying a short-conv state: q, k (key dims) and v (value dims)."""
        return 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim

    @property
    def state_elements(self) -> int:
        """Recurrent + conv state elements of one layer for one sequence."""
        return self.recurrent_elements + self.conv_elements

    @property
    def recurrent_elements(self) -> int:
        """The ``heads x dk x dv`` recurrent state of one layer for one sequence."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim

    @property
    def conv_elements(self) -> int:
        """The short causal convolution's last ``kernel - 1`` inputs of one layer for one sequence."""
        return self.conv_channels * (self.conv_kernel - 1)


class AttentionWindow(Frozen):
    """Local attention on some layers (their KV cache stops growing with the context).

    * ``sliding`` (Mistral, gpt-oss, Gemma local layers): the token at 0-based position ``p``
      attends to positions ``max(0, p - size + 1) .. p``, i.e. ``min(p + 1, size)`` keys;
    * ``chunked`` (Llama 4 local layers): it attends to the tokens of its own chunk of ``size``
      before it, ``p mod size + 1`` keys.

    ``sink_logits`` records gpt-oss's learned per-head attention sinks: one extra logit in the
    softmax denominator, no cached tokens and negligible FLOPs."""

    kind: Literal["sliding", "chunked"] = "sliding"
    size: int = Field(gt=0, description="window (sliding) or chunk (chunked) length in tokens")
    layers: tuple[int, ...] = Field(description="0-based indices of the local layers")
    sink_logits: bool = False

    def keys_seen(self, n):
        """Sum over the first ``n`` positions of the keys each attends to (closed form, arrays):
        sliding ``n(n+1)/2`` up to ``size``, then ``size`` per further token; chunked: every
        full chunk adds ``size(size+1)/2`` and the partial one ``r(r+1)/2``."""
        n = np.asarray(n, dtype=float)
        w = float(self.size)
        if self.kind == "sliding":
            return np.where(n <= w, n * (n + 1) / 2, w * (w + 1) / 2 + (n - w) * w)
        full, r = np.floor(n / w), np.mod(n, w)
        return full * w * (w + 1) / 2 + r * (r + 1) / 2

    def pairs(self, q_len, ctx):
        """Query-key pairs of ``q_len`` new tokens after ``ctx`` cached ones (per sequence, head)."""
        ctx = np.asarray(ctx, dtype=float)
        return self.keys_seen(ctx + np.asarray(q_len, dtype=float)) - self.keys_seen(ctx)

    def visible_cached(self, ctx):
        """Cached tokens the next token can see (the KV a decode step reads)."""
        ctx = np.asarray(ctx, dtype=float)
        return np.minimum(ctx, self.size) if self.kind == "sliding" else np.mod(ctx, self.size)


class ModelSpec(Frozen):
    """Architecture of a decoder-only LLM, as read from its HuggingFace ``config.json``."""

    name: str
    source: str = Field(min_length=1)
    family: str
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0, description="dense FFN width")
    gated_ffn: bool = Field(True, description="SwiGLU (3 matrices) vs. GeLU MLP (2)")
    biases: bool = Field(False, description="linear layers carry biases (BLOOM)")
    qk_norm: bool = Field(False, description="per-head RMSNorm on q and k (Qwen3)")
    attention_output_gate: bool = Field(False, description="sigmoid gate on attention output (Qwen3-Next)")
    embedding_norm: bool = Field(False, description="LayerNorm after the embedding (BLOOM)")
    mla: MLA | None = None
    moe: MoE | None = None
    linear_attention: LinearAttention | None = None
    state_dtype: Literal["fp32", "bf16", "fp16"] | None = Field(
        None, description="the recurrent-state format the checkpoint declares (config.json mamba_ssm_dtype: "
        "Qwen3.5 float32), which engines that honour it use unless told otherwise")
    state_dtype_set: Literal["fp32", "bf16", "fp16"] | None = Field(
        None, description="the recurrent-state format the deployment sets on its engine (a scenario's "
        "engine.state_dtype: vLLM --mamba-ssm-cache-dtype, SGLang --mamba-ssm-dtype), which beats both the "
        "checkpoint's and the engine's default (ops.engine_state_dtype); None: not set")
    window: AttentionWindow | None = None
    native_dtype: str = "bf16"
    max_context: int | None = None
    unquantized: tuple[Literal["attention", "lm_head"], ...] = Field(
        ("lm_head",), description="modules a quantized checkpoint keeps in BF16 whatever the weight format "
        "(config.json quantization_config: modules_to_not_convert / ignore / exclude_modules). Default the "
        "LM head, as public quantized checkpoints do: DeepSeek-V3's FP8 reference model builds its head in "
        "the default BF16 dtype (deepseek-ai/DeepSeek-V3 inference/model.py), ModelOpt FP8/NVFP4 exports "
        "list lm_head in exclude_modules, gpt-oss lists lm_head and self_attn in modules_to_not_convert")

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        for group, idx in (("moe.dense_layers", self.moe.dense_layers if self.moe else ()),
                           ("linear_attention.layers",
                            self.linear_attention.layers if self.linear_attention else ()),
                           ("window.layers", self.window.layers if self.window else ())):
            bad = [i for i in idx if not 0 <= i < self.num_layers]
            if bad:
                raise ValueError(f"{group} has indices outside 0..{self.num_layers - 1}: {bad}")
        if self.window is not None and self.mla is not None:
            raise ValueError("windowed MLA layers are not modelled")
        return self

    def mixer(self, layer: int) -> Mixer:
        la, win = self.linear_attention, self.window
        if la is not None and layer in la.layers:
            return Mixer.linear
        return Mixer.local if win is not None and layer in win.layers else Mixer.attention

    def ffn(self, layer: int) -> FFNKind:
        return FFNKind.moe if self.moe is not None and layer not in self.moe.dense_layers else FFNKind.dense

    def layer_kinds(self) -> dict[tuple[Mixer, FFNKind], int]:
        """Count of layers per (mixer, FFN) kind, e.g. DeepSeek-V3: 3 dense + 58 MoE (memoized on
        what decides it: the roofline asks for it on every step it builds)."""
        la, win = self.linear_attention, self.window
        return dict(_layer_kinds(self.num_layers, tuple(la.layers) if la is not None else None,
                                 tuple(win.layers) if win is not None else None,
                                 tuple(self.moe.dense_layers) if self.moe is not None else None))

    @property
    def num_attention_layers(self) -> int:
        """Full-attention layers: their KV cache grows with every token of the context."""
        return sum(n for (m, _), n in self.layer_kinds().items() if m is Mixer.attention)

    @property
    def num_local_layers(self) -> int:
        """Windowed/chunked layers: each holds at most ``window.size`` tokens per sequence."""
        return sum(n for (m, _), n in self.layer_kinds().items() if m is Mixer.local)

    @property
    def kv_elements_per_token_layer(self) -> int:
        """Elements cached per token in one attention layer: K and V heads, or MLA's latent."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def attention_kind(self) -> str:
        if self.mla is not None:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"


@functools.lru_cache(maxsize=256)
def _layer_kinds(num_layers: int, linear: tuple[int, ...] | None, local: tuple[int, ...] | None,
                 dense: tuple[int, ...] | None) -> tuple[tuple[tuple[Mixer, FFNKind], int], ...]:
    """``ModelSpec.layer_kinds`` from the layer index lists (``None``: no such layers group)."""
    def mixer(i: int) -> Mixer:
        if linear is not None and i in linear:
            return Mixer.linear
        return Mixer.local if local is not None and i in local else Mixer.attention

    def ffn(i: int) -> FFNKind:
        return FFNKind.moe if dense is not None and i not in dense else FFNKind.dense

    return tuple(Counter((mixer(i), ffn(i)) for i in range(num_layers)).items())
