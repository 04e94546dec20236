"""Context parallelism (CP) for the prefill of long prompts: the prompt's tokens are split over
``cp`` ranks (each rank an instance of the layout: ``tp`` x ``pp`` devices, weights replicated), and
attention runs as a ring (Ring Attention, Liu et al. 2023, arXiv:2310.01889; pass-KV ring of
Meta's "Context Parallelism for Scalable Million-Token Inference", arXiv:2411.01783; engines:
TensorRT-LLM context parallelism, vLLM/vLLM-Ascend ``prefill_context_parallel_size``, SGLang
prefill CP, Mooncake/Kimi's long-context prefill).

Per rank (``S`` prompt tokens, ``n = S / cp`` of them on each rank):

* linear layers (projections, FFN, MoE) run on the rank's ``n`` tokens: ``1 / cp`` of the FLOPs,
  with the whole weight read once per rank;
* causal attention, load-balanced (each rank holds two mirrored chunks of ``S / 2cp`` tokens, as
  the engines shard it), scores ``S (S + 1) / (2 cp)`` query-key pairs: exactly the pairs of a
  chunk of ``n`` new tokens after ``c = S (cp - 1) / (2 cp)`` cached ones, which is how a rank is
  timed here (``Step(1, n, c)`` through the same roofline as every other step);
* the ring: per full-attention layer each device passes its K,V block (``n`` tokens, its KV heads)
  to the matching device of the next rank ``cp - 1`` times, point to point on the link a group of
  ``cp x`` (stage devices) uses; each pass overlaps the attention of the block in hand, so a layer
  costs ``max(attention, ring)``: the ring is exposed only beyond the attention it hides under;
* memory: each rank keeps the KV of its own ``n`` tokens (plus the block in flight).

Linear-attention (recurrent) layers need a different scheme (state passing) and are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.errors import InputError
from planner.perf.comm import collective_time
from planner.perf.memory import kv_bytes_per_token_device
from planner.perf.ops import DTypes, OpKind, Step
from planner.perf.parallel import Layout
from planner.perf.roofline import StepTime, step_time


@dataclass(frozen=True)
class CPPrefill:
    """Prefill of one prompt over ``cp`` ranks (arrays broadcast over prompts and degrees)."""

    time_s: np.ndarray            # the prefill, ring exposure and step overhead included
    step: StepTime                # one rank's step (its tokens, its share of attention pairs)
    ring_s: np.ndarray            # the ring's transfers, all layers (before overlap)
    exposed_ring_s: np.ndarray    # the part not hidden under attention
    ring_bytes_per_device: np.ndarray   # sent by each device (its stage's layers) over the prefill
    kv_bytes_per_rank_device: np.ndarray  # KV of the rank's own tokens, per device


def rank_step(prompt_tokens, cp, batch=1) -> Step:
    """The step one CP rank runs for ``batch`` prompts: ``S / cp`` new tokens of each after
    ``S (cp - 1) / (2 cp)`` cached ones (the same query-key pairs as its load-balanced share of
    the causal prompt)."""
    s, k = np.asarray(prompt_tokens, float), np.asarray(cp, float)
    return Step.of(batch, s / k, s * (k - 1) / (2 * k), prompt=True)


def cp_prefill(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, prompt_tokens,
               cp, batch=1) -> CPPrefill:
    """Time of a prefill of ``batch`` prompts of ``prompt_tokens`` split over ``cp`` ranks of
    layout ``lay`` (one step on every rank; the ring carries every prompt's blocks)."""
    if model.linear_attention is not None and np.any(np.asarray(cp) > 1):
        raise InputError(f"context parallelism for {model.name}'s linear-attention layers is not modelled "
                         "(use cp = 1)")
    k = np.asarray(cp, float)
    st = step_time(model, hw, lay, rank_step(prompt_tokens, cp, batch), dtypes)
    attention_s = sum((t.time_s for t in st.ops if t.op.kind is OpKind.attention), 0.0)
    per_token = kv_bytes_per_token_device(model, lay, dtypes.kv, hw)          # this stage's attention layers
    layers = model.num_attention_layers
    b = np.asarray(batch, float) / lay.attention_dp                     # prompts per attention replica
    block = b * np.asarray(prompt_tokens, float) / k * per_token * lay.pp / layers   # one layer's K,V block
    group = k * lay.stage_devices
    hop = collective_time(hw, "p2p", block, np.maximum(group, 2))
    ring = np.where(k > 1, layers * (k - 1) * hop, 0.0)
    exposed = np.maximum(ring - attention_s, 0.0)
    return CPPrefill(time_s=st.total_s + exposed, step=st, ring_s=ring, exposed_ring_s=exposed,
                     ring_bytes_per_device=np.where(k > 1, layers / lay.pp * (k - 1) * block, 0.0),
                     kv_bytes_per_rank_device=b * np.asarray(prompt_tokens, float) / k * per_token)
