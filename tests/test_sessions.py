"""Sessions, the analytic prefix-cache model and the LRU replay (hand-derived numbers, invariants)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from planner.errors import InputError
from planner.serving.cache_sim import replay
from planner.serving.prefix_cache import ReuseProfile, characteristic_time, hit_rate, tier_hit_rates
from planner.serving.session_trace import load_session_trace
from planner.serving.sessions import Sessions, SessionWorkload, TierTime
from planner.serving.workload import Workload, length_stats


def _fixed(turns=3, new=100, out=50, system=1000, think=10.0, kept=1.0):
    return Sessions(turns={"dist": "fixed", "value": turns}, new_input={"dist": "fixed", "value": new},
                    output={"dist": "fixed", "value": out}, think={"dist": "fixed", "mean_s": think},
                    system_prompt=system, output_kept=kept)


def test_turn_prompts_resend_the_history():
    # 3 turns of 100 new + 50 answer tokens after a 1,000-token system prompt:
    # prompts 1,100 / 1,250 / 1,400; reusable prefixes 1,000 / 1,150 / 1,300
    s = _fixed().stream(5, 1.0, seed=0)
    one = s.session == s.session[0]
    assert s.input_len[one].tolist() == [1100, 1250, 1400]
    assert s.reuse[one].tolist() == [1000, 1150, 1300]
    assert np.allclose(np.diff(s.arrival_s[one]), 10.0)


def test_upper_bound_and_unbounded_capacity():
    s = _fixed().stream(200, 0.5, seed=1)
    p = ReuseProfile.of(s, 0.5)
    assert p.upper_bound == pytest.approx(3450 / 3750)
    assert hit_rate(p, 1e12)[0] == pytest.approx(3450 / 3750, abs=1e-9)
    r = replay(s, block_tokens=1, warmup_frac=0.0)
    assert r.hit_rate(1e12)[0] == pytest.approx(3450 / 3750, abs=1e-9)


def test_characteristic_time_hand_derived():
    # 2 turns, 100 new tokens each, answers not kept, gaps of 10 s: after turn 1 a session holds
    # 100 tokens for min(10, T), after turn 2 200 tokens for T; at T = 20 the cache holds
    # lambda (100 x 10 + 200 x 20) = 5,000 lambda tokens and turn 2 finds its 100-token history:
    # hit = 100 / (100 + 200)
    lam = 0.3
    p = ReuseProfile.of(_fixed(turns=2, new=100, out=1, system=0, think=10.0, kept=0.0).stream(50, lam, 0), lam)
    assert characteristic_time(p, 5000 * lam)[0] == pytest.approx(20.0, rel=1e-6)
    assert hit_rate(p, 5000 * lam)[0] == pytest.approx(1 / 3)
    assert hit_rate(p, 600 * lam)[0] == 0.0          # T = 600/300 = 2 s < 10 s gap: every history evicted


@pytest.mark.parametrize("preset", ["chat", "coding_agent", "deep_research"])
def test_hit_rate_monotone_and_within_10_points_of_the_lru_replay(preset):
    w = SessionWorkload(rate=5.0, sessions=Sessions(preset=preset, max_context=131072))
    rate = w.session_rate / 4                              # one of four instances
    p = ReuseProfile.of(w.stream(), w.session_rate, w.sessions.think).at_rate(rate)
    sim = replay(w.sessions.stream(1500, rate, seed=99))
    caps = np.geomspace(1e3, 1e8, 21)
    a, b = hit_rate(p, caps), sim.hit_rate(caps)
    assert np.all(np.diff(a) >= -1e-12) and np.all(np.diff(b) >= -1e-12)
    assert np.max(np.abs(a - b)) < 0.10
    assert a[-1] == pytest.approx(p.upper_bound, abs=1e-6)


def test_replay_equals_a_literal_block_lru():
    """The stack-depth replay against an OrderedDict LRU of blocks, tail evicted first."""
    w = _fixed(turns=4, new=40, out=24, system=32, think=3.0)
    s = Sessions(**{**w.model_dump(), "turns": {"dist": "lognormal", "median": 3, "p90": 6, "max": 8},
                    "think": {"dist": "exponential", "mean_s": 4.0}}).stream(60, 2.0, seed=5)
    B = 8
    for cap_blocks in (6, 20, 45, 90):
        lru: OrderedDict = OrderedDict()
        hits = 0
        for sid, hb, ha in zip(s.session, s.reuse - s.system_prompt, s.history_after, strict=True):
            got = 0
            while (sid, got) in lru and got < hb // B:
                got += 1
            hits += got
            for blk in range(ha // B - 1, -1, -1):          # tail first, so the head ends up most recent
                lru[(sid, blk)] = True
                lru.move_to_end((sid, blk))
            for blk in range(s.system_prompt // B):
                lru[("sys", blk)] = True
                lru.move_to_end(("sys", blk))
            while len(lru) > cap_blocks:
                lru.popitem(last=False)
        r = replay(s, block_tokens=B, warmup_frac=0.0)
        expected = np.clip(cap_blocks - r.system_blocks - r.depth, 0, r.history).sum()
        assert expected == hits


def test_tiers_split_the_total():
    w = SessionWorkload(rate=3.0, sessions=Sessions(preset="coding_agent"))
    p = ReuseProfile.of(w.stream(), w.session_rate, w.sessions.think)
    t = tier_hit_rates(p, [2e5, 1e6, 5e6])
    assert np.all(t >= 0)
    assert t.sum() == pytest.approx(hit_rate(p, 6.2e6)[0])


def test_one_turn_no_prefix_is_the_independent_workload():
    inp, out = {"dist": "lognormal", "median": 800, "p90": 3000}, {"dist": "lognormal", "median": 200, "p90": 600}
    plain = Workload(rate=7.0, input=inp, output=out)
    sess = SessionWorkload(rate=7.0, sessions={"turns": {"dist": "fixed", "value": 1}, "new_input": inp, "output": out,
                                               "think": {"dist": "exponential", "mean_s": 1.0}})
    for a, b in zip(plain.joint_support(), sess.joint_support(), strict=True):
        assert np.array_equal(a, b)
    for a, b in zip(plain.sample(500, 3), sess.sample(500, 3), strict=True):
        assert np.array_equal(a, b)
    assert length_stats(plain) == length_stats(sess)
    p = ReuseProfile.of(sess.stream(), sess.session_rate, sess.sessions.think)
    assert p.upper_bound == 0.0


def test_coding_agent_preset_context_by_turn_30():
    # vLLM x Mooncake blog (2026-05-06): context ~80K tokens by turn 30 on Codex/SWE-bench Pro traces
    s = SessionWorkload(rate=1.0, sessions=Sessions(preset="coding_agent")).stream()
    assert 50_000 < s.input_len[s.turn == 29].mean() < 110_000


@pytest.mark.parametrize("row, where, what", [
    (",3,100,10", ":3:1:", "session_id is empty"),
    ("a,-1,100,10", ":3:3:", "earlier than the previous turn"),
    ("a,5,-100,10", ":3:5:", ">= 0"),
    ("a,5,100,x", ":3:9:", "must be a number"),
])
def test_malformed_session_trace(tmp_path, row, where, what):
    f = tmp_path / "t.csv"
    f.write_text(f"session_id,timestamp,input_tokens,output_tokens\na,0,50,5\n{row}\n")
    with pytest.raises(InputError, match=where) as e:
        load_session_trace(str(f))
    assert what in str(e.value) and str(f) in str(e.value)


def test_session_trace_prefixes(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("session_id,timestamp,input_tokens,output_tokens\na,0,1000,100\nb,1,500,50\na,5,1300,80\n"
                 "b,9,300,20\n")
    s = load_session_trace(str(f), 200)
    # a's second prompt (1,300) extends 1,000 + 100; b's (300) is shorter than 550: history rewritten
    assert s.reuse.tolist() == [200, 200, 1100, 200]
    assert s.gap_next_s.tolist()[:2] == [5.0, 8.0]


def test_per_turn_hits_average_to_the_aggregate():
    """First turns hit only the system prompt, later turns their history too when the gap was
    shorter than the characteristic time; token-weighted, that is the aggregate hit rate."""
    w = SessionWorkload(rate=4.0, sessions=Sessions(preset="coding_agent", max_context=131072))
    p = ReuseProfile.of(w.stream(), w.session_rate, w.sessions.think).at_rate(w.session_rate / 3)
    cap = 1.5e6
    t = float(characteristic_time(p, cap)[0])
    h = w.model_copy(update={"cache_tiers": (TierTime(ttl_s=t),)}).support_hits()
    s = w.stream()
    assert (h * s.input_len).sum() / s.input_len.sum() == pytest.approx(hit_rate(p, cap)[0], rel=1e-3)
    first = s.turn == 0
    assert np.allclose(h[first], np.minimum(s.system_prompt / s.input_len[first], 0.999))


def test_tier_capacity_and_load_time_hand_derived():
    """H200 host DRAM: 2 TB per 8-GPU node, half usable = 125 GB per GPU. Llama-3.1-70B, bf16 KV at
    TP8: 80 layers x 2 (K,V) x 1 KV head x 128 x 2 B = 40,960 B per token per GPU, so 125e9 /
    40,960 = 3,051,758 tokens; PCIe Gen5 x16 63 GB/s x 0.8 = 50.4 GB/s: 40,960 / 50.4e9 s/token."""
    from planner.catalog.hardware import hardware
    from planner.catalog.model_catalog import model
    from planner.perf.estimate import resolve_dtypes
    from planner.perf.kv_tiers import instance_tiers
    from planner.perf.parallel import Layout

    m = model("llama-3.1-70b")
    (dram,) = instance_tiers(m, hardware("h200"), Layout.of(8), resolve_dtypes(m, "fp8", "bf16"), ["host_dram"],
                             "h200", 0.0)
    assert dram.tokens == pytest.approx(125e9 / 40960)
    assert dram.load_s_per_token == pytest.approx(40960 / 50.4e9)


def test_inclusive_tiers_reach_only_their_own_size():
    """Write-through DRAM of 3 units behind 1 unit of HBM reaches depth 3 (not 4); one of 0.5
    units (smaller than HBM) serves nothing. Exclusive tiers add up."""
    from planner.serving.prefix_cache import tier_bounds

    assert tier_bounds([1.0, 3.0]).tolist() == [1.0, 4.0]
    assert tier_bounds([1.0, 3.0], inclusive=True).tolist() == [1.0, 3.0]
    w = SessionWorkload(rate=3.0, sessions=Sessions(preset="coding_agent"))
    p = ReuseProfile.of(w.stream(), w.session_rate, w.sessions.think)
    inc = tier_hit_rates(p, [1e6, 3e6], inclusive=True)
    assert inc.sum() == pytest.approx(hit_rate(p, 3e6)[0])
    assert tier_hit_rates(p, [1e6, 5e5], inclusive=True)[1] == 0.0
