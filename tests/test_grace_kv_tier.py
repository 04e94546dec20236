"""Grace LPDDR5X over NVLink-C2C as the host-DRAM KV tier of the GB200/GB300 NVL72 platforms."""

from __future__ import annotations

import pytest

from planner.catalog.hardware import hardware
from planner.catalog.kv_tiers import TierCatalog, platform
from planner.catalog.model_catalog import model
from planner.perf.estimate import resolve_dtypes
from planner.perf.kv_tiers import instance_tiers
from planner.perf.parallel import Layout
from planner.serving.prefix_cache import ReuseProfile, hit_rate, tier_hit_rates
from planner.serving.sessions import Sessions, SessionWorkload


def test_gb200_host_tier_from_the_c2c_figure():
    """NVLink-C2C: 900 GB/s bidirectional per superchip = 450 GB/s per direction, shared by its 2
    GPUs = 225 GB/s per GPU; loads reach 375 of 450 GB/s on GH200 (0.83): 186.75 GB/s. Capacity:
    480 GB per Grace / 2 GPUs = 240 GB, half usable = 120 GB per GPU."""
    t = platform("gb200-nvl72").host_dram
    assert t.load_bytes_per_s == pytest.approx(900e9 / 2 / 2 * 0.83)
    assert t.bytes_per_accelerator(1) == pytest.approx(480e9 / 2 / 2)
    # one home: the figures are the profile's host_memory
    assert t.bandwidth.value == hardware("gb200-nvl72").host_memory.bandwidth.value


def test_gb200_tier_load_time_per_token():
    """Llama-3.1-70B, bf16 KV at TP4: 80 layers x 2 x (8 KV heads / 4) x 128 x 2 B = 81,920 B per
    token per GPU. Each GPU keeps its shard of every token, so the instance holds 120e9 / 81,920
    tokens, and a hit loads 81,920 B per GPU, all GPUs in parallel: 81,920 / 186.75e9 s per token."""
    m = model("llama-3.1-70b")
    (dram,) = instance_tiers(m, hardware("gb200-nvl72"), Layout.of(4), resolve_dtypes(m, "fp8", "bf16"),
                             ["host_dram"], "gb200-nvl72", 0.0)
    assert dram.tokens == pytest.approx(120e9 / 81920)
    assert dram.load_s_per_token == pytest.approx(81920 / 186.75e9)


def test_grace_tier_raises_the_coding_agent_hit_rate():
    """Tiers are one LRU stack cut at their cumulative capacities: adding the Grace tier behind HBM
    can only raise the hit rate, and at 2 sessions/s per instance it does."""
    m = model("llama-3.1-70b")
    hw = hardware("gb200-nvl72")
    tiers = instance_tiers(m, hw, Layout.of(4), resolve_dtypes(m, "fp8", "bf16"), ["hbm", "host_dram"],
                           "gb200-nvl72", 200_000.0)
    w = SessionWorkload(rate=2.0, sessions=Sessions(preset="coding_agent"))
    p = ReuseProfile.of(w.stream(), w.session_rate, w.sessions.think)
    hbm_only = float(hit_rate(p, tiers[0].tokens)[0])
    both = tier_hit_rates(p, [t.tokens for t in tiers])
    assert both.sum() >= hbm_only
    assert both[1] > 0 and both.sum() > hbm_only + 0.01


def test_from_profile_tier_needs_no_own_figures():
    fig = {"value": 0.5, "source": "s"}
    base = {"sources": {"s": "x"}, "platforms": {"p": {"accelerators_per_node": {"value": 1, "source": "s"},
                                                       "host_dram": {"usable": fig, "efficiency": fig}}}}
    with pytest.raises(ValueError, match="from_profile"):
        TierCatalog.model_validate(base)
    base["platforms"]["p"]["host_dram"]["from_profile"] = True
    assert TierCatalog.model_validate(base).platforms["p"].host_dram.capacity is None
    base["platforms"]["p"]["accelerators_per_node"]["value"] = 8
    with pytest.raises(ValueError, match="per device"):
        TierCatalog.model_validate(base)
