"""The search engine: vectorized results equal plain per-candidate evaluations; Pareto fronts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.perf.estimate import evaluate
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.run import run_scenario
from planner.scenario import load_scenario
from planner.search import pareto_front


def test_vectorized_roofline_equals_per_candidate_estimates():
    from planner.catalog.frameworks import with_framework

    m, hw = planner.model("llama-3.1-70b"), with_framework(planner.hardware("h100-sxm"))
    rng = np.random.default_rng(3)
    tp, batch = rng.choice([2, 4, 8], 40), rng.integers(1, 64, 40)
    inp, out = rng.integers(128, 4096, 40), rng.integers(16, 512, 40)
    r = evaluate(m, hw, Layout.of(tp, 1, 1), batch, inp, out, DTypes())
    for k in range(40):
        e = planner.estimate(m, hw, tp=int(tp[k]), batch=int(batch[k]), input_len=int(inp[k]), output_len=int(out[k]))
        assert r.ttft_s[k] == pytest.approx(e.ttft_s, rel=1e-12)
        assert r.tpot_s[k] == pytest.approx(e.tpot_s, rel=1e-12)
        assert bool(r.memory.fits[k]) == e.fits


def test_vectorized_serving_curves_equal_single_candidate_curves():
    from planner.serving.batching import Engine
    from planner.serving.queueing import serving_curve
    from planner.serving.workload import Workload, length_stats

    m, hw = planner.model("llama-3.1-70b"), planner.hardware("h200")
    stats = length_stats(Workload(rate=1, trace="azure-conv-2023"))
    tps = np.array([2, 4, 8])
    many = serving_curve(m, hw, Layout.of(tps, 1, 1), DTypes(), Engine(), stats)
    for k, t in enumerate(tps):
        one = serving_curve(m, hw, Layout.of(int(t), 1, 1), DTypes(), Engine(), stats)
        assert np.allclose(many.rate[k], one.rate[0], equal_nan=True)
        assert np.allclose(many.tpot["p90"][k], one.tpot["p90"][0], equal_nan=True)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=60))
def test_pareto_front_matches_brute_force(points):
    pts = np.array(points, dtype=float)
    for k in (2, 3):
        got = set(pareto_front(*(pts[:, i] for i in range(k))).tolist())
        sub = pts[:, :k]
        brute = {i for i in range(len(sub)) if not any(np.all(sub[j] <= sub[i]) and np.any(sub[j] < sub[i])
                                                        for j in range(len(sub)))}
        if k == 3:
            assert got == brute
        else:   # two objectives: one representative per set of duplicates
            assert {tuple(sub[i]) for i in got} == {tuple(sub[i]) for i in brute}


def test_slo_search_scenario():
    from pathlib import Path
    r = run_scenario(load_scenario(Path(__file__).resolve().parent.parent / "scenarios/llama70b-slo-search.yaml"))
    modes = {(b.hardware, b.mode) for b in r.best}
    assert modes == {(h, m) for h in ("h100-sxm", "h200") for m in ("aggregated", "disaggregated")}
    for b in r.best:
        assert b.ttft_s <= 1.0 + 1e-9 and b.tpot_s <= 0.05 + 1e-9
    h200 = max(b.tokens_per_s_per_gpu for b in r.best if b.hardware == "h200")
    h100 = max(b.tokens_per_s_per_gpu for b in r.best if b.hardware == "h100-sxm")
    assert h200 >= h100                       # same compute, more HBM bandwidth and capacity
    gpu = [c.tokens_per_s_per_gpu for c in r.pareto]
    user = [c.tokens_per_s_per_user for c in r.pareto]
    assert gpu == sorted(gpu, reverse=True) and user == sorted(user)     # a proper trade-off curve
