"""KV-tier loads in TTFT (layer-wise overlap), per-turn hits in the simulator, session workloads in
the Splitwise design and PrfaaS sites through one pool-cache function."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog.dtypes import DType
from planner.catalog.hardware import hardware
from planner.catalog.model_catalog import model
from planner.designs.kv_cache import KVCacheSpec, pool_cache, site_cache
from planner.perf.kv_tiers import exposed_prefill_s
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving.batching import Engine
from planner.serving.prefix_cache import ReuseProfile, characteristic_time, hit_rate
from planner.serving.queueing import serving_curve
from planner.serving.sessions import SessionWorkload, TierTime
from planner.serving.simulate import simulate
from planner.serving.workload import Workload, length_stats


def _pipeline(compute_s: float, load_s: float, layers: int) -> float:
    """Literal two-stage pipeline: layer l computes once its load is in and layer l-1 is done; the
    link loads the layers one after another."""
    c, d = compute_s / layers, load_s / layers
    loaded, done = 0.0, 0.0
    for _ in range(layers):
        loaded += d
        done = max(done, loaded) + c
    return done


def test_layerwise_overlap_hand_derived():
    # 80 layers. Load 200 ms, compute 80 ms: the load dominates and the last layer's compute
    # (1 ms) trails it: 201 ms. Compute 200 ms, load 40 ms: the first layer's load (0.5 ms) leads.
    assert float(exposed_prefill_s(0.080, 0.200, 80)) == pytest.approx(0.201)
    assert float(exposed_prefill_s(0.200, 0.040, 80)) == pytest.approx(0.2005)
    assert float(exposed_prefill_s(0.123, 0.0, 80)) == 0.123        # nothing to load: the prefill alone
    rng = np.random.default_rng(0)
    for c, d, n in zip(rng.uniform(0, 1, 20), rng.uniform(0, 1, 20), rng.integers(1, 100, 20), strict=True):
        assert float(exposed_prefill_s(c, d, int(n))) == pytest.approx(_pipeline(c, d, int(n)))


def _offload_workload() -> tuple[SessionWorkload, ReuseProfile]:
    w = SessionWorkload(rate=4.0, sessions={"preset": "coding_agent", "max_context": 131072})
    return w, ReuseProfile.of(w.stream(), w.session_rate, w.sessions.think).at_rate(w.session_rate / 3)


def test_analytic_ttft_pays_the_load_beyond_compute():
    """Once a turn's load exceeds its compute, TTFT grows one for one with it; below, by 1/layers."""
    m, hw = model("llama-3.1-8b"), hardware("h100-sxm")
    lay, dt = Layout.of(1), DTypes(weight=DType.bf16, kv=DType.bf16)
    base = length_stats(Workload(rate=1.0, input={"dist": "fixed", "value": 2000},
                                 output={"dist": "fixed", "value": 100}))

    def ttft(load: float) -> np.ndarray:
        s = base.model_copy(update={"mean_load_s": load, "load_quantiles": (load,) * 3})
        return serving_curve(m, hw, lay, dt, Engine(), s).ttft

    t0, t5, t10, ta, tb = ttft(0.0), ttft(5.0), ttft(10.0), ttft(1e-4), ttft(2e-4)
    for k in ("mean", "p90"):
        ok = np.isfinite(t0[k])
        assert np.allclose((t10[k] - t5[k])[ok], 5.0)
        assert np.allclose((tb[k] - ta[k])[ok], 1e-4 / m.num_layers)
        assert np.all(t5[k][ok] > t0[k][ok] + 4.5)


def test_simulated_ttft_with_a_tier_load_hand_derived():
    """One request alone: its prefill iteration takes tau; loading 2 tau of hits layer by layer
    makes it 2 tau + tau / layers."""
    m, hw = model("llama-3.1-8b"), hardware("h100-sxm")
    args = (m, hw, Layout.of(1), DTypes(weight=DType.bf16, kv=DType.bf16), Engine(),
            np.array([0.0]), np.array([3000]), np.array([2]))
    host = hw.efficiency.request_overhead.value
    tau = float(simulate(*args, warmup_frac=0.0).ttft_s[0]) - host
    loaded = float(simulate(*args, warmup_frac=0.0, load_s=np.array([2 * tau])).ttft_s[0]) - host
    assert loaded == pytest.approx(2 * tau + tau / m.num_layers)


def test_simulated_hits_per_turn_average_to_the_analytic():
    """Per-turn draws (each turn's own gap against the characteristic times) average, token-weighted,
    within 2 points of Che's hit rate; first turns hit only the system prompt; some later turns
    outlive the cache and are cold."""
    w, p = _offload_workload()
    caps = [1.0e5, 3.0e5]              # two tiers' cumulative reach (tokens): idle sessions live 1.5 s, 5.1 s
    ttl = characteristic_time(p, caps)
    w = w.model_copy(update={"cache_tiers": (TierTime(ttl_s=float(ttl[0])),
                                             TierTime(ttl_s=float(ttl[1]), load_s_per_token=1e-6))})
    n = 20_000
    _, inp, _ = w.sample(n, 5)
    hits, load = w.sample_cache(n, 5)
    mean = float((hits * inp).sum() / inp.sum())
    assert mean == pytest.approx(float(hit_rate(p, caps[-1])[0]), abs=0.02)
    s, idx = w._sample_stream(n, 5)
    first = s.turn[idx] == 0
    assert np.allclose(hits[first], np.minimum(s.system_prompt / inp[first], 0.999))
    later = ~first
    cold = later & np.isclose(hits, s.system_prompt / inp)
    assert 0 < cold.sum() < later.sum()
    assert np.all(load[first] == 0) and (load[later] > 0).any()          # second-tier hits pay a load
    # the analytic moments use the same tiers in expectation: their mean load matches the draws'
    assert float(np.mean(w.support_loads())) == pytest.approx(float(load.mean()), rel=0.1)


def test_one_turn_sessions_simulate_as_independent_requests():
    inp, out = {"dist": "lognormal", "median": 800, "p90": 3000}, {"dist": "lognormal", "median": 200, "p90": 600}
    plain = Workload(rate=7.0, input=inp, output=out, prefix_hit=0.2)
    sess = SessionWorkload(rate=7.0, prefix_hit=0.2, sessions={
        "turns": {"dist": "fixed", "value": 1}, "new_input": inp, "output": out,
        "think": {"dist": "exponential", "mean_s": 1.0}}, cache_tiers=[{"ttl_s": 5.0, "load_s_per_token": 1e-5}])
    from planner.designs.colocated import Deployment, verify_by_simulation
    from planner.serving.slo import SLO

    d = Deployment.model_construct(hardware="h100-sxm", tp=1, ep=1, pp=1, weight_dtype="bf16", kv_dtype="bf16",
                                   instances=2)
    slo = SLO(ttft_s={"p90": 5.0})
    m = model("llama-3.1-8b")
    a, b = (verify_by_simulation(m, d, w, slo, Engine(), 1500, 4) for w in (plain, sess))
    assert a == b


def _splitwise(tmp_path, prompt_count: int):
    from planner.designs.splitwise import SplitwiseSpec, plan_splitwise
    from planner.serving.slo import SLO

    spec = SplitwiseSpec(designs=[{"name": "s", "prompt": {"hardware": "h200", "tp": 8, "count": prompt_count},
                                   "token": {"hardware": "h200", "tp": 8, "count": 4}}],
                         baselines=[{"name": "b", "pool": {"hardware": "h200", "tp": 8, "count": prompt_count}}],
                         weight_dtype="fp8")
    w = SessionWorkload(rate=10.0, sessions={"preset": "coding_agent", "max_context": 131072})
    return plan_splitwise(model("llama-3.1-70b"), spec, w, SLO(ttft_s={"p90": 2.0}, tpot_s={"p90": 0.05}), Engine(),
                          {"h200": 5.408}, "t", KVCacheSpec(tiers=["hbm", "host_dram"], simulate=False)), w


def test_splitwise_prompt_pool_holds_the_session_cache(tmp_path):
    """A session workload's hit rate in a Splitwise design is its prompt pool's, reported per tier,
    from the same function as a PrfaaS site's; more prompt machines hold more sessions."""
    r2, w = _splitwise(tmp_path, 2)
    r4, _ = _splitwise(tmp_path, 4)
    base, split = r2.rows
    assert split.cache is not None and [t.tier for t in split.cache.tiers] == ["hbm", "host_dram"]
    assert split.cache.hit_rate == pytest.approx(sum(t.hit_rate for t in split.cache.tiers))
    assert r4.rows[1].cache.hit_rate > split.cache.hit_rate
    assert split.cache.sessions_per_s_per_instance == pytest.approx(w.session_rate / 2)
    m = model("llama-3.1-70b")
    kv = KVCacheSpec(tiers=["hbm", "host_dram"], simulate=False)
    site = site_cache(m, w, kv, "h200", 8, 1, 2, "fp8", "bf16")[1]
    assert site.hit_rate == pytest.approx(split.cache.hit_rate)
    # the Splitwise prompt pool = pool_cache on the prompt machines
    direct = pool_cache(m, w, kv, hardware("h200"), Layout.of(8), DTypes(weight=DType.fp8, kv=DType.bf16), 2)[1]
    assert direct.tiers == split.cache.tiers
    assert base.cache.hit_rate == pytest.approx(split.cache.hit_rate)   # same machines, same count


def test_splitwise_session_scenario_reports_each_rows_cache():
    from pathlib import Path

    from typer.testing import CliRunner

    from planner.cli import app

    path = Path(__file__).resolve().parent.parent / "scenarios" / "coding-agent-h200-splitwise.yaml"
    r = CliRunner().invoke(app, ["plan", str(path)], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "prefix cache of colocated-8 (its prefilling machines)" in r.output
    assert "prefix cache of split-4P4T (its prefilling machines)" in r.output and "host_dram" in r.output
