"""Streaming search (blocks reduced at once) equals the in-memory search it replaced: the same
best configurations and the same Pareto front, on bundled scenarios and random search spaces."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle_slo_search import plan_slo_search as oracle

import planner
from planner.catalog.dtypes import DType
from planner.designs.slo_search import SloSearchSpec, plan_slo_search
from planner.errors import InfeasibleError
from planner.scenario import load_scenario
from planner.search import RunningFront, pareto_front
from planner.serving.batching import Engine
from planner.serving.slo import SLO
from planner.serving.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
WITH_SEARCH = ["chat-h100", "deepseek-v3-cloudmatrix", "fleet-mixed", "llama70b-slo-search", "rag-longctx-mi300x"]


def _both(args: tuple, block: int):
    try:
        want = oracle(*args)
    except InfeasibleError as e:
        with pytest.raises(InfeasibleError, match="no configuration"):
            plan_slo_search(*args, block=block)
        return str(e), None
    got = plan_slo_search(*args, block=block)
    return want, got


@pytest.mark.parametrize("name", WITH_SEARCH)
def test_streaming_equals_in_memory_on_bundled_scenarios(name):
    scn = load_scenario(ROOT / f"scenarios/{name}.yaml")
    s = scn.search
    spec = scn.design if scn.design.type == "slo-search" else SloSearchSpec()
    args = (planner.model(scn.model), spec, scn.workload, scn.slo, scn.engine, s.hardware, s.tp, s.ep, s.pp,
            s.weight_dtype, s.kv_dtype, name)
    for block in (1, 3, 1024):
        want, got = _both(args, block)
        if got is not None:
            assert got.model_dump() == want.model_dump()     # exact: every float, label and order


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-32b"]),
       hardware=st.lists(st.sampled_from(["h100-sxm", "h200", "a100-80g", "mi300x", "b200"]), min_size=1,
                         max_size=3),
       tp=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4),
       ep=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3),
       pp=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=2),
       dtypes=st.lists(st.sampled_from(["bf16", "fp8"]), min_size=1, max_size=2, unique=True),
       inp=st.integers(100, 8000), out=st.integers(20, 1000), ttft=st.floats(0.2, 5), tpot=st.floats(0.01, 0.2),
       block=st.sampled_from([1, 2, 5, 64]), bounds=st.sampled_from(["p90", "p50 p99", "e2e", "attainment"]))
def test_streaming_equals_in_memory_on_random_spaces(model, hardware, tp, ep, pp, dtypes, inp, out, ttft, tpot,
                                                     block, bounds):
    wl = Workload(rate=1, input={"dist": "fixed", "value": inp}, output={"dist": "fixed", "value": out})
    # the streaming search computes only the percentiles its SLO bounds (and P90): other bounds too
    slo = {"p90": SLO(ttft_s={"p90": ttft}, tpot_s={"p90": tpot}),
           "p50 p99": SLO(ttft_s={"p99": ttft}, tpot_s={"p50": tpot / 2, "p90": tpot}),
           "e2e": SLO(ttft_s={"p90": ttft}, e2e_s={"p99": ttft + out * tpot}),
           "attainment": SLO(ttft_s={"p90": ttft}, tpot_s={"p90": tpot}, attainment=0.9)}[bounds]
    args = (planner.model(model), SloSearchSpec(), wl, slo, Engine(), hardware, tp, ep, pp,
            [DType(d) for d in dtypes], None, "random")
    # since 42b3d0b each row's times are its own whatever shares its array (layouts with and
    # without an expert all-to-all included), so every space compares with the in-memory oracle
    want, got = _both(args, block)
    if got is not None:
        assert got.model_dump() == want.model_dump()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=80), st.integers(1, 9))
def test_running_front_equals_front_of_all_points(points, size):
    pts = np.array(points, dtype=float)
    f = RunningFront()
    for start in range(0, len(pts), size):
        part = pts[start:start + size]
        f.add(part[:, 0], part[:, 1], seq=np.arange(start, start + len(part)))
    assert f.rows["seq"].tolist() == pareto_front(pts[:, 0], pts[:, 1]).tolist()


def _colocated_in_memory(model, wl, slo, engine, cost, hardware, tp, ep, pp, dtypes):
    """The colocated search before streaming: whole candidate arrays, every deployment built."""
    from planner.designs.colocated import _deployment, _Evaluated
    from planner.search import candidates
    from planner.serving.queueing import serving_curve, slo_ok
    from planner.serving.workload import length_stats

    stats, rate, out = length_stats(wl), wl.request_rate, []
    for hw, lay, dt in candidates(model, hardware, tp, ep, pp, dtypes, None, engine.framework):
        c = serving_curve(model, hw, lay, dt, engine, stats, wl.arrival.scv)
        ev = _Evaluated(hw, dt, lay, c, slo_ok(c, slo))
        max_ok = np.where(ev.ok, c.rate, -np.inf).max(axis=1)
        for i in np.flatnonzero(max_ok > 0):
            k = int(np.ceil(rate / max_ok[i] * (1 - 1e-9)))
            if k <= 100_000:
                out.append(_deployment(ev, i, k, rate, slo, cost, stats, model))
    return sorted(out, key=lambda d: (d.usd_per_h, d.accelerators))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"]),
       hardware=st.lists(st.sampled_from(["h100-sxm", "h200", "a100-80g", "mi300x"]), min_size=1, max_size=3,
                         unique=True),
       tp=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4, unique=True),
       pp=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=2, unique=True),
       rate=st.floats(0.5, 200), ttft=st.floats(0.3, 5), top=st.integers(1, 12), block=st.sampled_from([1, 3, 64]))
def test_streaming_colocated_top_equals_in_memory(model, hardware, tp, pp, rate, ttft, top, block):
    from planner.designs.colocated import search_colocated
    from planner.perf.cost import CostModel

    wl = Workload(rate=rate, trace="azure-conv-2023")
    slo = SLO(ttft_s={"p90": ttft}, tpot_s={"p90": 0.1})
    args = (planner.model(model), wl, slo, Engine(), CostModel(), hardware, tp, [1], pp, [DType.bf16])
    want = _colocated_in_memory(*args)
    if not want:
        with pytest.raises(InfeasibleError):
            search_colocated(*args, top=top, block=block)
        return
    got = search_colocated(*args, top=top, block=block).deployments
    assert [d.model_dump() for d in got] == [d.model_dump() for d in want[:top]]
    every = search_colocated(*args, block=block).deployments
    assert [d.model_dump() for d in every] == [d.model_dump() for d in want]


def test_slo_search_on_two_processes_equals_one():
    wl = Workload(rate=1, input={"dist": "fixed", "value": 2000}, output={"dist": "fixed", "value": 300})
    slo = SLO(ttft_s={"p90": 1.0}, tpot_s={"p90": 0.05})
    args = (planner.model("mixtral-8x7b"), SloSearchSpec(), wl, slo, Engine(), ["h100-sxm", "mi300x"], [1, 2, 4, 8],
            [1, 2, 4, 8], [1, 2], [DType.bf16, DType.fp8], None, "two")
    one = plan_slo_search(*args, block=7)
    assert plan_slo_search(*args, block=7, workers=2).model_dump() == one.model_dump()
    # every tp, ep in {1, 2, 4, 8} is valid for Mixtral (32 heads, 8 KV heads, 8 experts): 16 x 2 pp,
    # per hardware and dtype
    assert one.candidates == 2 * 2 * 32


_MARK: list = []      # set at run time in this process: a forked worker sees it, a spawned one would not


def _seen_in_worker(job: int) -> tuple:
    import gc

    return job, list(_MARK), gc.get_freeze_count() > 0


def test_map_blocks_forks_workers_and_draws_jobs_as_needed():
    import gc

    from planner.search import map_blocks

    _MARK.append("set after import")
    drawn = []

    def jobs():
        for k in range(40):
            drawn.append(k)
            yield k

    try:
        out = map_blocks(_seen_in_worker, jobs(), workers=2, chunk=3)
        first = next(out)
        # at most four chunks per worker were handed out when the first result came back (pool.map
        # would have drawn all 40 jobs before that)
        assert first == (0, ["set after import"], True) and len(drawn) <= 4 * 2 * 3
        rest = list(out)
    finally:
        _MARK.clear()
    assert [r[0] for r in rest] == list(range(1, 40))
    assert all(seen == ["set after import"] and frozen for _, seen, frozen in rest)   # forked, collector frozen
    assert gc.get_freeze_count() == 0            # unfrozen afterwards


def test_colocated_search_on_two_processes_equals_one():
    # each block is reduced to its own cheapest rows in the worker; merging blocks' rows keeps what
    # one pass over every candidate keeps (ties in search order), with and without powers
    from planner.designs.colocated import search_colocated
    from planner.perf.cost import CostModel

    wl = Workload(rate=30, trace="azure-conv-2023")
    slo = SLO(ttft_s={"p90": 1.0}, tpot_s={"p90": 0.05})
    args = (planner.model("mixtral-8x7b"), wl, slo, Engine(), CostModel(), ["h100-sxm", "mi300x", "h200"],
            [1, 2, 4, 8], [1, 2, 4, 8], [1, 2], [DType.bf16, DType.fp8])
    for top in (5, None):
        one = search_colocated(*args, top=top, block=7)
        two = search_colocated(*args, top=top, block=7, workers=2)
        assert one.candidates == two.candidates
        assert [d.model_dump() for d in two.deployments] == [d.model_dump() for d in one.deployments]


def test_searches_with_measured_tables_stay_in_process():
    # measured step-time tables are a context variable of this process: a search using them must not
    # fan out to workers (which would time the roofline instead)
    from planner.run import run_scenario

    scn = load_scenario(ROOT / "scenarios/measured-llama70b-h100.yaml")
    one = run_scenario(scn).model_dump()
    two = run_scenario(scn.model_copy(update={"search": scn.search.model_copy(update={"workers": 2})})).model_dump()
    assert two["best"] == one["best"] and two["notes"] == one["notes"]
