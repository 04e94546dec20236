"""KV-cache tier capacities (tokens) and load times of one instance, from device memory
(``perf.memory``) and the platform's offload tiers (``catalog/kv_tiers.yaml``).

HBM caches what the engine's KV pool holds beyond the running batch: ``free_kv_bytes_device``
minus the KV of the sequences decoding. An offload tier gives each accelerator its share of the
node's tier; every device stores and loads its own shard of a token's KV (its KV heads, its
pipeline stage's layers), so a request's hit of ``n`` tokens loads ``n x kv_bytes_per_token_device``
bytes per device over that device's link, all devices in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.kv_tiers import TierName, platform
from planner.catalog.model import ModelSpec
from planner.perf.memory import (
    cache_split,
    free_kv_bytes_device,
    kv_bytes_per_token_device,
    pools_per_device,
    state_bytes_per_sequence_device,
)
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout


@dataclass(frozen=True)
class Tier:
    """One cache tier of one instance: ``tokens`` it holds and ``load_s_per_token`` for a hit
    (0 for HBM: the blocks are already there)."""

    name: str
    tokens: float
    load_s_per_token: float
    bytes_per_accelerator: float


def _scalar(x) -> float:
    return float(np.ravel(x)[0])


def hbm_cache_tokens(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes,
                     running_tokens: float) -> float:
    """Tokens of the instance's HBM KV pool left after the running sequences' ``running_tokens``: the
    pool as every evaluator sizes it (``memory.cache_split``: what recurrent-state slots leave, held
    to a launch's cap), over the instance's devices."""
    per_token = _scalar(kv_bytes_per_token_device(model, lay, dtypes.kv, hw))
    state = state_bytes_per_sequence_device(model, lay, dtypes.kv, hw)
    kv = cache_split(hw, free_kv_bytes_device(model, hw, lay, dtypes), state, per_token, pools_per_device(hw, lay))[0]
    pool = _scalar(kv) / per_token * _scalar(lay.attention_dp)
    return max(pool - running_tokens, 0.0)


def instance_tiers(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, tiers: list[TierName],
                   platform_name: str, running_tokens: float,
                   bytes_per_accelerator: dict[str, float] | None = None) -> list[Tier]:
    """The instance's tiers, fastest first; ``bytes_per_accelerator`` overrides an offload tier's
    capacity (e.g. to sweep host memory per GPU)."""
    per_token = _scalar(kv_bytes_per_token_device(model, lay, dtypes.kv, hw))
    dp = _scalar(lay.attention_dp)
    out = []
    for name in tiers:
        if name == "hbm":
            tokens = hbm_cache_tokens(model, hw, lay, dtypes, running_tokens)
            out.append(Tier("hbm", tokens, 0.0, tokens * per_token / dp))
            continue
        plat = platform(platform_name)
        fig = getattr(plat, name)
        if fig is None:
            from planner.errors import InputError

            raise InputError(f"platform {platform_name} has no {name} tier (planner/catalog/kv_tiers.yaml)")
        size = (bytes_per_accelerator or {}).get(name, fig.bytes_per_accelerator(int(plat.accelerators_per_node.value)))
        out.append(Tier(name, size / per_token * dp, per_token / fig.load_bytes_per_s, size))
    return out


def exposed_prefill_s(compute_s, load_s, layers: int):
    """Prefill time of a request whose cached prefix loads from a slower tier layer by layer while
    the forward pass runs (vLLM's KV connector: ``start_load_kv`` before the forward,
    ``wait_for_layer_load`` in each attention layer; LMCache and vLLM-Ascend's layer-wise mode;
    Mooncake's layer-wise transfer): layer ``l + 1`` loads while layer ``l`` computes, a two-stage
    pipeline over ``layers`` equal layers of ``c = compute_s / layers`` and ``d = load_s / layers``,
    which takes ``d + (layers - 1) max(c, d) + c = max(C, D) + min(C, D) / layers``: the longer of
    the two plus one layer of the shorter. With nothing to load it is ``compute_s`` exactly.
    Arrays broadcast."""
    c, d = np.asarray(compute_s, float), np.asarray(load_s, float)
    return np.maximum(c, d) + np.minimum(c, d) / layers
