"""Operators as data: the FLOPs and bytes of every operator of one forward step, per device.

One code path serves prefill and decode. A ``Step`` says how many sequences are in the batch, how
many new tokens each brings (``q_len``: the prompt in prefill, 1 in decode) and how many tokens
each already has cached (``ctx``). The layer builders list the operators of each kind of layer
(attention/MLA/linear mixer, dense/MoE FFN) with their FLOPs, bytes moved and collective payloads
on one device; all fields are numpy arrays that broadcast over candidates.

Conventions (per device, per layer):
* a GEMM ``[M, K] x [K, N]`` costs ``2 M K N`` FLOPs and moves weights ``K N`` plus activations
  ``M (K + N)``;
* causal attention of ``q`` new tokens over ``ctx`` cached ones scores
  ``q ctx + q (q + 1) / 2`` query-key pairs per head;
* MoE expert weights are counted only for experts the step's tokens actually hit: with uniform
  routing of ``k`` of ``E`` experts, a given expert is missed by all ``T`` tokens with
  probability ``(1 - k/E)^T``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.model import AttentionWindow, FFNKind, Mixer, ModelSpec
from planner.perf.parallel import Layout

if TYPE_CHECKING:
    from planner.catalog.draft import DraftSpec

# Linear attention (chunked form, chunk 64): state decay + delta-rule update + readout cost
# ~8 dk dv FLOPs per token and head, intra-chunk attention 2*64*(dk + dv) per token and head, the
# short causal conv 2 x kernel per q/k/v channel (Yang et al., Gated DeltaNet, ICLR 2025, Sec. 3;
# a FLOP estimate, not a measured kernel: the profiles' linear_attention fractions are measured
# kernel times over these FLOPs).
LINEAR_CHUNK = 64


def recurrent_state_dtype(kind: str, engine: DType | None = None) -> DType:
    """Format a linear-attention layer's recurrent state (``heads x dk x dv`` per sequence) is
    stored and streamed in. Gated DeltaNet: the engine's (``Efficiency.linear_state_dtype``):
    SGLang keeps it in FP32 by default (``--mamba-ssm-dtype float32``), vLLM in the model's dtype
    unless ``--mamba-ssm-cache-dtype`` says otherwise (``MambaStateDtypeCalculator.
    gated_delta_net_state_dtype``: 'auto' follows the cache dtype, which follows the model's).
    KDA (Kimi Linear): FP32 whatever the setting (vLLM's ``kda_state_dtype``). None: FP32, the
    format the chunked delta-rule kernels accumulate in. The short-conv window follows the KV."""
    if kind == "kda" or engine is None:
        return DType.fp32
    return engine


def engine_state_dtype(model: ModelSpec, eff) -> DType:
    """The format ``eff``'s engine keeps ``model``'s Gated DeltaNet states in: the one the
    deployment sets on the engine (``ModelSpec.state_dtype_set``, a scenario's
    ``engine.state_dtype``), else the checkpoint's declared one (``ModelSpec.state_dtype``) where
    the engine honours it (``Efficiency.linear_state_from_checkpoint``), else the engine's own
    default. (A CLI ``--state-dtype`` reaches ``eff`` instead: ``frameworks.with_state_dtype``.)"""
    if model.state_dtype_set is not None:
        return DType(model.state_dtype_set)
    if eff.linear_state_from_checkpoint and model.state_dtype is not None:
        return DType(model.state_dtype)
    return eff.linear_state_dtype


def states_format(model: ModelSpec, eff) -> DType | None:
    """The format ``model``'s recurrent states are kept in under ``eff``'s engine (KDA's always
    FP32), None for a model without linear-attention layers: what a plan or an estimate reports."""
    if model.linear_attention is None:
        return None
    return recurrent_state_dtype(model.linear_attention.kind, engine_state_dtype(model, eff))


class OpKind(str, Enum):
    gemm = "gemm"
    attention = "attention"
    elementwise = "elementwise"
    all_reduce = "all_reduce"
    all_to_all = "all_to_all"


COMM_KINDS = (OpKind.all_reduce, OpKind.all_to_all)


class Per:
    """A divisor in ``scaled``: the chain divides by ``d`` there."""

    __slots__ = ("d",)

    def __init__(self, d) -> None:
        self.d = d


def _pow2(f) -> bool:
    """Whether every element of the small scalar or array ``f`` is a positive power of two (a
    product by it only moves the exponent, so it rounds nothing). An array's answer is kept for
    the array object (``_POW2``), which the cache holds so its id is not reused: a layout's
    degrees meet every operator of a step."""
    if isinstance(f, (int, float)):
        return f > 0 and math.frexp(f)[0] == 0.5
    if np.size(f) > 4096:
        return False
    if isinstance(f, np.ndarray):
        held = _POW2.get(id(f))
        if held is not None and held[0] is f:
            return held[1]
    out = bool((np.frexp(np.asarray(f, dtype=float))[0] == 0.5).all())   # 0.5: positive powers only
    if isinstance(f, np.ndarray) and not f.flags.writeable:
        if len(_POW2) >= 256:
            _POW2.clear()
        _POW2[id(f)] = (f, out)
    return out


_POW2: dict[int, tuple[np.ndarray, bool]] = {}    # id -> (read-only array, all positive powers of two)


def scaled(x, *factors):
    """``x * f0 * f1 * ...`` evaluated left to right (``Per(d)``: ``/ d`` at that place), with the
    bits of exactly that expression, in fewer passes over a large ``x``: a product or quotient by
    a power of two rounds nothing, so it commutes with every rounding of the chain and is folded
    exactly into another (small) factor; a chain of nothing but powers of two is one product, and
    one of ones returns ``x`` itself. (No operand here comes near overflow or subnormals, where
    scaling by two would round.)"""
    exact, rest = 1.0, []
    for f in factors:
        d = f.d if isinstance(f, Per) else None
        if _pow2(f if d is None else d):
            exact = exact * f if d is None else exact / d
        else:
            rest.append(f)
    if not rest:
        ones = np.all(np.asarray(exact) == 1.0) and np.broadcast_shapes(np.shape(x), np.shape(exact)) == np.shape(x)
        return x if ones else x * exact
    if not (np.ndim(exact) == 0 and exact == 1.0):
        first = rest[0]
        rest[0] = Per(first.d / exact) if isinstance(first, Per) else first * exact
    for k, f in enumerate(rest):
        op = np.divide if isinstance(f, Per) else np.multiply
        f = f.d if isinstance(f, Per) else f
        if k and isinstance(x, np.ndarray) and x.ndim and np.broadcast_shapes(x.shape, np.shape(f)) == x.shape:
            op(x, f, out=x)           # a temporary of this chain: in place
        else:
            x = op(x, f)
    return x


@dataclass(frozen=True)
class DTypes:
    weight: DType = DType.bf16
    kv: DType = DType.bf16
    act: DType = DType.bf16


@dataclass(frozen=True)
class Step:
    """Shapes of one forward step of a whole instance (arrays broadcast)."""

    batch: np.ndarray   # sequences in the step
    q_len: np.ndarray   # new tokens per sequence
    ctx: np.ndarray     # cached tokens per sequence before the step
    # sequences on the busiest attention data-parallel replica over the mean (>= 1; 1: balanced):
    # every MoE layer's all-to-all waits for that replica's attention and its dispatch
    dp_skew: np.ndarray | float = 1.0
    # the new tokens are prompt tokens (a prefill or prefill chunk), not decode or draft-verify
    # tokens: an engine that switches EP kernels by phase (DeepEP auto) runs its throughput ones
    prompt: bool = False
    # prompt steps with attention data parallelism: the most prompt tokens one replica takes in the
    # step (its share of the token budget: SGLang splits --chunked-prefill-size over the DP ranks);
    # inf: a replica takes all of its prompts at once
    replica_tokens: np.ndarray | float = np.inf

    @classmethod
    def of(cls, batch, q_len, ctx, prompt: bool = False) -> Step:
        b, q, c = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (batch, q_len, ctx)))
        for x in (b, q, c):     # broadcast views share memory: never written, and said so (numpy
            x.flags.writeable = False   # warns when a reader asks whether they are writeable)
        return cls(b, q, c, prompt=prompt)

    @classmethod
    def lean(cls, batch, q_len, ctx, dp_skew=1.0, prompt: bool = False, replica_tokens=np.inf) -> Step:
        """Like ``of`` without broadcasting the three to one shape: a scalar prompt length or
        context stays a scalar, so what depends on it alone is computed once, not per load point
        (the same values; only the operators' array shapes are smaller)."""
        return cls(*(np.asarray(x, dtype=float) for x in (batch, q_len, ctx)), dp_skew=dp_skew, prompt=prompt,
                   replica_tokens=replica_tokens)


@dataclass(frozen=True)
class Op:
    """One operator on one device. ``count`` = how many layers of the model contain it."""

    name: str
    kind: OpKind
    count: int
    flops: np.ndarray | float = 0.0
    weight_bytes: np.ndarray | float = 0.0   # weights read by this step
    act_bytes: np.ndarray | float = 0.0
    kv_bytes: np.ndarray | float = 0.0        # KV cache / recurrent state read + written
    comm_bytes: np.ndarray | float = 0.0      # payload sent per device
    group: np.ndarray | int = 1               # devices in the collective
    params: np.ndarray | float = 0.0          # parameters stored on the device (for memory)
    keys: np.ndarray | float = 0.0            # attention: mean keys a new query attends to (0: not FA-shaped)
    remote_bytes: np.ndarray | float = 0.0    # EP all-to-all: the device's tokens once (hidden x bytes each)
    draws: float = 0.0                        # EP all-to-all: scale-up domains a token may target
    imbalance: np.ndarray | float = 1.0       # max/mean load over the devices of an expert-parallel group
    grouped: bool = False                     # a grouped (per-expert) GEMM: MoE experts
    linear: bool = False                      # linear-attention core (chunked delta rule / recurrent update)
    recurrent: bool = False                   # that core in a decode / verify step: the recurrent kernel
    absorbed: np.ndarray | bool = False       # MLA attending in the latent space (Efficiency.attention.mla_decode)
    bulk: np.ndarray | float = 0.0            # EP all-to-all: 1 where the step carries prompt tokens
    weight_dtype: DType | None = None         # GEMM weights kept in this format, not the step's (ModelSpec.unquantized)

    @property
    def mem_bytes(self):
        return self.weight_bytes + self.act_bytes + self.kv_bytes


def _prompt_skew(step: Step, dp) -> np.ndarray | float:
    """Busiest attention replica's prompt tokens over the mean, for a step of ``batch`` prompts of
    ``q_len`` tokens (a fraction: one prompt's chunk) over ``dp`` replicas. With attention data
    parallelism a request lives on one replica (SGLang's DP controller hands each to one
    scheduler, in turn), which prefills the whole prompt while the other replicas wait for it at
    every MoE layer's all-to-all: the busiest replica holds ``min(n, ceil(n / dp))`` of the ``n``
    prompts, not ``n / dp`` (one prompt costs its replica all of it, ``dp`` times the even share),
    and at most ``replica_tokens`` of them per step (a replica's share of the token budget; with a
    deep queue every replica fills its share and the replicas are even)."""
    n = np.asarray(step.batch, dtype=float)
    d = np.asarray(dp, dtype=float)
    busiest = np.minimum(np.minimum(n, np.ceil(n / d - 1e-9)) * step.q_len, step.replica_tokens)
    mean = n * step.q_len / d
    skew = np.where(mean > 0, np.maximum(busiest / np.maximum(mean, 1e-300), 1.0), 1.0)
    return 1.0 if bool(np.all(skew == 1.0)) else skew     # even everywhere: the balanced fast paths


@dataclass
class _Ctx:
    """Everything a layer builder needs, precomputed once per call."""

    m: ModelSpec
    lay: Layout
    step: Step
    dt: DTypes
    a2a: bool = False                         # MoE tokens go by all-to-all even without attention DP (layer_ops)
    shared_ranks: bool = False                # decode: the shared experts are EP ranks of their own (layer_ops)
    state: DType | None = None                # linear-attention state format (layer_ops; None: FP32)
    b_loc: np.ndarray = field(init=False)     # sequences on the busiest attention replica
    tokens: np.ndarray = field(init=False)    # new tokens on the busiest attention replica
    tokens_all: np.ndarray = field(init=False)
    skew: np.ndarray | float = field(init=False)   # busiest replica's sequences over the mean (1: balanced)
    _all_reduce_bytes: np.ndarray | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        dp = self.lay.attention_dp
        self.skew = self.step.dp_skew
        if self.step.prompt and np.any(dp > 1):
            self.skew = _prompt_skew(self.step, dp)
        self.b_loc = scaled(self.step.batch, Per(dp))
        if self.skewed:                       # the busiest replica's sequences set the step
            self.b_loc = self.b_loc * np.where(dp > 1, self.skew, 1.0)
        self.tokens = scaled(self.b_loc, self.step.q_len)
        self.tokens_all = scaled(self.step.batch, self.step.q_len)

    @property
    def skewed(self) -> bool:
        """The step's attention data-parallel replicas are not balanced (``Step.dp_skew``, or a
        prompt step's placement: ``_prompt_skew``)."""
        s = self.skew
        return not (np.ndim(s) == 0 and s == 1.0)

    @property
    def mean_keys(self) -> np.ndarray:
        """Keys a new query attends to on average (causal: the cached ones plus half the new)."""
        return self.step.ctx + (self.step.q_len + 1) / 2

    @property
    def pairs(self) -> np.ndarray:
        q, c = self.step.q_len, self.step.ctx
        return self.b_loc * (q * c + q * (q + 1) / 2)

    def kept(self, module: str) -> DType | None:
        """BF16 where the checkpoint keeps ``module`` unquantized under a narrower weight format
        (``ModelSpec.unquantized``), else None (the step's weight format)."""
        return DType.bf16 if self.dt.weight.bytes < DType.bf16.bytes and module in self.m.unquantized else None

    def gemm(self, name: str, count: int, k, n, *, m=None, shard=1, weight_params=None,
             kept: DType | None = None) -> Op:
        m = self.tokens if m is None else m
        wb = (kept or self.dt.weight).bytes
        params = k * n / shard if weight_params is None else weight_params
        return Op(name, OpKind.gemm, count, flops=scaled(m, 2.0, k, n, Per(shard)), weight_bytes=params * wb,
                  act_bytes=scaled(m, k + n / shard, self.dt.act.bytes), params=params, weight_dtype=kept)

    def all_reduce(self, name: str, count: int) -> Op:
        """A TP all-reduce of the hidden state: every one of a step's carries the same payload
        array (one object, so the operators' times are computed once: ``roofline.build_step``)."""
        if self._all_reduce_bytes is None:
            self._all_reduce_bytes = scaled(self.tokens, self.m.hidden_size, self.dt.act.bytes)
        return Op(name, OpKind.all_reduce, count, comm_bytes=self._all_reduce_bytes, group=self.lay.tp)


def _attention(c: _Ctx, n: int, window: AttentionWindow | None = None) -> list[Op]:
    """GQA/MHA attention; with a ``window`` (local layers) each new token scores only the keys
    inside its window or chunk and reads only those from the KV cache."""
    m, tp = c.m, c.lay.tp
    h, d = m.hidden_size, m.head_dim
    heads = m.num_heads / tp
    kv_heads = np.maximum(m.num_kv_heads / tp, 1)
    q_out = heads * d * (2 if m.attention_output_gate else 1)
    qkv_n = q_out + 2 * kv_heads * d
    bias = qkv_n if m.biases else 0
    kv_tok = 2 * kv_heads * d * c.dt.kv.bytes
    q, ctx = c.step.q_len, c.step.ctx
    pairs = c.pairs if window is None else c.b_loc * window.pairs(q, ctx)
    seen = ctx if window is None else window.visible_cached(ctx)
    kept = c.kept("attention")
    return [
        c.gemm("qkv_proj", n, h, qkv_n, weight_params=h * qkv_n + bias, kept=kept),
        Op("attention", OpKind.attention, n, flops=4.0 * heads * d * pairs,
           act_bytes=scaled(c.tokens, 2, heads, d, c.dt.act.bytes),
           kv_bytes=scaled(c.b_loc, seen + 2 * q, kv_tok),
           keys=c.mean_keys if window is None else window.pairs(q, ctx) / np.maximum(q, 1)),
        c.gemm("o_proj", n, heads * d, h, weight_params=heads * d * h + (h if m.biases else 0), kept=kept),
        c.all_reduce("attn_all_reduce", n),
    ]


def _local_attention(c: _Ctx, n: int) -> list[Op]:
    return _attention(c, n, c.m.window)


def _mla(c: _Ctx, n: int) -> list[Op]:
    """DeepSeek MLA under TP over heads; the latent cache is replicated on every TP rank.
    Prefill decompresses K/V (kv_b) and runs MHA; decode absorbs kv_b into q and o and
    attends in the 512+64-wide latent space (DeepSeek-V2 paper, Sec. 2.1.2 and App. C). Which
    form a step uses is whichever needs fewer FLOPs: many new tokens per sequence favour
    decompression, a few (decode, MTP verification) over a long context favour absorption."""
    m, tp, a = c.m, c.lay.tp, c.m.mla
    assert a is not None
    h, heads = m.hidden_size, m.num_heads / tp
    dn, dr, dv, r = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.kv_lora_rank
    q, ctx, T = c.step.q_len, c.step.ctx, c.tokens
    kept = c.kept("attention")
    ops = []
    if a.q_lora_rank:
        ops.append(c.gemm("q_a_proj", n, h, a.q_lora_rank, kept=kept))
        ops.append(c.gemm("q_b_proj", n, a.q_lora_rank, heads * (dn + dr), kept=kept))
    else:
        ops.append(c.gemm("q_proj", n, h, heads * (dn + dr), kept=kept))
    ops.append(c.gemm("kv_a_proj", n, h, r + dr, kept=kept))
    kv_b_params = r * heads * (dn + dv)
    decompress = 2.0 * c.b_loc * (ctx + q) * kv_b_params
    absorb = 2.0 * T * heads * (dn * r + r * dv)
    mha = 2.0 * heads * c.pairs * (dn + dr + dv)
    latent = 2.0 * heads * c.pairs * (r + dr + r)
    prefill = decompress + mha < absorb + latent     # engines run the cheaper form (decode, MTP verify: absorb)
    ops.append(Op("kv_b_proj", OpKind.gemm, n, flops=np.where(prefill, decompress, absorb),
                  weight_bytes=kv_b_params * (kept or c.dt.weight).bytes, params=kv_b_params, weight_dtype=kept,
                  act_bytes=np.where(prefill, c.b_loc * (ctx + q) * (r + heads * (dn + dv)), T * heads * 2 * r)
                  * c.dt.act.bytes))
    ops.append(Op("attention", OpKind.attention, n, flops=np.where(prefill, mha, latent),
                  act_bytes=2 * T * heads * (dn + dr) * c.dt.act.bytes,
                  kv_bytes=c.b_loc * (ctx + 2 * q) * (r + dr) * c.dt.kv.bytes, keys=c.mean_keys,
                  absorbed=np.logical_not(prefill)))
    ops.append(c.gemm("o_proj", n, heads * dv, h, kept=kept))
    ops.append(c.all_reduce("attn_all_reduce", n))
    return ops


def _linear_attention(c: _Ctx, n: int) -> list[Op]:
    """Gated DeltaNet (Qwen3-Next) / Kimi Delta Attention: projections, a recurrent state of
    ``heads x dk x dv`` per sequence read and written once per step, short causal convs."""
    m, tp, la = c.m, c.lay.tp, c.m.linear_attention
    assert la is not None
    h = m.hidden_size
    nk, nv = la.num_key_heads / tp, la.num_value_heads / tp
    dk, dv = la.key_head_dim, la.value_head_dim
    qkv = 2 * nk * dk + nv * dv
    if la.kind == "kda":   # q,k,v + beta (b_proj) + low-rank forget/output gates (rank -> heads*dv)
        proj_n = qkv + nv
        gate = 2 * (h * la.gate_rank + la.gate_rank * nv * dv)
    else:                  # gated deltanet: qkvz + (beta, alpha) per value head
        proj_n = qkv + nv * dv + 2 * nv
        gate = 0
    # recurrent state in the engine's format (recurrent_state_dtype), conv window in the KV format
    state_bytes = nv * dk * dv * recurrent_state_dtype(la.kind, c.state).bytes \
        + qkv * (la.conv_kernel - 1) * c.dt.kv.bytes
    q = c.step.q_len
    # per token: the state update and readout of every value head, the depthwise short conv over
    # the q/k/v channels (once per channel, not per head), and in the chunked form the intra-chunk terms
    flops_tok = nv * 8.0 * dk * dv + 2.0 * qkv * la.conv_kernel + np.where(
        q > 1, nv * 2.0 * LINEAR_CHUNK * (dk + dv), 0.0)
    return [
        c.gemm("linear_in_proj", n, h, proj_n + gate / h, weight_params=h * proj_n + gate),
        Op("linear_attention", OpKind.attention, n, flops=c.tokens * flops_tok,
           act_bytes=c.tokens * (qkv + nv * dv) * c.dt.act.bytes,
           kv_bytes=2 * c.b_loc * state_bytes, linear=True, recurrent=not c.step.prompt),
        c.gemm("linear_out_proj", n, nv * dv, h),
        c.all_reduce("attn_all_reduce", n),
    ]


def _dense_ffn(c: _Ctx, n: int) -> list[Op]:
    m, tp = c.m, c.lay.tp
    h, width = m.hidden_size, m.intermediate_size / tp
    up = (2 if m.gated_ffn else 1) * width
    return [
        c.gemm("ffn_up", n, h, up, weight_params=h * up + (up if m.biases else 0)),
        c.gemm("ffn_down", n, width, h, weight_params=width * h + (h if m.biases else 0)),
        c.all_reduce("ffn_all_reduce", n),
    ]


def _moe_ffn(c: _Ctx, n: int) -> list[Op]:
    """Routed experts (+ shared experts). With ``ep <= tp`` every device of the TP group holds
    all tokens: it runs its experts on the tokens routed to them and one all-reduce sums the
    results (vLLM TP + expert parallel). With ``ep > tp`` (attention data parallel) tokens are
    dispatched to their experts' devices and combined back by all-to-all (DeepEP-style).

    Expert parallelism is only as fast as its most loaded device. With ``ep`` not dividing the
    experts some devices hold ``ceil(E / ep)``; and with ``T k`` expert assignments spread
    uniformly over ``ep`` devices (``mu`` each, binomial), the expected maximum is about
    ``mu + sqrt(2 mu ln ep)`` (Gaussian extreme value), so the factor is
    ``1 + sqrt(2 ln(ep) / mu)``: large at small decode batches, ~1 at large prefill batches.
    Routing skew beyond the uniform case (what EPLB removes) is the framework's ``moe_imbalance``
    (applied in ``roofline``)."""
    m, lay, moe = c.m, c.lay, c.m.moe
    assert moe is not None
    h, E, k = m.hidden_size, moe.num_experts, moe.experts_per_token
    ab = c.dt.act.bytes
    expert_params = 3 * h * moe.expert_intermediate_size
    hit = 1.0 - (1.0 - k / E) ** c.tokens_all               # fraction of experts this step touches
    routed = scaled(c.tokens_all, k, Per(lay.stage_devices))  # expert-token assignments per device (mean)
    per_rank = np.ceil(E / lay.ep)                           # experts on the fullest EP rank
    stored = per_rank * expert_params / lay.expert_tp
    # assignments each device reads and writes a full hidden vector for: an expert split
    # tensor-parallel over expert_tp devices still takes every token routed to it on each of them
    # (each computes its slice of the intermediate and writes a partial hidden-size output)
    seen = scaled(c.tokens_all, k, Per(lay.ep))
    mu = np.maximum(seen, 1e-9)
    uneven = per_rank / (E / lay.ep) * (1 + np.sqrt(2 * np.log(np.maximum(lay.ep, 1)) / mu))
    # tokens go by all-to-all under attention data parallelism; an engine with an all-to-all MoE
    # backend (c.a2a) also scatters a TP group's tokens over its ranks first (SGLang's SCATTERED
    # MLP mode with --moe-a2a-backend: layers/communicator.py _compute_mlp_mode): each rank then
    # sends its 1/tp share, the combine returns it, and the all-gather before the next attention
    # takes the place of the MoE all-reduce
    scattered = (lay.ep > 1) & (lay.attention_dp == 1) if c.a2a else False
    a2a = (lay.attention_dp > 1) | scattered
    # an all-to-all ends when its busiest sender is done: the busiest attention replica's tokens
    sent = c.tokens_all * c.skew if c.skewed else c.tokens_all
    # a decode deployment may give the shared experts EP ranks of their own (CloudMatrix-Infer's
    # EP320: 256 routed experts, 32 shared-expert replicas and 32 redundant experts, one per die):
    # each token is then dispatched to k + shared experts, and no rank runs the shared expert on
    # its own tokens (the replicas' load matches a routed expert's by construction: ~10 ranks'
    # tokens each, against 8 x 320 / 288 per routed expert)
    # (per candidate: a layout without the all-to-all runs its shared experts itself)
    aside = a2a if c.shared_ranks and moe.num_shared_experts and not c.step.prompt else False
    slots = np.where(aside, k + moe.num_shared_experts, k) if np.any(aside) else k
    dispatch = _where(a2a, lambda: scaled(sent, Per(lay.stage_devices), slots, h, ab))
    # node-limited routing (DeepSeek-V3 Sec. 2.1.2): a token reaches at most `groups_per_token`
    # expert groups, so it crosses the scale-out network to at most that many nodes, once each
    limited = moe.num_groups and moe.num_groups > 1 and moe.groups_per_token
    draws = float(min(k, moe.groups_per_token) if limited else k)
    once = _where(a2a, lambda: scaled(sent, Per(lay.stage_devices), h, ab))
    ops = [c.gemm("router", n, h, E)]
    bulk = 0.0                  # (an all-to-all of a step with prompt tokens: 1 where it has them)
    if np.any(a2a):
        bulk = np.where(np.asarray(c.tokens_all) > 0, 1.0, 0.0) if c.step.prompt else 0.0
        ops.append(Op("ep_dispatch", OpKind.all_to_all, n, comm_bytes=dispatch, remote_bytes=once,
                      draws=draws, group=lay.ep, imbalance=uneven, bulk=bulk))
    # tokens are permuted into expert order before the grouped GEMM and un-permuted and summed
    # with their gate weights after it: each routed copy of a hidden vector is read and written twice
    ops.append(Op("moe_permute", OpKind.elementwise, n, act_bytes=scaled(seen, 4.0, h, ab), group=lay.ep,
                  imbalance=uneven))
    ops.append(Op("experts", OpKind.gemm, n, flops=scaled(routed, 2.0, expert_params),
                  weight_bytes=scaled(hit, stored, c.dt.weight.bytes),       # stored x hit x bytes
                  act_bytes=scaled(seen, 2 * h + 3 * moe.expert_intermediate_size / lay.expert_tp, ab),
                  params=stored, group=lay.ep, imbalance=uneven, grouped=True))
    if moe.num_shared_experts and not np.all(aside):
        width = moe.num_shared_experts * moe.shared_intermediate_size / lay.tp
        shared = [c.gemm("shared_expert_up", n, h, 2 * width), c.gemm("shared_expert_down", n, width, h)]
        ops += [_idle_where(op, aside) for op in shared] if np.any(aside) else shared
    if np.any(a2a):
        ops.append(Op("ep_combine", OpKind.all_to_all, n, comm_bytes=dispatch, remote_bytes=once,
                      draws=draws, group=lay.ep, imbalance=uneven, bulk=bulk))
    reduce = c.all_reduce("ffn_all_reduce", n)
    if np.any(scattered):
        reduce = replace(reduce, group=np.where(scattered, 1, lay.tp))
    ops.append(reduce)
    return ops


def _idle_where(op: Op, mask: np.ndarray) -> Op:
    """``op`` with no work, bytes or weights in the rows of ``mask`` (candidates of a block that do
    not run it: their times are those of the operator list without it)."""
    return replace(op, **{f: np.where(mask, 0.0, getattr(op, f))
                          for f in ("flops", "weight_bytes", "act_bytes", "params")})


def _where(mask: np.ndarray, value) -> np.ndarray | float:
    """``np.where(mask, value(), 0.0)`` for a small per-candidate ``mask``: ``value()`` alone when
    the mask holds everywhere, 0 when nowhere (the value is then never used)."""
    if not np.any(mask):
        return 0.0
    v = value()
    return v if np.all(mask) and np.broadcast_shapes(np.shape(v), np.shape(mask)) == np.shape(v) \
        else np.where(mask, v, 0.0)


def _norms(c: _Ctx, n: int, mixer: Mixer) -> Op:
    """Two fused residual-add + norm kernels (each reads 2 and writes 1 ``tokens x hidden``
    tensor; the hidden state is replicated across TP ranks) plus the FFN activation (reads the
    up-projection, writes half of it): memory-bound. Params: norm weights (and biases)."""
    m = c.m
    params = (4 if m.biases else 2) * m.hidden_size
    if m.qk_norm and mixer is not Mixer.linear:
        params += 2 * m.head_dim
    if m.mla is not None and mixer is Mixer.attention:
        params += m.mla.kv_lora_rank + (m.mla.q_lora_rank or 0)
    width = (m.moe.experts_per_token * m.moe.expert_intermediate_size if m.moe is not None
             else m.intermediate_size) / c.lay.tp
    passes = 6 * m.hidden_size + (3 if m.gated_ffn else 2) * width
    return Op("norms_residual", OpKind.elementwise, n, act_bytes=scaled(c.tokens, passes, c.dt.act.bytes),
              params=params)


_MIXERS = {Mixer.linear: _linear_attention, Mixer.local: _local_attention}
_FFNS = {FFNKind.dense: _dense_ffn, FFNKind.moe: _moe_ffn}


def layer_ops(model: ModelSpec, layout: Layout, step: Step, dtypes: DTypes, a2a: bool = False,
              shared_ranks: bool = False, state: DType | None = None) -> list[Op]:
    """Every operator of one forward step on one device, for the whole model (all layers, all
    stages: per-stage figures are these divided by ``pp``), plus the embedding and LM head.
    ``a2a``: the engine moves MoE tokens with an all-to-all backend whenever experts are spread
    (``ep > 1``), with tensor-parallel attention too (``Efficiency.moe_a2a``, ``_moe_ffn``).
    ``shared_ranks``: in decode steps that dispatch, the shared experts run on EP ranks of their
    own (``Efficiency.shared_expert_ranks``, ``_moe_ffn``). ``state``: the format linear-attention
    recurrent states are read and written in (``Efficiency.linear_state_dtype``; None: FP32)."""
    c = _Ctx(model, layout, step, dtypes, a2a, shared_ranks, state)
    ops: list[Op] = []
    for (mixer, ffn), count in model.layer_kinds().items():
        mixer_fn = _MIXERS.get(mixer, _mla if model.mla is not None else _attention)
        ops += mixer_fn(c, count) + _FFNS[ffn](c, count) + [_norms(c, count, mixer)]
    ops += _embedding_and_head(c)
    return ops


def mtp_draft_ops(model: ModelSpec, layout: Layout, step: Step, dtypes: DTypes, passes: int = 1,
                  extend: bool = False, draft: DraftSpec | None = None, a2a: bool = False,
                  shared_ranks: bool = False) -> list[Op]:
    """``passes`` draft steps of speculative decoding, one token per sequence each (``step``); no
    passes, no operators.

    Without ``draft``, the target's multi-token-prediction module (DeepSeek-V3, arXiv:2412.19437
    Sec. 2.2): the last hidden state and the embedding of the token just produced are concatenated
    and projected (``eh_proj``, ``2h -> h``), run through one block like the model's last layer and
    through the shared LM head. With an EAGLE-3 ``draft`` (``catalog.draft``): its own dense
    layer, whose q/k/v read the embedding beside the hidden state (``qkv_embed``: the second
    ``h`` of their ``2h`` input), its LM head over the draft vocabulary, in the draft's own
    (unquantized) format, and once per decode step ``fc`` (``3H -> h``) over the target hidden
    states the verify pass produced.

    The MTP module keeps BF16 weights under a quantization that is not the checkpoint's own
    (``mtp_weight_dtype``); the target's LM head it shares stays as the model keeps it.

    ``extend``: the engine also runs the draft once more per decode step, over the ``1 + passes``
    tokens each sequence verified, with logits for the last of them only (SGLang's EAGLE worker,
    which also serves NEXTN/MTP: ``forward_draft_extend_after_decode`` after every verify, sized
    ``speculative_num_steps + 1`` tokens per request, hidden states captured LAST). Engines whose
    first draft step takes the verified tokens itself (vLLM's EAGLE proposer) run ``passes`` only."""
    if passes == 0:
        return []
    own = draft.weight_dtype if draft is not None else mtp_weight_dtype(model, dtypes)
    dt = dtypes if own is None else replace(dtypes, weight=own)
    arch = model if draft is None else draft.layer
    c = _Ctx(arch, layout, step, dt, a2a, shared_ranks)
    ops = [replace(op, name=f"mtp_{op.name}", count=op.count * passes) for op in _draft_module(c, draft)]
    if extend:
        verified = Step.lean(step.batch, 1.0 + passes, step.ctx, step.dp_skew)
        c = _Ctx(arch, layout, verified, dt, a2a, shared_ranks)
        ops += [replace(op, name=f"mtp_extend_{op.name}") for op in _draft_module(c, draft, logits=c.b_loc)]
    if draft is not None:           # fc: replicated on every rank, once per step on the verified tokens
        ops.append(replace(c.gemm("fc", 1, draft.fused_hidden, arch.hidden_size), name="mtp_fc"))
    if own is not None:             # its GEMMs run in its own format, whatever the target's (roofline reads it)
        ops = [replace(op, weight_dtype=op.weight_dtype or own) if op.kind is OpKind.gemm else op for op in ops]
    return ops


def mtp_weight_dtype(model: ModelSpec, dtypes: DTypes) -> DType | None:
    """BF16 where a quantization that is not the checkpoint's own (narrower than BF16 and not its
    native format) leaves the model's MTP module unquantized, as the public quantizers of
    DeepSeek-V3/R1 do: NVIDIA ModelOpt's FP4 export (sglang PR #7376: the MTP module's quant config
    is None, 'It's not quantized', after TensorRT-LLM's modeling_deepseekv3.py), msModelSlim's W8A8
    (vllm-ascend PR #7177: DeepSeek-R1 MTP runs only as 'W8A8 + MTP float') and AutoAWQ (issue
    #736: layer 61 not quantized); None (the step's format) otherwise, e.g. DeepSeek's own FP8."""
    w = dtypes.weight
    return DType.bf16 if w.bytes < DType.bf16.bytes and w.value != model.native_dtype else None


def _draft_module(c: _Ctx, draft: DraftSpec | None, logits=None) -> list[Op]:
    """One pass of the draft (``mtp_draft_ops``): its input projection, one block, the embedding
    and the LM head (logits for ``logits`` tokens; default every new token)."""
    m = c.m
    mixer, ffn = m.mixer(m.num_layers - 1), m.ffn(m.num_layers - 1)
    mixer_fn = _MIXERS.get(mixer, _mla if m.mla is not None else _attention)
    h = m.hidden_size
    if draft is None:
        first = c.gemm("eh_proj", 1, 2 * h, h)
    else:
        tp = c.lay.tp
        first = c.gemm("qkv_embed", 1, h, (m.num_heads / tp + 2 * np.maximum(m.num_kv_heads / tp, 1)) * m.head_dim)
    return [first] + mixer_fn(c, 1) + _FFNS[ffn](c, 1) + [_norms(c, 1, mixer)] + _embedding_and_head(c, logits)


def _embedding_and_head(c: _Ctx, logits=None) -> list[Op]:
    """Vocab-parallel embedding lookup and LM head. A prompt step needs logits only for the last
    token of each sequence; a decode step for every token it verifies (``1 + k`` with ``k`` draft
    tokens: the target's distribution at each drafted position decides its acceptance and samples
    the bonus token); ``logits``, if given, is the tokens that need them. BLOOM also has an
    embedding LayerNorm; every model a final norm."""
    m, tp = c.m, c.lay.tp
    h, V = m.hidden_size, m.vocab_size
    embed_params = V * h / tp + (2 * h if m.embedding_norm else 0) + (2 * h if m.biases else h)
    kept = c.kept("lm_head")
    if logits is None:
        logits = c.b_loc if c.step.prompt else c.tokens
    head = c.gemm("lm_head", 1, h, V, m=logits, shard=tp,
                  weight_params=0.0 if m.tie_word_embeddings else V * h / tp, kept=kept)
    if m.tie_word_embeddings:   # weights shared with the embedding: still read, not stored twice
        head = Op(head.name, head.kind, 1, flops=head.flops, weight_bytes=V * h / tp * (kept or c.dt.weight).bytes,
                  act_bytes=head.act_bytes, weight_dtype=kept)
    embed = Op("embedding", OpKind.elementwise, 1, act_bytes=scaled(c.tokens, 2, h, c.dt.act.bytes),
               params=embed_params)
    return [embed, head]


def merge_ops(a: list[Op], b: list[Op], consume_b: bool = False) -> list[Op]:
    """Operators of one iteration that runs two groups of tokens together (continuous batching:
    decode tokens plus a prefill chunk). Both lists come from the same model and layout, so they
    pair up one to one by name (``_paired``; an operator only one group runs is kept as it is):
    work and traffic add, weights are read once (the larger touched set).
    Attention is the exception: decode and prefill attention run as their own kernels (paged
    decode vs FlashAttention prefill; a linear-attention core's recurrent update vs its chunked
    form), each at its own efficiency, so both are kept. (The expert
    operators of a layer share one load factor: it is combined once per pair of arrays.)
    ``consume_b``: the caller no longer uses ``b`` (its arrays are temporaries held nowhere else),
    so a sum may be written into a ``b`` array that no other field of either list holds - the
    same numbers without a fresh array (``x + y`` in place in ``y``)."""
    out, combined, sums = [], {}, {}
    uses = Counter(id(v) for op in (*a, *b) for f in OP_ARRAY_FIELDS if isinstance(v := getattr(op, f), np.ndarray)) \
        if consume_b else {}

    def add(u, v):
        # operators that share an array on both sides (a layer's all-reduces, an EP dispatch
        # and combine) share its sum: one object, so ``roofline.build_step`` times them once
        pair = (id(u), id(v))           # both lists hold u and v while this runs: the ids stay theirs
        if pair not in sums:
            sums[pair] = _add_into(u, v) if uses.get(id(v)) == 1 else add_nonneg(u, v)
        return sums[pair]

    def larger(u, v):
        pair = (id(u), id(v))           # as ``add``: equal inputs, one result object
        if pair not in larger_of:
            larger_of[pair] = np.maximum(u, v)
        return larger_of[pair]

    larger_of: dict[tuple[int, int], np.ndarray] = {}
    for x, y in _paired(a, b):
        if x is None or y is None:      # an operator only one group of tokens runs
            out.append(x if y is None else y)
            continue
        if x.linear or (x.kind is OpKind.attention and x.keys is not None and np.any(np.asarray(x.keys) > 0)):
            out += [x, replace(y, name=f"{y.name}_prefill")]
            continue
        pair = (id(x.imbalance), id(y.imbalance))
        if pair not in combined:
            combined[pair] = _combined_imbalance(x.imbalance, y.imbalance)
        out.append(Op(x.name, x.kind, x.count, flops=add(x.flops, y.flops),
                      weight_bytes=larger(x.weight_bytes, y.weight_bytes),
                      act_bytes=add(x.act_bytes, y.act_bytes), kv_bytes=add(x.kv_bytes, y.kv_bytes),
                      comm_bytes=add(x.comm_bytes, y.comm_bytes), group=x.group, params=x.params,
                      remote_bytes=add(x.remote_bytes, y.remote_bytes), draws=max(x.draws, y.draws),
                      imbalance=combined[pair], grouped=x.grouped, linear=x.linear, weight_dtype=x.weight_dtype,
                      bulk=y.bulk if scalar_zero(x.bulk) else np.maximum(x.bulk, y.bulk)))
    return out


def _paired(a: list[Op], b: list[Op]) -> list[tuple[Op | None, Op | None]]:
    """The operators of ``a`` and ``b`` in order, paired by name: one to one where the lists
    match (the usual case), else an operator that only one list has (a decode step that runs the
    shared experts on EP ranks of their own has no ``shared_expert_*`` while its prompt tokens keep
    them local: ``layer_ops``' ``shared_ranks``) comes alone, where it stands."""
    out: list[tuple[Op | None, Op | None]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        x, y = (a[i] if i < len(a) else None), (b[j] if j < len(b) else None)
        if x is not None and y is not None and x.name == y.name:
            out.append((x, y))
            i, j = i + 1, j + 1
        elif y is not None and (x is None or all(op.name != y.name for op in a[i:])):
            out.append((None, y))
            j += 1
        else:
            out.append((x, None))
            i += 1
    return out


OP_ARRAY_FIELDS = ("flops", "weight_bytes", "act_bytes", "kv_bytes", "comm_bytes", "group", "params", "keys",
              "remote_bytes", "imbalance", "bulk", "absorbed")


def _add_into(x, y):
    """``add_nonneg(x, y)``, written into ``y`` (a temporary nothing else holds) when it is a float
    array of the result's shape that owns its memory."""
    if isinstance(y, np.ndarray) and y.dtype == np.float64 and y.ndim and y.flags.owndata and y.flags.writeable \
            and not scalar_zero(x) and np.broadcast_shapes(np.shape(x), y.shape) == y.shape and x is not y:
        return np.add(x, y, out=y)
    return add_nonneg(x, y)


def in_place(ufunc, a, b):
    """``ufunc(a, b)`` for ``a`` a temporary the caller made: in place when it has the result's
    shape (the same values without another full-size allocation)."""
    return into(ufunc, a, b, a)


def into(ufunc, a, b, out):
    """``ufunc(a, b)``, written into ``out`` (a temporary the caller made, ``a`` or ``b``) when it
    has the result's shape."""
    if isinstance(out, np.ndarray) and out.ndim and np.broadcast_shapes(np.shape(a), np.shape(b)) == out.shape:
        return ufunc(a, b, out=out)
    return ufunc(a, b)


def add_nonneg(x, y):
    """``x + y``; a scalar zero on either side of a float array adds nothing (the fields are
    non-negative, so no ``-0.0`` can turn into ``+0.0``): the array is returned as it is."""
    if scalar_zero(y) and isinstance(x, np.ndarray) and x.dtype == np.float64:
        return x
    if scalar_zero(x) and isinstance(y, np.ndarray) and y.dtype == np.float64:
        return y
    return x + y


def scalar_zero(x) -> bool:
    """Whether ``x`` is a scalar (Python, NumPy or 0-d array) equal to zero."""
    if isinstance(x, (int, float)):
        return x == 0
    return getattr(x, "ndim", 1) == 0 and float(x) == 0.0


def _combined_imbalance(gx, gy):
    """Load factor of two token groups routed together: the statistical excess ``g - 1`` goes as
    ``1 / sqrt(assignments)``, so the excesses combine like resistors in series of their squares.
    A group without excess (``g <= 1``) makes the sum infinite, so the result is 1: when either
    side is the scalar 1 (every operator but the expert-parallel ones) it is 1 without arithmetic."""
    if (np.ndim(gx) == 0 and float(gx) <= 1) or (np.ndim(gy) == 0 and float(gy) <= 1):
        return 1.0 if np.ndim(gx) == np.ndim(gy) == 0 else np.ones(np.broadcast_shapes(np.shape(gx), np.shape(gy)))
    ex, ey = np.asarray(gx, float) - 1, np.asarray(gy, float) - 1
    # np.where(mask, x ** p, fill) with the power taken only where the mask holds (the same
    # numbers: a row without expert parallelism, excess 0, takes no power at all)
    px, py = _masked_power(ex, -2.0, ex > 0, np.inf), _masked_power(ey, -2.0, ey > 0, np.inf)
    inv = np.add(px, py, out=py) if py.ndim and py.shape == np.broadcast_shapes(px.shape, py.shape) else px + py
    out = _masked_power(inv, -0.5, np.isfinite(inv), 0.0)
    return np.add(1, out, out=out) if out.ndim else 1 + out


def _masked_power(x: np.ndarray, p: float, mask: np.ndarray, fill: float) -> np.ndarray:
    """``np.where(mask, x ** p, fill)`` for ``mask`` of ``x``'s shape, the power evaluated only where
    ``mask`` holds - for arrays, which both forms raise to the power in numpy's array loop. A scalar
    (or 0-d) ``x`` keeps the ``np.where`` form: numpy raises a scalar with the C library's ``pow``,
    whose last bit can differ from the array loop's (SIMD) power."""
    if not (isinstance(x, np.ndarray) and x.ndim):
        with np.errstate(divide="ignore"):
            return np.where(mask, x ** p, fill)
    out = np.full(x.shape, fill)
    np.power(x, p, out=out, where=mask)
    return out
