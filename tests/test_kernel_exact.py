"""The search kernel's later speed-ups change no bit either (see test_roofline_exact for the first
ones): collectives that skip branches no row takes, operators timed once for equal inputs, sums
written into the prefill temporaries, powers taken only where a mask holds, one kernel latency
where no row is idle, curves that skip what their caller never reads, shared layout degrees and
cached stored parameters. Each is checked against the plain expression it replaced."""

import numpy as np
import pytest

import planner
from planner.catalog.dtypes import DType
from planner.catalog.frameworks import with_framework
from planner.perf.comm import all_to_all_latency, collective_time, ep_all_to_all_time, link_of, measured_busbw
from planner.perf.memory import free_kv_bytes_device
from planner.perf.ops import DTypes, Op, OpKind, Step, _combined_imbalance, layer_ops, merge_ops
from planner.perf.parallel import Layout
from planner.perf.roofline import StepTime, build_step, op_time, step_overhead_s
from planner.serving.batching import Engine
from planner.serving.queueing import load_grid, serving_curve
from planner.serving.workload import Workload, length_stats


def _bits(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x, dtype=float)).tobytes()


def _same(a, b) -> bool:
    return np.shape(a) == np.shape(b) and _bits(a) == _bits(b)


def _old_collective_time(hw, kind, payload_bytes, group):
    """comm.collective_time as it was before its shortcuts (every branch evaluated)."""
    group = np.asarray(group, dtype=float)
    bw, lat = link_of(hw, group)
    hop = hw.scale_up.ring_hop_latency
    if kind == "all_reduce" and hop is not None:
        lat = np.where(group <= hw.domain_size, 2.0 * (group - 1) * hop.value, lat)
    factor = 1.0 if kind == "p2p" else {"all_reduce": 2.0, "all_to_all": 1.0}[kind] * (group - 1) / np.maximum(group, 1)
    if kind == "all_to_all" and hw.scale_up.topology == "torus2d":
        factor = factor * np.where(group <= hw.domain_size, np.maximum(np.sqrt(group) / 2, 1.0), 1.0)
    payload = np.asarray(payload_bytes, dtype=float)
    t = factor * payload / bw + lat
    sweep = hw.scale_up.all_reduce_sweep
    if kind == "all_reduce" and hop is None and sweep is not None:
        f2 = 2.0 * (group - 1) / np.maximum(group, 1)
        one_shot, measured = (group - 1) * payload / bw + lat, f2 * payload / measured_busbw(sweep.path, payload)
        t = np.where(group <= hw.domain_size, np.minimum(one_shot, np.maximum(t, measured)), t)
    return np.where(group > 1, t, 0.0)


def _old_ep_all_to_all_time(hw, intra_bytes, token_bytes, draws, group):
    group = np.asarray(group, dtype=float)
    dom = float(hw.domain_size)
    up_bw = hw.scale_up.bandwidth_per_direction.value * hw.efficiency.scale_up.value
    out_bw = hw.scale_out.bandwidth_per_direction.value * hw.efficiency.scale_out.value
    intra = np.asarray(intra_bytes, dtype=float)
    t_in = (group - 1) / np.maximum(group, 1) * intra / up_bw + all_to_all_latency(hw, group)
    nodes = np.maximum(np.ceil(group / dom), 1.0)
    reached = nodes * (1 - (1 - 1 / nodes) ** np.asarray(draws, dtype=float))
    t_nic = reached * (nodes - 1) / nodes * np.asarray(token_bytes, dtype=float) / out_bw
    t_fwd = (dom - 1) / dom * intra / up_bw
    kernel = (hw.scale_up.all_to_all_latency or hw.scale_up.latency).value + hw.scale_out.latency.value
    t = np.where(group <= dom, t_in, np.maximum(t_nic, t_fwd) + kernel)
    return np.where((group > 1) & (intra > 0), t, 0.0)


def _payloads(rng, shape):
    x = rng.lognormal(12, 4, shape)
    x.flat[::7] = 0.0
    x.flat[3] = np.nan
    return x


@pytest.mark.parametrize("name", ["h100-sxm", "gb200-nvl72", "a10g", "tpu-v6e", "trn2", "cloudmatrix384",
                                  "ascend-910c"])
def test_collectives_equal_every_branch_evaluated(name):
    hw = planner.hardware(name)
    rng = np.random.default_rng(1)
    dom = hw.domain_size
    groups = [np.array([1, 2, 4, 8])[:, None, None], np.array([2, 4, 8])[:, None, None],
              np.array([1, 2 * dom, 4 * dom])[:, None, None], np.array([dom, 2 * dom])[:, None, None], 4]
    for group in groups:
        payload = _payloads(rng, (np.size(group), 3, 5))
        for kind in ("all_reduce", "all_to_all", "p2p"):
            assert _same(collective_time(hw, kind, payload, group), _old_collective_time(hw, kind, payload, group))
        tokens = _payloads(rng, payload.shape)
        for draws in (1.0, 4.0, 8.0):
            want = _old_ep_all_to_all_time(hw, payload, tokens, draws, group)
            assert _same(ep_all_to_all_time(hw, payload, tokens, draws, group), want)
            lazy = ep_all_to_all_time(hw, payload, lambda t=tokens: t, draws, group)   # tokens given lazily
            assert _same(lazy, want)
    assert _same(collective_time(hw, "all_reduce", 32768.0, 8), _old_collective_time(hw, "all_reduce", 32768.0, 8))


def test_combined_imbalance_on_load_grids_with_nan_inf_and_ones():
    def formula(a, b):
        ex, ey = np.asarray(a, float) - 1, np.asarray(b, float) - 1
        with np.errstate(divide="ignore"):
            inv = np.where(ex > 0, ex ** -2.0, np.inf) + np.where(ey > 0, ey ** -2.0, np.inf)
        return 1 + np.where(np.isfinite(inv), inv ** -0.5, 0.0)

    rng = np.random.default_rng(2)
    for _ in range(40):
        c = int(rng.integers(1, 300))
        gx = rng.uniform(0.5, 3, (c, 1, 48)) ** rng.uniform(0, 8)
        gy = rng.uniform(0.9, 1e5, (c, 3, 48)) ** rng.uniform(0, 2)
        gx[rng.uniform(size=gx.shape) < 0.2] = 1.0
        gy[rng.uniform(size=gy.shape) < 0.2] = 1.0
        gx[rng.uniform(size=gx.shape) < 0.02] = np.nan
        gy[rng.uniform(size=gy.shape) < 0.02] = np.inf
        assert _same(_combined_imbalance(gx, gy), formula(gx, gy))
        assert _same(_combined_imbalance(gy, gx), formula(gy, gx))
    # scalars and 0-d arrays keep numpy's scalar power (the C library's, not the array loop's)
    for a, b in ((3.0, np.array([7.9765625])), (np.float64(2.5), 7.5), (np.asarray(3.3), np.asarray(1.7)),
                 (np.array([3.0]), 7.9765625), (6.0, 15.9765625)):
        assert _same(_combined_imbalance(a, b), formula(a, b))


def _iteration_ops(model, hw_name, framework=None):
    """A block's decode and prefill operators as the load grid builds them (a few layouts, NaN rows)."""
    m = planner.model(model)
    hw = with_framework(planner.hardware(hw_name), framework)
    lay = Layout.of(*(np.array(v)[:, None, None] for v in ([1, 2, 8, 1, 4], [8, 2, 8, 1, 8], [3, 1, 2, 1, 1])))
    n = np.geomspace(0.02, 300, 6)[None, None, :] * np.ones((5, 1, 1))
    n[1] = np.nan                                      # an infeasible row: NaN all along
    dec = layer_ops(m, lay, Step.lean(np.maximum(n, 1.0) / lay.pp, 1.0, 2000.0), DTypes())
    pt = np.concatenate([0 * n, np.minimum(4000, 8192 - n), 8192 - n], axis=1)
    pre = layer_ops(m, lay, Step.lean(pt / lay.pp / 4000.0, 4000.0, 0.0), DTypes())
    return m, hw, lay, dec, pre, np.maximum(n, 1.0) + pt / 4000.0


@pytest.mark.parametrize("model,hw_name,framework", [("qwen3-235b-a22b", "h100-sxm", None),
                                                     ("deepseek-v3", "gb200-nvl72", "sglang"),
                                                     ("llama-3.1-70b", "mi300x", None)])
def test_merge_into_prefill_temporaries_and_timing_once_change_nothing(model, hw_name, framework):
    m, hw, lay, dec, pre, batch = _iteration_ops(model, hw_name, framework)
    plain = merge_ops(dec, pre)
    shared = [op.flops for op in pre if isinstance(op.flops, np.ndarray)]
    kept = [x.copy() for x in shared]
    consumed = merge_ops(dec, pre, consume_b=True)
    fields = ("flops", "weight_bytes", "act_bytes", "kv_bytes", "comm_bytes", "remote_bytes", "imbalance", "keys")
    for x, y in zip(plain, consumed, strict=True):
        assert x.name == y.name
        assert all(_same(getattr(x, f), getattr(y, f)) for f in fields)
    assert any(not _same(a, b) for a, b in zip(shared, kept, strict=True))   # sums were written into them
    # every operator timed on its own (no sharing) equals the step that times equal inputs once
    alone = StepTime([op_time(hw, op, DTypes()) for op in consumed], step_overhead_s(hw, lay, batch),
                     hw.efficiency.overlap_moe_comm, hw.efficiency.comm_compute_share.value)
    step = build_step(hw, consumed, DTypes(), lay, batch)
    assert [t.op.name for t in step.ops] == [op.name for op in consumed]
    assert all(_same(a.time_s, b.time_s) for a, b in zip(alone.ops, step.ops, strict=True))
    assert _same(alone.total_s, step.total_s)
    assert len({id(t.time_s) for t in step.ops}) < len(step.ops)          # some were timed once
    parts, want = step.time_by_bound(), alone.time_by_bound()
    assert all(_same(parts[b], want[b]) for b in want)


def test_one_kernel_latency_where_no_row_is_idle():
    hw = planner.hardware("h100-sxm")
    lat = hw.efficiency.kernel_latency.value
    moved = np.array([[1e6, 2e6], [np.nan, 3e6]])
    for op in (Op("norms", OpKind.elementwise, 3, act_bytes=moved),
               Op("norms", OpKind.elementwise, 3, act_bytes=np.array([[1e6, 0.0], [np.nan, 3e6]])),
               Op("attention", OpKind.attention, 2, flops=np.array([[0.0, 5e9], [np.nan, 1e9]]), act_bytes=moved,
                  keys=np.full((2, 2), 300.0))):
        t = op_time(hw, op, DTypes())
        busy = (np.asarray(op.flops) > 0) | (np.asarray(op.act_bytes) > 0)
        want = (np.maximum(t.compute_s, t.memory_s) + lat * busy) * op.count
        assert _same(t.time_s, want)


def test_a_decode_pool_curve_and_a_curve_of_some_percentiles_are_the_full_curves_numbers():
    m, hw = planner.model("qwen3-235b-a22b"), planner.hardware("h200")
    lay = Layout.of([1, 2, 4, 8, 8], [8, 8, 8, 8, 1], [4, 2, 1, 1, 2])
    stats = length_stats(Workload(rate=5, input={"dist": "fixed", "value": 3000},
                                  output={"dist": "fixed", "value": 400}))
    eng, dt = Engine(), DTypes(weight=DType.fp8)
    g = load_grid(m, hw, lay, dt, eng, stats, power=False)
    full = serving_curve(m, hw, lay, dt, eng, stats, load=g, power=True)
    decode = serving_curve(m, hw, lay, dt, eng, stats, load=g, power=False, percentiles=("p90",), ttft=False)
    some = serving_curve(m, hw, lay, dt, eng, stats, load=g, power=False, percentiles=("p50",))
    assert decode.ttft == {} and decode.e2e == {} and set(decode.tpot) == {"mean", "p90"}
    for k in ("mean", "p90"):
        assert _same(decode.tpot[k], full.tpot[k])
    assert _same(decode.rate, full.rate) and _same(decode.rho, full.rho)
    assert set(some.ttft) == set(some.e2e) == {"mean", "p50"}
    for metric in ("ttft", "tpot", "e2e"):
        for k in ("mean", "p50"):
            assert _same(getattr(some, metric)[k], getattr(full, metric)[k])
    assert np.isnan(decode.power_w).all() and np.isnan(full.power_w).all()   # no iteration powers: none averaged


def test_layout_degrees_are_shared_read_only_and_stored_parameters_keep_the_layouts_shape():
    lay = Layout.of([1, 2, 4], [8, 2, 1], 3)
    assert lay.stage_devices is lay.stage_devices and lay.devices is lay.devices
    for x in (lay.tp, lay.stage_devices, lay.attention_dp, lay.expert_tp, lay.devices):
        assert not x.flags.writeable
    m, hw = planner.model("mixtral-8x7b"), planner.hardware("h100-sxm")
    one = free_kv_bytes_device(m, hw, Layout.of([1], [4], [1]), DTypes())   # a 1-element layout first,
    zero_d = free_kv_bytes_device(m, hw, Layout.of(1, 4, 1), DTypes())       # then the 0-d one: not its cache
    assert np.shape(one) == (1,) and np.shape(zero_d) == ()
    assert float(zero_d) == float(one[0])
