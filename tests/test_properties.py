"""Physical invariants of the roofline engine, checked on random shapes (hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.catalog.hardware import Bandwidth, FlopRate
from planner.perf.estimate import evaluate
from planner.perf.ops import DTypes, Step
from planner.perf.parallel import Layout, layout_problems
from planner.perf.roofline import step_time

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b-a3b", "bloom-176b"]
HARDWARE = ["a100-80g", "h100-sxm", "mi300x", "ascend-910c", "b200"]

shapes = st.fixed_dictionaries(dict(
    model=st.sampled_from(MODELS), hw=st.sampled_from(HARDWARE),
    tp=st.sampled_from([1, 2, 4, 8]), ep=st.sampled_from([1, 2, 8]),
    batch=st.integers(1, 256), q=st.integers(1, 8192), ctx=st.integers(0, 32768),
))


def _valid(s):
    m = planner.model(s["model"])
    lay = Layout.of(s["tp"], s["ep"] if m.moe else 1, 1)
    return m, lay, not layout_problems(m, lay)[()]


def _scaled(hw, bw=1.0, flops=1.0):
    mem = hw.memory.model_copy(update={"bandwidth": Bandwidth(value=hw.memory.bandwidth.value * bw, source="x")})
    peaks = {k: FlopRate(value=v.value * flops, source="x") for k, v in hw.peak_flops.items()}
    return hw.model_copy(update={"memory": mem, "peak_flops": peaks})


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_time_never_below_roofline_bound(s):
    m, lay, ok = _valid(s)
    if not ok:
        return
    hw = planner.hardware(s["hw"])
    st_ = step_time(m, hw, lay, Step.of(s["batch"], s["q"], s["ctx"]), DTypes())
    flops = sum(t.op.count * np.asarray(t.op.flops) for t in st_.ops)
    nbytes = sum(t.op.count * np.asarray(t.op.mem_bytes) for t in st_.ops)
    bound = max(flops / hw.peak_flops_per_s(DTypes().weight), nbytes / hw.memory.bandwidth.value)
    assert float(st_.total_s) >= bound * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(shapes, st.floats(1.0, 4.0), st.floats(1.0, 4.0))
def test_more_bandwidth_or_flops_never_slower(s, bw_gain, flop_gain):
    m, lay, ok = _valid(s)
    if not ok:
        return
    hw = planner.hardware(s["hw"])
    args = (lay, s["batch"], min(s["q"], 4096), 64, DTypes())
    base = evaluate(m, hw, *args)
    faster_mem = evaluate(m, _scaled(hw, bw=bw_gain), *args)
    faster_alu = evaluate(m, _scaled(hw, flops=flop_gain), *args)
    for other in (faster_mem, faster_alu):
        assert float(other.ttft_s) <= float(base.ttft_s) * (1 + 1e-12)
        assert float(other.tpot_s) <= float(base.tpot_s) * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 64))
def test_more_tp_never_more_weight_bytes_per_device(model_name, batch):
    m = planner.model(model_name)
    hw = planner.hardware("h100-sxm")
    tps = np.array([t for t in (1, 2, 4, 8) if not layout_problems(m, Layout.of(t, 1, 1))[()]])
    r = evaluate(m, hw, Layout.of(tps, 1, 1), batch, 512, 64, DTypes())
    weights = np.asarray(r.memory.weights)
    assert np.all(np.diff(weights) <= 0)
