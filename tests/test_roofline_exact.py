"""The roofline's speed-ups change no bit: exact shortcuts (powers of two folded into small factors,
ones and zeros left out, decode operators shared by the three iterations of a load point, powers
skipped) against the plain expressions they replace, and every row's figures are its own whatever
shares its array (the property that makes a streaming search independent of its block size)."""

import functools
import operator

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner
from planner.catalog.dtypes import DType
from planner.catalog.frameworks import with_framework
from planner.perf.ops import DTypes, Per, _combined_imbalance, scaled
from planner.perf.parallel import Layout
from planner.search import RunningFront, layouts, pareto_front
from planner.serving.batching import Engine, iteration
from planner.serving.queueing import load_grid
from planner.serving.workload import Workload, length_stats


def _bits(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x, dtype=float)).tobytes()


_FACTOR = st.one_of(
    st.sampled_from([1, 2, 4, 0.5, 0.25, 128, 4096, 1.0, 2.0]),              # powers of two (exact scalings)
    st.floats(1e-3, 1e6, allow_nan=False, allow_infinity=False),            # anything else
    st.sampled_from([3, 7, 7168, 0.3, 1 / 3]),
    st.lists(st.sampled_from([1, 2, 4, 8, 64]), min_size=5, max_size=5).map(lambda v: np.array(v)[:, None]),
    st.lists(st.sampled_from([1, 3, 4, 6, 20]), min_size=5, max_size=5).map(lambda v: np.array(v, float)[:, None]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_FACTOR, st.booleans()), min_size=1, max_size=5), st.integers(0, 2**32 - 1))
def test_scaled_is_the_left_to_right_product_bit_for_bit(factors, seed):
    rng = np.random.default_rng(seed)
    x = rng.lognormal(0, 8, (5, 7))
    x[0, 0], x[1, 1], x[2, 2] = 0.0, np.nan, np.inf          # zero, NaN and inf rows stay what they were
    want = functools.reduce(lambda a, fd: operator.truediv(a, fd[0]) if fd[1] else a * fd[0], factors, x.copy())
    got = scaled(x.copy(), *(Per(f) if d else f for f, d in factors))
    assert np.shape(got) == np.shape(want)
    assert _bits(got) == _bits(want)


@given(st.floats(0.5, 40), st.lists(st.floats(0.5, 40), min_size=1, max_size=6))
def test_combined_imbalance_shortcut_equals_the_formula(gx, gy):
    def formula(a, b):
        ex, ey = np.asarray(a, float) - 1, np.asarray(b, float) - 1
        with np.errstate(divide="ignore"):
            inv = np.where(ex > 0, ex ** -2.0, np.inf) + np.where(ey > 0, ey ** -2.0, np.inf)
        return 1 + np.where(np.isfinite(inv), inv ** -0.5, 0.0)

    ys = np.array(gy)
    for a, b in ((gx, ys), (ys, gx), (1.0, ys), (ys, 1.0), (gx, 1.0), (1.0, 1.0), (gx, gy[0])):
        assert _bits(np.broadcast_to(_combined_imbalance(a, b), np.broadcast_shapes(np.shape(a), np.shape(b)))) \
            == _bits(np.broadcast_to(formula(a, b), np.broadcast_shapes(np.shape(a), np.shape(b))))


_CASES = [("qwen3-235b-a22b", "h100-sxm", Engine()), ("deepseek-v3", "cloudmatrix384", Engine(framework="sglang")),
          ("llama-3.1-70b", "mi300x", Engine(chunked_prefill=False)), ("qwen3-next-80b-a3b", "b200", Engine()),
          ("gpt-oss-120b", "trn2", Engine(mtp_tokens=2, mtp_acceptance=0.6)), ("bloom-176b", "a100-80g", Engine())]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(_CASES), dtype=st.sampled_from(["bf16", "fp8", "fp4"]), seed=st.integers(0, 10**6),
       size=st.integers(2, 40))
def test_every_row_is_its_own_whatever_shares_its_array(case, dtype, seed, size):
    """A block of candidates and each candidate alone give the same bits (time, power and the whole
    load grid), with or without powers: the shortcuts that look at a whole array (all ones, all
    powers of two, no pipeline, no all-to-all) never change a row."""
    name, hw_name, engine = case
    m, hw = planner.model(name), with_framework(planner.hardware(hw_name), engine.framework)
    lay = layouts(m, hw, [1, 2, 4, 8, 16], [1, 2, 4, 8, 32, 64], [1, 2, 3, 4, 8])
    pick = np.random.default_rng(seed).choice(lay.tp.size, min(size, lay.tp.size), replace=False)
    lay = Layout(lay.tp[pick], lay.ep[pick], lay.pp[pick])
    dt = DTypes(weight=DType(dtype))
    stats = length_stats(Workload(rate=1, input={"dist": "fixed", "value": 3000},
                                  output={"dist": "fixed", "value": 300}))
    whole = load_grid(m, hw, lay, dt, engine, stats)
    lean = load_grid(m, hw, lay, dt, engine, stats, power=False)
    fields = ("n", "chunk", "packed", "t_dec", "t_chunk", "t_packed", "p_dec", "p_chunk")
    for f in fields[:6]:
        assert _bits(getattr(lean, f)) == _bits(getattr(whole, f))
    assert np.isnan(lean.p_dec).all()
    for i in range(lay.tp.size):
        one = load_grid(m, hw, Layout(lay.tp[i:i + 1], lay.ep[i:i + 1], lay.pp[i:i + 1]), dt, engine, stats)
        for f in fields:
            assert _bits(getattr(one, f)) == _bits(getattr(whole, f)[i:i + 1]), (f, i)
    it = iteration(m, hw, lay, dt, 8.0, 2000.0, 512.0, 3000.0)
    for i in range(lay.tp.size):
        one = iteration(m, hw, Layout(lay.tp[i:i + 1], lay.ep[i:i + 1], lay.pp[i:i + 1]), dt, 8.0, 2000.0, 512.0,
                        3000.0)
        assert _bits(one.time_s) == _bits(it.time_s[i:i + 1]) and _bits(one.power_w) == _bits(it.power_w[i:i + 1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=80), st.integers(1, 9))
def test_dropping_what_the_held_front_dominates_changes_nothing(points, size):
    pts = np.array(points, dtype=float)
    f = RunningFront()
    for start in range(0, len(pts), size):
        part = pts[start:start + size]
        keep = np.flatnonzero(f.undominated(part[:, 0], part[:, 1]))
        f.add(part[keep, 0], part[keep, 1], seq=np.arange(start, start + len(part))[keep])
    assert f.rows["seq"].tolist() == pareto_front(pts[:, 0], pts[:, 1]).tolist()
