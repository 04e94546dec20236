"""The simulator's array kernels (planner.serving.sim_kernel) against the reference loops, bit for
bit: per-request TTFT, TPOT and E2E, energy, preemptions and iterations on fixed seeds. Each
comparison runs the kernel uncompiled (plain Python, always) and compiled (when numba imports).
"""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.designs.splitwise import Candidate, Pool, SplitwiseSpec, evaluate_splitwise, simulate_design
from planner.errors import InputError
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving import sim_kernel
from planner.serving.batching import Engine
from planner.serving.simulate import fcfs_servers, simulate, simulate_disaggregated, simulate_remote_prefill
from planner.serving.simulate_pools import jsq_prompt, jsq_token
from planner.serving.slo import SLO, Target
from planner.serving.workload import Fixed, LogNormal, Workload

M, HW = planner.model("llama-3.1-70b"), planner.hardware("h100-sxm")
FP8 = DTypes(weight=planner.DType.fp8)
CONV = Workload(rate=1.0, trace="azure-conv-2023")
LONG = Workload(rate=1.0, input=Fixed(value=3000), output=Fixed(value=2000))


@pytest.fixture(params=["uncompiled", "numba"])
def fast(request, monkeypatch):
    """The ``Engine.simulator`` value that runs the kernels: uncompiled (numba's absence faked
    away) or compiled (skipped without numba)."""
    if request.param == "numba":
        pytest.importorskip("numba")
    else:
        monkeypatch.setattr(sim_kernel, "numba_available", lambda: True)
        monkeypatch.setattr(sim_kernel, "compiled", sim_kernel._KERNELS.__getitem__)
    return "numba"


def _same(r1, r2):
    for f in ("ttft_s", "tpot_s", "e2e_s", "input_len", "output_len"):
        assert np.array_equal(getattr(r1, f), getattr(r2, f)), f
    assert (r1.energy_j, r1.preemptions, r1.iterations, r1.makespan_s) == \
        (r2.energy_j, r2.preemptions, r2.iterations, r2.makespan_s)
    assert r1.requests_per_s == r2.requests_per_s or (np.isnan(r1.requests_per_s) and np.isnan(r2.requests_per_s))


# (layout, dtypes, engine knobs, workload, rate req/s, requests): chunked and lumpy prefill, KV
# admission with preemption (on demand) and without (full-length reservation), MTP speculation
# (non-integer token counts: the sums must follow numpy's order), prefix hits
CASES = {
    "chunked": (Layout.of(8, 1, 1), DTypes(), {}, CONV, 3.0, 500),
    "lumpy": (Layout.of(8, 1, 1), DTypes(), {"chunked_prefill": False}, CONV, 3.0, 500),
    "preempt": (Layout.of(2, 1, 1), FP8, {}, LONG, 20.0, 200),
    "full_length": (Layout.of(2, 1, 1), FP8, {"kv_reservation": "full_length"}, LONG, 20.0, 200),
    "mtp": (Layout.of(8, 1, 1), DTypes(), {"mtp_tokens": 2, "mtp_acceptance": 0.7}, CONV, 3.0, 500),
    "mtp_preempt": (Layout.of(2, 1, 1), FP8, {"mtp_tokens": 1, "mtp_acceptance": 0.8}, LONG, 20.0, 200),
    # a burst of equal requests: tens of sequences end in the same iteration (pairwise sums of
    # non-integer contexts)
    "mtp_burst": (Layout.of(8, 1, 1), DTypes(), {"mtp_tokens": 2, "mtp_acceptance": 0.7},
                  Workload(rate=1.0, input=LogNormal(median=300, sigma=0.5), output=Fixed(value=50)), 300.0, 600),
    "small_budget": (Layout.of(8, 1, 1), DTypes(), {"max_batched_tokens": 512, "max_num_seqs": 8}, CONV, 2.0, 300),
    # prefill-first at the sequence limit: waiting prompts that cannot be admitted let the decodes run
    "lumpy_full": (Layout.of(8, 1, 1), DTypes(), {"chunked_prefill": False, "max_num_seqs": 8}, CONV, 5.0, 300),
    # SGLang's scheduling: prompt chunks in iterations of their own, the decodes waiting
    "unmixed": (Layout.of(8, 1, 1), DTypes(), {"mixed_prefill": False, "max_batched_tokens": 2048}, CONV, 3.0, 500),
}


@pytest.mark.parametrize("case", list(CASES))
def test_colocated_kernel_equals_reference(case, fast):
    lay, dt, knobs, w, rate, n = CASES[case]
    a, i, o = w.with_rate(rate).sample(n, 3)
    ref = simulate(M, HW, lay, dt, Engine(simulator="python", **knobs), a, i, o, instances=2, prefix_hit=0.1, seed=3)
    got = simulate(M, HW, lay, dt, Engine(simulator=fast, **knobs), a, i, o, instances=2, prefix_hit=0.1, seed=3)
    _same(ref, got)
    if case in ("preempt", "mtp_preempt"):
        assert ref.preemptions > 0          # the case exercises what it is named after
    if case == "full_length":
        assert ref.preemptions == 0


def test_per_request_prefix_hits_and_tier_loads_equal_reference(fast):
    # each request its own hit fraction and its own time to load the hits from a slower KV tier
    # (paid layer by layer in the iteration of its first chunk), with preemption and recompute
    a, i, o = LONG.with_rate(20.0).sample(200, 5)
    rng = np.random.default_rng(5)
    hit, load = rng.uniform(0, 0.9, len(a)), rng.exponential(0.05, len(a)) * (rng.random(len(a)) < 0.7)
    ref, got = (simulate(M, HW, Layout.of(2, 1, 1), FP8, Engine(simulator=sim), a, i, o, instances=2,
                         prefix_hit=hit, load_s=load, seed=5) for sim in ("python", fast))
    _same(ref, got)
    assert ref.preemptions > 0
    no_load = simulate(M, HW, Layout.of(2, 1, 1), FP8, Engine(simulator=fast), a, i, o, instances=2, prefix_hit=hit,
                       seed=5)
    assert np.mean(no_load.ttft_s) < np.mean(got.ttft_s)       # the loads are felt


@pytest.mark.parametrize("mixed", [False, True])
def test_splitwise_pools_kernel_equal_reference(mixed, fast):
    # 6 prompt + 2 token H100s (Llama-3.1-8B): JSQ on pending tokens both ways, KV transfer, token
    # machines (prefilled requests, recompute on preemption), the mixed pool's colocated loop
    m = planner.model("llama-3.1-8b")
    d = Candidate(name="6P+2T", prompt=Pool(hardware="h100-sxm", tp=1, count=6),
                  token=Pool(hardware="h100-sxm", tp=1, count=2))
    slo = SLO(ttft_s=Target(p90=1.0), tpot_s=Target(p90=0.03))
    spec = SplitwiseSpec(mixed_pool=mixed)
    rate = 1.5 * evaluate_splitwise(m, d, spec, CONV, slo, Engine(), DTypes(), {}).max_rate
    ref = simulate_design(m, d, spec, CONV, slo, Engine(simulator="python"), rate, 600, 1)
    got = simulate_design(m, d, spec, CONV, slo, Engine(simulator=fast), rate, 600, 1)
    assert ref == got
    # per-request prefix hits (as a session workload gives them)
    from planner.serving.simulate_pools import Machine, simulate_pools

    a, i, o = CONV.with_rate(rate).sample(600, 2)
    hit = np.random.default_rng(2).uniform(0, 0.8, len(a))
    one = Machine(HW, Layout.of(1, 1, 1), 0)
    runs = [simulate_pools(m, DTypes(), Engine(simulator=sim), a, i, o, lambda kp, kt, tok, pre: 0.005 + 0 * tok,
                           [one] * 6, [one] * 2, [one] * (2 if mixed else 0), 0.3, prefix_hit=hit, seed=2)
            for sim in ("python", fast)]
    _same(*runs)


def test_heterogeneous_pools_kernel_equal_reference(fast):
    # H100 and A100 machines in every role, a KV-transfer delay per pair, a mixed share
    from planner.serving.simulate_pools import Machine, simulate_pools

    m = planner.model("llama-3.1-8b")
    lay = Layout.of(1, 1, 1)
    h, a = Machine(HW, lay, 0), Machine(planner.hardware("a100-80g"), lay, 1)
    a_s, i, o = CONV.with_rate(40.0).sample(800, 4)

    def run(sim):
        return simulate_pools(m, DTypes(), Engine(simulator=sim), a_s, i, o,
                              lambda kp, kt, tok, pre: 0.001 * (1 + kp + 2 * kt) + 1e-7 * tok,
                              [h, h, a, a, a], [h, a, a], [h, a], 0.3, seed=4)

    _same(run("python"), run(fast))


def test_disaggregated_and_remote_prefill_kernels_equal_reference(fast):
    a, i, o = CONV.with_rate(6.0).sample(400, 2)

    def run(sim):
        eng = Engine(simulator=sim)
        site = (HW, Layout.of(8, 1, 1), 2)
        dis = simulate_disaggregated(M, site, site, DTypes(), eng, a, i, o, lambda t, s: 1e-6 * t, seed=2)
        rem, link = simulate_remote_prefill(M, site, site, site, DTypes(), eng, a, i, o, threshold=1000.0,
                                            kv_bytes=3e5 * i, link_bytes_per_s=5e9, rtt_s=0.01, bandwidth_cv=0.3,
                                            max_link_wait_s=0.5, seed=2)
        return dis, rem, link

    (d1, r1, l1), (d2, r2, l2) = run("python"), run(fast)
    _same(d1, d2)
    _same(r1, r2)
    assert l1 == l2


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_dispatchers_equal_reference(n, servers, seed):
    monkey = pytest.MonkeyPatch()
    monkey.setattr(sim_kernel, "numba_available", lambda: True)
    monkey.setattr(sim_kernel, "compiled", sim_kernel._KERNELS.__getitem__)
    try:
        rng = np.random.default_rng(seed)
        a = np.sort(np.round(rng.exponential(1.0, n).cumsum(), 1))     # rounded: ties in time happen
        tokens = rng.integers(1, 50, n).astype(float)
        service = np.round(rng.exponential(1.0, (2, n)), 1)
        kinds = rng.integers(0, 2, servers)
        steps = rng.uniform(0.01, 0.05, servers)
        assert np.array_equal(fcfs_servers(a, service[0], servers), fcfs_servers(a, service[0], servers, "numba"))
        for x, y in zip(jsq_prompt(a, tokens, service, kinds), jsq_prompt(a, tokens, service, kinds, "numba"),
                        strict=True):
            assert np.array_equal(x, y)
        assert np.array_equal(jsq_token(a, tokens, steps), jsq_token(a, tokens, steps, "numba"))
    finally:
        monkey.undo()


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 255, 256, 1000, 4099])
def test_pairwise_sum_is_numpys(n):
    # numpy sums float64 pairwise (8 accumulators, blocks of 128): the kernel must round alike
    x = np.random.default_rng(n).random(n + 3) * 1e3 / 7
    assert sim_kernel.pairwise_sum(x, 3, n) == x[3:].sum()


def test_numba_requested_without_numba_is_an_input_error(monkeypatch):
    monkeypatch.setattr(sim_kernel, "numba_available", lambda: False)
    a, i, o = CONV.with_rate(1.0).sample(20, 1)
    with pytest.raises(InputError, match=r'planner\[fast\]'):
        simulate(M, HW, Layout.of(8, 1, 1), DTypes(), Engine(simulator="numba"), a, i, o)
    r = simulate(M, HW, Layout.of(8, 1, 1), DTypes(), Engine(), a, i, o)     # auto: the reference loop
    assert len(r.ttft_s) > 0


def test_simulator_choice_is_read_from_a_scenario_and_checked():
    from pathlib import Path

    from planner.errors import PlannerError
    from planner.scenario import load_scenario

    path = Path(__file__).resolve().parent.parent / "scenarios" / "chat-h100.yaml"
    assert load_scenario(path).engine.simulator == "auto"
    assert load_scenario(path, ["engine.simulator=python"]).engine.simulator == "python"
    with pytest.raises(PlannerError, match="simulator"):
        load_scenario(path, ["engine.simulator=fast"])


def test_numba_stays_off_the_cli_import_path():
    code = ("import sys, planner.cli, planner.serving.simulate, planner.serving.simulate_pools; "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("balance", ["round_robin", "least_loaded", "unmixed", "unmixed_uniform"])
def test_attention_replicas_kernel_equals_reference(balance, fast):
    """Attention data parallelism (gpt-oss-120b, tp 1 ep 8 = 8 replicas): requests placed on
    replicas, the step looked up at the busiest one's skew, with MTP spread and preemption; unmixed:
    SGLang's prompts-only iterations, where only the replicas that prefill hold their decodes."""
    m = planner.model("gpt-oss-120b")
    a, i, o = LONG.with_rate(40.0).sample(300, 5)
    knobs = {"dp_balance": balance, "mtp_tokens": 2, "mtp_acceptance": 0.7, "max_num_seqs": 64}
    if balance.startswith("unmixed"):
        knobs |= {"dp_balance": "round_robin", "mixed_prefill": False, "max_batched_tokens": 4096}
    if balance == "unmixed_uniform":                 # every sequence gains one token per step
        knobs |= {"mtp_tokens": 0, "mtp_acceptance": 0.0}
    ref = simulate(m, HW, Layout.of(1, 8, 1), FP8, Engine(simulator="python", **knobs), a, i, o, seed=2)
    got = simulate(m, HW, Layout.of(1, 8, 1), FP8, Engine(simulator=fast, **knobs), a, i, o, seed=2)
    _same(ref, got)


@pytest.mark.parametrize("mtp", [0, 2])
def test_replica_kv_pools_kernel_equals_reference(mtp, fast):
    """One KV pool per attention replica (llama-3.1-70b FP8 on 8 H100 replicas, ~11.9K tokens per
    pool): a trace of mixed lengths arriving over time fills some replicas' pools, which preempt
    their own newest sequences while the others go on; uniform and MTP-spread token counts."""
    rng = np.random.default_rng(3)
    n = 160
    arrival = np.sort(rng.uniform(0, 20, n))
    inp = rng.choice([64, 500, 3000], n).astype(np.int64)
    out = rng.choice([16, 400, 2500], n).astype(np.int64)
    knobs = {"dp_balance": "round_robin", "mtp_tokens": mtp, "mtp_acceptance": 0.7 if mtp else 0.0}
    # the pools this test was sized for: without the H100's memory taken at start-up (~3.5K tokens
    # per pool), the MTP draft's weights would leave no room for the longest request
    hw = HW.model_copy(update={"memory": HW.memory.model_copy(update={"startup_used": None})})
    ref = simulate(M, hw, Layout.of(1, 8, 1), FP8, Engine(simulator="python", **knobs), arrival, inp, out, seed=4)
    got = simulate(M, hw, Layout.of(1, 8, 1), FP8, Engine(simulator=fast, **knobs), arrival, inp, out, seed=4)
    assert ref.preemptions > 0
    _same(ref, got)


def test_pools_refuse_a_request_one_attention_replica_cannot_hold():
    """Splitwise token machines with attention data parallelism keep one KV pool per replica, as a
    colocated instance does: a 24K-token request fits the eight replicas' memory together but not
    one replica's (~12K tokens of llama-3.1-70b FP8 on an H100 at tp1), so both simulators refuse it
    with the same reason instead of the pools' one checking the instance's memory as a whole."""
    from planner.errors import InfeasibleError
    from planner.serving.simulate_pools import Machine, simulate_pools

    lay = Layout.of(1, 8, 1)
    arrival, inp, out = np.array([0.0, 1.0]), np.array([1000, 22000]), np.array([100, 2000])
    with pytest.raises(InfeasibleError, match=r"per attention replica \(8 of them\)") as colocated:
        simulate(M, HW, lay, FP8, Engine(), arrival, inp, out)
    prompt, token = [Machine(HW, Layout.of(8, 1, 1), 0)], [Machine(HW, lay, 0)]
    with pytest.raises(InfeasibleError, match=r"per attention replica \(8 of them\)") as pools:
        simulate_pools(M, FP8, Engine(), arrival, inp, out, lambda *a: 0.0, prompt, token)
    assert str(pools.value).split(" but ")[0] == str(colocated.value).split(" but ")[0]
