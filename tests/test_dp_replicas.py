"""Attention data-parallel replicas: where requests go (``Engine.dp_balance``), and what the busiest
replica costs a step (``Step.dp_skew``), derived by hand."""

import numpy as np
import pytest

import planner
from planner.perf.ops import DTypes, Step, layer_ops
from planner.perf.parallel import Layout
from planner.serving.batching import Engine, iteration
from planner.serving.simulate import Replicas, dp_ranks, simulate
from planner.serving.workload import Fixed, Workload

M = planner.model("gpt-oss-120b")
HW = planner.hardware("h100-sxm")
FP8 = DTypes(weight=planner.DType.fp8)


def test_placement_in_turn_and_on_the_least_loaded():
    rr = Replicas(3, 6, round_robin=True)
    for r in range(6):
        rr.place(r)
    assert rr.of == [0, 1, 2, 0, 1, 2]
    ll = Replicas(3, 6, round_robin=False)
    ll.placed[:] = [2, 0, 1]                 # replica 0 holds two unfinished requests, 2 one
    for r in range(3):
        ll.place(r)
    assert ll.of[:3] == [1, 1, 2]            # [2,0,1] -> 1; [2,1,1] -> 1 (ties: lowest index); [2,2,1] -> 2
    ll.decoding[:] = [4, 1, 1]
    assert ll.skew(6) == pytest.approx(4 * 3 / 6)
    assert Replicas(1, 2, True).skew(5) == 1.0


def by_name(ops):
    return {op.name: op for op in ops}


def test_skew_scales_the_replica_side_and_the_sends_not_the_experts():
    """At skew 2 the busiest replica holds twice the mean sequences: its attention reads twice the
    KV, its projections twice the tokens, its all-to-all sends twice the bytes; the experts'
    tokens come from every replica (balanced by routing) and do not change."""
    lay = Layout.of(1, 8, 1)
    base = by_name(layer_ops(M, lay, Step.lean(64.0, 1.0, 1000.0), FP8))
    skew = by_name(layer_ops(M, lay, Step.lean(64.0, 1.0, 1000.0, 2.0), FP8))
    assert np.all(skew["attention"].kv_bytes == 2 * base["attention"].kv_bytes)
    assert np.all(skew["qkv_proj"].flops == 2 * base["qkv_proj"].flops)
    assert np.all(skew["ep_dispatch"].comm_bytes == 2 * base["ep_dispatch"].comm_bytes)
    assert np.all(skew["experts"].flops == base["experts"].flops)
    flat = Layout.of(8, 1, 1)                # no attention DP: one replica, nothing to skew
    assert by_name(layer_ops(M, flat, Step.lean(64.0, 1.0, 1000.0, 2.0), FP8))["attention"].kv_bytes == \
        by_name(layer_ops(M, flat, Step.lean(64.0, 1.0, 1000.0), FP8))["attention"].kv_bytes


def test_a_skewed_step_is_slower_and_replicas_count_dies():
    lay = Layout.of(1, 8, 1)
    t1 = iteration(M, HW, lay, FP8, 256.0, 2000.0, 0.0, 1.0).time_s
    t2 = iteration(M, HW, lay, FP8, 256.0, 2000.0, 0.0, 1.0, dp_skew=2.0).time_s
    assert t2 > t1
    assert dp_ranks(HW, lay) == 8 and dp_ranks(HW, Layout.of(8, 1, 1)) == 1
    assert dp_ranks(planner.hardware("ascend-910c"), Layout.of(1, 8, 1)) == 16     # two dies per package


def test_round_robin_decodes_no_faster_than_least_loaded():
    """Variable output lengths: in turn, replicas drift apart as requests end; placed on the least
    loaded they stay within a request or so of each other, so each step waits less."""
    w = Workload(rate=1.0, input=Fixed(value=500), output=Fixed(value=300))
    a, i, o = w.with_rate(30.0).sample(400, 1)
    o = np.random.default_rng(0).integers(20, 600, len(o))
    tpot = {}
    for balance in ("round_robin", "least_loaded"):
        e = Engine(dp_balance=balance, simulator="python")
        tpot[balance] = simulate(M, HW, Layout.of(1, 8, 1), FP8, e, a, i, o, warmup_frac=0.0).tpot_s.mean()
    assert tpot["round_robin"] > tpot["least_loaded"]


def test_a_full_replica_holds_its_requests_back():
    """A per-replica limit (max_num_seqs 8 over 8 replicas: one each). Requests 0-7 fill the
    replicas; 1-7 end early, 0 late; request 8 arrives in between. In turn it goes to replica 0
    and waits for request 0 to end; placed on the least loaded it starts at once on a free one."""
    inp = np.full(9, 64)
    out = np.full(9, 5)
    out[0] = 40
    first = simulate(M, HW, Layout.of(1, 8, 1), FP8, Engine(max_num_seqs=8, limits_scope="instance"),
                     np.zeros(8), inp[:8], out[:8], warmup_frac=0.0)
    arrival = np.zeros(9)
    arrival[8] = (first.e2e_s[1] + first.e2e_s[0]) / 2
    res = {}
    for balance in ("round_robin", "least_loaded"):
        e = Engine(dp_balance=balance, max_num_seqs=8, limits_scope="instance", simulator="python")
        res[balance] = simulate(M, HW, Layout.of(1, 8, 1), FP8, e, arrival, inp, out, warmup_frac=0.0)
    rr, ll = res["round_robin"], res["least_loaded"]
    assert arrival[8] + rr.ttft_s[8] > rr.e2e_s[0]            # started only after request 0 ended
    assert arrival[8] + ll.ttft_s[8] < ll.e2e_s[0]


def test_prefill_first_with_nothing_admissible_lets_the_decodes_run():
    """Without chunked prefill a waiting prompt used to claim a prefill-only iteration even when it
    could not be admitted, so the decodes that would free its place never ran. Here every
    replica's one slot is taken and a ninth prompt waits: the run must end."""
    n = 9
    arrival = np.zeros(n)
    arrival[8] = 1e-6
    e = Engine(dp_balance="round_robin", max_num_seqs=8, limits_scope="instance", chunked_prefill=False,
               simulator="python")
    r = simulate(M, HW, Layout.of(1, 8, 1), FP8, e, arrival, np.full(n, 64), np.full(n, 30), warmup_frac=0.0)
    assert np.all(np.isfinite(r.e2e_s)) and len(r.e2e_s) == n


def test_prefill_first_at_the_sequence_limit_does_not_hang():
    """Without chunked prefill, a prompt waiting while the batch holds max_num_seqs sequences took a
    prefill-only iteration it could not use, again and again: the simulator never ended (session 8
    found it; a plan with chunked_prefill: false at load hung). Now the decodes run and free a slot."""
    m = planner.model("llama-3.1-8b")
    e = Engine(max_num_seqs=4, chunked_prefill=False, simulator="python")
    r = simulate(m, HW, Layout.of(1, 1, 1), DTypes(), e, np.zeros(8), np.full(8, 100), np.full(8, 50), warmup_frac=0.0)
    assert np.all(np.isfinite(r.e2e_s)) and len(r.e2e_s) == 8
    assert np.sort(r.ttft_s)[4] > np.sort(r.e2e_s)[0] - 1e-9      # the fifth prompt waited for a slot


def test_a_prompt_is_prefilled_on_its_own_replica():
    """Attention DP over 8 replicas: one 2,000-token prompt lives on one replica, which runs all
    2,000 tokens through its projections and sends all of them (8 times the even share); eight
    prompts put one on each (the even share); twelve put two on the busiest (ceil(12 / 8)); a
    replica's share of the token budget caps what it takes in one step; half a prompt (a chunk) is
    all its replica's. The experts see every replica's tokens either way."""
    lay = Layout.of(1, 8, 1)

    def step(n, **kw):
        return by_name(layer_ops(M, lay, Step.lean(n, 2000.0, 0.0, prompt=True, **kw), FP8))

    # FLOPs of one token through the (unsharded, tp 1) QKV projection: a decode step of 8 sequences
    # over 8 replicas is one token on each
    per_token = float(by_name(layer_ops(M, lay, Step.lean(8.0, 1.0, 0.0), FP8))["qkv_proj"].flops)

    def qkv_tokens(ops):
        return float(ops["qkv_proj"].flops) / per_token

    assert qkv_tokens(step(1.0)) == pytest.approx(2000)
    assert qkv_tokens(step(8.0)) == pytest.approx(2000)
    assert qkv_tokens(step(12.0)) == pytest.approx(4000)
    assert qkv_tokens(step(12.0, replica_tokens=3000.0)) == pytest.approx(3000)
    assert qkv_tokens(step(0.5)) == pytest.approx(1000)
    one, even = step(1.0), step(8.0)
    assert float(one["ep_dispatch"].comm_bytes) == pytest.approx(float(even["ep_dispatch"].comm_bytes))
    assert float(step(1.0)["experts"].flops) * 8 == pytest.approx(float(even["experts"].flops))
    # no replicas: a prompt step's tokens are not skewed (the TP group shares every token)
    flat = Layout.of(8, 1, 1)
    assert float(by_name(layer_ops(M, flat, Step.lean(1.0, 2000.0, 0.0, prompt=True), FP8))["qkv_proj"].flops) == \
        pytest.approx(2000 * float(by_name(layer_ops(M, flat, Step.lean(1.0, 1.0, 0.0), FP8))["qkv_proj"].flops))


@pytest.mark.parametrize("simulator", ["python", "numba"])
def test_a_replica_takes_its_share_of_the_budget_per_iteration(simulator):
    """SGLang divides --chunked-prefill-size over the DP ranks: with a budget of 8,192 tokens over
    8 replicas, one 4,000-token prompt takes 4 iterations of 1,024 tokens on its replica (not one
    of 4,000), and eight such prompts (one per replica) take the same 4 iterations side by side."""
    pytest.importorskip("numba") if simulator == "numba" else None
    e = Engine(max_batched_tokens=8192, limits_scope="instance", dp_balance="round_robin", simulator=simulator)
    lay = Layout.of(1, 8, 1)
    iters = {}
    for n in (1, 8):
        r = simulate(M, HW, lay, FP8, e, np.zeros(n), np.full(n, 4000), np.full(n, 1), warmup_frac=0.0)
        iters[n] = r.iterations
    assert iters[1] == 4 and iters[8] == 4


def test_the_analytic_iteration_waits_for_the_busiest_replica():
    """``queueing.serving_curve`` on attention DP: the prompt tokens of an iteration cost the
    single-replica rate for what the busiest replica holds (chunk x P(at least one lump), Poisson
    lumps) and the spread rate for the rest. Bounds: never more than every token at its replica's
    rate (no overlap), never less than every token at the spread rate (perfect overlap), and at a
    trickle (p << chunk) the linear cost."""
    from planner.serving.queueing import load_grid, serving_curve
    from planner.serving.workload import length_stats

    w = Workload(rate=1.0, input=Fixed(value=2000), output=Fixed(value=200))
    st = length_stats(w)
    e = Engine(mtp_tokens=0)
    lay = Layout.of(np.array([1]), np.array([8]), np.array([1]))
    g = load_grid(M, HW, lay, FP8, e, st)
    c = serving_curve(M, HW, lay, FP8, e, st, load=g)
    p = g.n * st.mean_prefill / st.mean_output                   # prompt tokens per iteration
    marginal = (g.t_chunk - g.t_dec) / g.chunk
    linear, spread_only = g.t_dec + p * marginal, g.t_dec + p * g.spread
    tpot = c.tpot["mean"]
    assert np.all(np.isfinite(g.spread)) and np.all(g.spread < marginal)
    assert np.all(tpot <= linear * (1 + 1e-12)) and np.all(tpot >= spread_only * (1 - 1e-12))
    light = p < 0.01 * g.chunk
    assert light.any() and np.allclose(tpot[light], linear[light], rtol=0.01)
    heavy = p > 2 * g.chunk
    assert heavy.any() and np.all(tpot[heavy] < 0.9 * linear[heavy])
    flat = Layout.of(np.array([8]), np.array([1]), np.array([1]))   # no replicas: no spread term
    assert np.all(np.isnan(load_grid(M, HW, flat, FP8, e, st).spread))


def test_a_prefill_instance_serves_one_prompt_per_replica():
    """A disaggregated prefill instance with attention DP prefills one prompt on each replica side
    by side: its capacity counts every replica as a server (rho x replicas / service), each
    prompt's service being its one replica's; without replicas, one server."""
    from planner.designs.slo_search import SloSearchSpec, _prefill_points
    from planner.serving.workload import length_stats

    w = Workload(rate=1.0, input=Fixed(value=2000), output=Fixed(value=200))
    st = length_stats(w)
    spec = SloSearchSpec(prefill_utilization=[0.5])
    lay = Layout.of(np.array([1, 8]), np.array([8, 1]), np.array([1, 1]))     # DP 8; TP 8
    rate, _ = _prefill_points(M, HW, lay, FP8, st, w, spec, np.inf)
    s = iteration(M, HW, lay, FP8, 0.0, 16.0, 2000.0, 2000.0, power=False).time_s
    assert rate[:, 0] == pytest.approx(0.5 * np.array([8, 1]) / s / 8)


def test_a_prfaas_site_counts_its_replicas_as_prefill_servers():
    from planner.designs.prfaas import Site, _site_replicas

    assert _site_replicas(M, Site(hardware="h100-sxm", tp=1, ep=8, instances=1)) == 8
    assert _site_replicas(M, Site(hardware="h100-sxm", tp=8, ep=8, instances=1)) == 1
    assert _site_replicas(M, Site(hardware="ascend-910c", tp=1, ep=8, instances=1)) == 16   # per die
    assert _site_replicas(planner.model("llama-3.1-8b"), Site(hardware="h100-sxm", tp=1, ep=8, instances=1)) == 1


@pytest.mark.parametrize("simulator", ["python", "numba"])
def test_the_prefill_delayer_holds_a_lone_prompt_for_its_passes(simulator):
    """SGLang's PrefillDelayer: eight replicas each decode one long request; a ninth prompt lands on
    one replica while the other seven have none to start, so it is held for 29 passes (30 - 1), then
    prefilled; with every replica holding a prompt nothing waits, and without the delayer the lone
    prompt starts at once."""
    pytest.importorskip("numba") if simulator == "numba" else None
    lay = Layout.of(1, 8, 1)
    arrival = np.zeros(9)
    arrival[8] = 1e-6
    inp, out = np.full(9, 64), np.full(9, 400)
    ttft = {}
    for passes in (0, 30):
        e = Engine(dp_balance="round_robin", prefill_delay_passes=passes, simulator=simulator)
        r = simulate(M, HW, lay, FP8, e, arrival, inp, out, warmup_frac=0.0)
        ttft[passes] = r.ttft_s[8]
        assert r.iterations > 400
    step = r.tpot_s[0]                                   # a decode step of the eight
    assert ttft[30] - ttft[0] == pytest.approx(29 * step, rel=0.1)
    both = np.zeros(16)                                  # sixteen at once: two per replica, none held
    e = Engine(dp_balance="round_robin", prefill_delay_passes=30, simulator=simulator)
    r0 = simulate(M, HW, lay, FP8, Engine(dp_balance="round_robin", simulator=simulator), both, np.full(16, 64),
                  np.full(16, 50), warmup_frac=0.0)
    r30 = simulate(M, HW, lay, FP8, e, both, np.full(16, 64), np.full(16, 50), warmup_frac=0.0)
    assert np.allclose(r0.ttft_s, r30.ttft_s)


def test_the_analytic_prefill_delayer_trades_ttft_for_tpot():
    """With the delayer, prompt lumps are released when every replica has one (a coupon
    collector's dp H_dp lumps) or after its passes: iterations carry fewer lone lumps (TPOT no
    higher) and prompts wait up to half the cycle (mean TTFT no lower); with no replicas the
    delayer changes nothing."""
    from planner.serving.queueing import serving_curve
    from planner.serving.workload import length_stats

    w = Workload(rate=1.0, input=Fixed(value=2000), output=Fixed(value=200))
    st = length_stats(w)
    for lay, changes in ((Layout.of(np.array([1]), np.array([8]), np.array([1])), True),
                         (Layout.of(np.array([8]), np.array([1]), np.array([1])), False)):
        off = serving_curve(M, HW, lay, FP8, Engine(), st)
        on = serving_curve(M, HW, lay, FP8, Engine(prefill_delay_passes=30), st)
        assert np.all(on.tpot["mean"] <= off.tpot["mean"] * (1 + 1e-12))
        assert np.all(on.ttft["mean"] >= off.ttft["mean"] * (1 - 1e-12))
        assert np.any(on.tpot["mean"] < 0.95 * off.tpot["mean"]) == changes


@pytest.mark.parametrize("simulator", ["python", "numba"])
def test_in_sglang_iterations_only_the_replica_that_prefills_holds_its_decodes(simulator):
    """SGLang runs a prompt iteration without the decodes (no --enable-mixed-chunk); with attention
    replicas the others decode in it all the same. Eight replicas each decode one request; a ninth
    request's prompt lands on replica 0: with mixed_prefill False its request ends one step after
    the seven others (which end together), and with the engine that mixes (vLLM) all eight end
    together. Without replicas every decode waits: the eight end one step later than mixed."""
    pytest.importorskip("numba") if simulator == "numba" else None
    lay = Layout.of(1, 8, 1)
    arrival = np.zeros(9)
    arrival[8] = 1e-6
    inp, out = np.full(9, 64), np.full(9, 400)
    inp[8] = 2000
    e2e = {}
    for mixed in (True, False):
        e = Engine(dp_balance="round_robin", mixed_prefill=mixed, simulator=simulator)
        e2e[mixed] = simulate(M, HW, lay, FP8, e, arrival, inp, out, warmup_frac=0.0).e2e_s
    assert np.ptp(e2e[True][:8]) == pytest.approx(0.0, abs=1e-12)
    assert np.ptp(e2e[False][1:8]) == pytest.approx(0.0, abs=1e-12)
    assert e2e[False][0] > e2e[False][1] * (1 + 1e-6)
    assert e2e[False][0] - e2e[False][1] == pytest.approx(e2e[False][1] / 400, rel=0.5)   # about one step
    flat = Layout.of(8, 1, 1)
    ends = {mixed: simulate(M, HW, flat, FP8, Engine(mixed_prefill=mixed, simulator=simulator), arrival, inp, out,
                            warmup_frac=0.0).e2e_s[:8] for mixed in (True, False)}
    assert np.all(ends[False] > ends[True])


def test_the_analytic_curve_charges_sglang_decodes_the_whole_prompt_iteration():
    """``queueing``: with prompts in iterations of their own (mixed_prefill False, one replica) a
    decoding sequence waits for the whole prompt iteration, not its marginal cost on top of the
    decodes: TPOT no lower than the mixed engine's at every load and higher once prompts flow, and
    the curve is the one of an engine without chunked prefill at the same budget. With attention
    replicas the others decode in that iteration, which the curve keeps as the mixed one."""
    from planner.serving.queueing import serving_curve
    from planner.serving.workload import length_stats

    st = length_stats(Workload(rate=1.0, input=Fixed(value=2000), output=Fixed(value=200)))
    lay = Layout.of(np.array([8, 1]), np.array([1, 8]), np.array([1, 1]))        # TP 8; DP 8
    tpot = {mixed: serving_curve(M, HW, lay, FP8, Engine(mixed_prefill=mixed, max_batched_tokens=4096), st,
                                 power=False).tpot["mean"] for mixed in (True, False)}
    assert np.all(tpot[False][0] >= tpot[True][0] * (1 - 1e-12)) and np.any(tpot[False][0] > 1.05 * tpot[True][0])
    assert np.array_equal(tpot[False][1], tpot[True][1])
    lumpy = serving_curve(M, HW, lay, FP8, Engine(chunked_prefill=False, max_batched_tokens=4096), st,
                          power=False).tpot["mean"]
    assert np.allclose(tpot[False][0], lumpy[0], rtol=1e-12)


@pytest.mark.parametrize("simulator", ["python", "auto"])
def test_a_replicas_own_kv_pool_fills_and_preempts_its_own_newest(simulator):
    """Each attention replica keeps its requests' KV in its own pool (the instance's free KV over
    its 8 replicas), as SGLang and vLLM size one pool per data-parallel rank. Sixteen requests at
    once, placed in turn: replica 0 holds requests 0 and 8, each 0.8 of a pool at full length, the
    others short ones. Together they outgrow replica 0's pool while the instance holds 1.7 pools of
    its 8: request 8, replica 0's newest, is preempted and recomputed after request 0 ends; the
    other replicas' requests never wait."""
    from planner.serving.simulate import kv_capacity

    lay = Layout.of(1, 8, 1)
    free, per_tok, state = kv_capacity(M, HW, lay, FP8)
    pool_tokens = free / 8 / per_tok
    half = int(0.4 * pool_tokens)
    inp, out = np.full(16, 64), np.full(16, 8)
    inp[[0, 8]], out[[0, 8]] = half, half
    assert 2 * 2 * half + 14 * 72 < 2 * pool_tokens          # the instance-wide total would fit twice over
    r = simulate(M, HW, lay, FP8, Engine(dp_balance="round_robin", simulator=simulator), np.zeros(16), inp, out,
                 warmup_frac=0.0)
    assert r.preemptions >= 1
    assert r.e2e_s[8] > r.e2e_s[0]                            # it finished after the one it gave way to
    short = np.r_[1:8, 9:16]
    assert r.e2e_s[short].max() < r.e2e_s[0] / 2             # the other replicas went on
