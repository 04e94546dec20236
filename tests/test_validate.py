"""The validation set and `planner validate`."""

import json

import pytest
import yaml
from typer.testing import CliRunner

import planner
from planner.catalog.frameworks import framework
from planner.cli import app
from planner.validate import Point, _as_run, _closed_loop, default_path, load_points, predict, validate

runner = CliRunner()


def test_dataset_spans_vendors_phases_and_is_sourced():
    ds = load_points()
    assert len(ds.points) >= 40
    assert {p.vendor for p in ds.points} == {"nvidia", "amd", "huawei"}
    assert {"prefill_s", "decode_step_s"} <= {p.metric for p in ds.points}
    assert min(p.batch or 1 for p in ds.points) == 1 and max(p.batch or 1 for p in ds.points) >= 64
    assert all(p.source in ds.sources for p in ds.points)
    assert len({p.id for p in ds.points}) == len(ds.points)


def test_no_per_point_correction_factors():
    # A point can only say what was measured: any extra field (a fudge factor) is rejected, and the
    # prediction depends on nothing but the catalog entries the point names.
    raw = yaml.safe_load(default_path().read_text())
    fields = set(Point.model_fields)
    assert all(set(p) <= fields for p in raw["points"])
    with pytest.raises(Exception, match="Extra inputs"):
        Point(**raw["points"][0], efficiency=0.5)
    p = load_points().points[0]
    assert predict(p) == predict(p.model_copy(update={"value": p.value * 10, "source": "x"}))


def test_validate_json_shape_and_amd_accuracy():
    import numpy as np

    r = runner.invoke(app, ["validate", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert len(data["points"]) >= 40
    for kinds in data["summary"]["held_out"].values():
        for s in kinds.values():
            assert {"n", "median_abs_rel_error", "p90_abs_rel_error"} <= set(s)
    # every bundled decode-attention sweep is replayed beside the GEMM sweeps, its floor calls counted apart
    decode = {s["file"]: s for s in data["decode_attention"]}
    assert decode["ascend-910b-decode-attention-atbpa.csv"]["floor_bound"] == 11 and len(decode) == 5
    # one kernel per file (its own sweep) within 20% call by call; the engine-side FIA calls (168, replayed
    # through the sglang-ascend entry that takes their median) spread wider, quartiles 0.56-0.63 of HBM
    fia = decode.pop("ascend-910b-decode-attention-sglang-ascend.csv")
    assert all(s["points"] >= 2 and s["max_abs_rel_error"] <= 0.20 for s in decode.values())
    assert fia["points"] == 168 and fia["median_abs_rel_error"] <= 0.07 and abs(fia["median_rel_error"]) <= 0.01
    # held-out AMD points (vLLM ROCm 2024-2025, Llama-3.1-70B/405B FP8, MI300X): the targets,
    # latency within 12% median (6.1% over 37 points) and throughput within 10% median and 5% bias
    # (5.3% / +2.5% over the 12 vLLM rows), since the offline rows are replayed as the lockstep waves they are and
    # vllm-rocm is calibrated on four named rows (rocm-vllm-dev-docker.yaml header). See the README
    # for where NVIDIA (2023 vLLM) and Huawei (3 points) miss
    # The eight MLPerf rows (session 18) are asserted on their own (test_mlperf_llama2_70b): with them
    # AMD's throughput median is 13.8%, the 10% missed, as the README's table says.
    amd = data["summary"]["held_out"]["amd"]
    assert amd["latency"]["median_abs_rel_error"] <= 0.12
    vllm_rows = [r["rel_error"] for r in data["points"] if r["vendor"] == "amd" and r["role"] == "held_out"
                 and r["kind"] == "throughput" and not r["id"].startswith("mlperf")]
    assert len(vllm_rows) == 12 and float(np.median(np.abs(vllm_rows))) <= 0.10
    assert abs(float(np.median(vllm_rows))) <= 0.05


def test_modern_nvidia_points():
    # TensorRT-LLM (NIM) on H100: median within 20%, every TPOT within 25% (at 100 clients the engine's
    # full-length KV reservation caps the batch: TPOT -20%, TTFT +31%); closed-loop TTFT at
    # concurrency 5-50 is underestimated by ~35% (prefill batching of synchronized clients), see README
    import numpy as np
    rows = [r for r in validate()["points"] if r["source"] == "nim_2025"]
    assert np.median([abs(r["rel_error"]) for r in rows]) <= 0.20
    assert all(abs(r["rel_error"]) <= 0.25 for r in rows if r["metric"] == "tpot_s")


def test_sglang_hybrid_rows_run_the_engines_batch():
    """SGLang's Qwen3.6-27B cookbook rows (B200 / B300, 1,024-4,096 clients; 24 held-out points).
    SGLang pools the hybrid's recurrent states apart (memory_policy.state_pool), which caps its batch
    below what one shared pool holds: throughput was +10..+26% without it, +4..+20% with it (median
    +12.5%), asserted within 0..+25% per row and a median under 15% so that losing the term shows.
    The P50 TPOT stays +28..+49% (README: not captured), so only its direction is asserted; the
    TTFT (queueing, P50) is under by 5-19%, asserted within 30%."""
    import numpy as np
    rows = [r for r in validate()["points"] if r["id"].startswith("sglcb-qwen36-")]
    assert len(rows) == 24
    thr = [r["rel_error"] for r in rows if r["metric"] == "output_tokens_per_s"]
    assert all(0.0 <= e <= 0.25 for e in thr) and np.median(np.abs(thr)) <= 0.15
    assert all(abs(r["rel_error"]) <= 0.30 for r in rows if r["metric"] == "ttft_s")
    assert all(0.0 < r["rel_error"] <= 0.60 for r in rows if r["metric"] == "tpot_s")


def test_tensorrt_llm_throughput_table():
    """TensorRT-LLM's published offline throughput (117 rows: Llama-3.1-8B/3.3-70B/3.1-405B and
    Qwen3-235B on H100, H200, B200, Qwen3-30B-A3B on B200). The framework entry is fitted on the
    eight 1000/1000 Hopper rows only. Held-out Hopper rows: median 10%, P90 19% -> asserted at 12% /
    25%. B200 NVFP4 rows were over-predicted by a median 32% while the FP4 plateau was the BF16 one;
    with the measured NVFP4 rate of an engine that quantizes activations in a kernel of its own
    (2.2x its BF16 GEMM rate, the PyTorch backend's default at TP1) and FP4 weight streaming at 0.44
    of HBM they are at a median -10% (|error| 13%) -> asserted within +-20% so that a regression
    shows (session 19: -4% with NVFP4 experts at the non-DeepGEMM grouped share). Session 19 added
    the page's ten Qwen3-30B-A3B rows on one B200 (held out, +24..+70%: the README's "does not
    capture"); the B200 median over all 40 rows is -2%, asserted the same way."""
    import numpy as np
    rows = [r for r in validate()["points"] if r["id"].startswith("trtllm-")]
    assert len(rows) == 117
    hopper = np.abs([r["rel_error"] for r in rows if r["role"] == "held_out" and "-b200-" not in r["id"]])
    assert np.median(hopper) <= 0.12 and np.quantile(hopper, 0.9) <= 0.25
    b200 = [r["rel_error"] for r in rows if "-b200-" in r["id"]]
    assert abs(np.median(b200)) <= 0.20


def test_cloudmatrix384_reproduction():
    """DeepSeek-R1 INT8 on CloudMatrix384 (Zuo et al. 2025): prefill 6,688 tokens/s per NPU under the
    paper's projected perfect expert balance; decode with MTP (1 draft token, ~70% accepted, as
    deployed) at TPOT 49.4 / 24.6 / 14.9 ms for 96 / 24 / 8 sequences per NPU at 4K context, and
    46.8 / 47.4 ms for 128 / 112 per NPU at 1K+1K and 2K+256 (Table 5). Timed per die (each of a
    910C's two dies is a rank: DP attention on every die) with the UB all-to-all latency of the
    paper's operator table (70 us), the shared expert on dies of its own (EP320's 32 replicas), the
    fused MLAProlog and permute (session 33), and the routing skew its default EPLB leaves (1.33,
    calibrated on Table 3's default prefill row, 5,655; the decode instance deploys the same
    redundancy). Session 33: prefill +0.2%, decode +0.3% / -1.3% / +26% and +1.3% / -2.2% (the last
    two never fitted). Tolerances: prefill 25% (no SP-TP-SP MLA overheads); decode at 24-128 per NPU
    12% each (the model does not overlap the engine's two decode streams, worth ~10% at 96 per the
    paper's ablation); at 8 per NPU 35%: the paper's three 4K points bend (its step grows 1.03 ms
    per sequence per NPU from 8 to 24 and 0.59 from 24 to 96, one stated deployment), the model's
    step is linear (0.59-0.60), and its 8-per-NPU step lies on the measured 24-96 line; no public
    small-batch timing says what changes below 24."""
    rows = {r["id"]: r for r in validate()["points"]}
    assert abs(rows["cm384-prefill"]["rel_error"]) <= 0.25
    for pid in ("cm384-decode-b96", "cm384-decode-b24", "cm384-decode-b128-1k1k", "cm384-decode-b112-2k256"):
        assert abs(rows[pid]["rel_error"]) <= 0.12, pid
    assert 0 < rows["cm384-decode-b8"]["rel_error"] <= 0.35


def test_a_perfect_eplb_projection_is_predicted_without_routing_skew():
    """Table 3's two CloudMatrix-Infer prefill rows differ only in expert balance (5,655 default,
    6,688 perfect): the perfect row's prediction drops the entry's skew and is faster by about the
    skew's share of the step, the default row's is the entry's own. Perfect balance can never be
    slower."""
    rows = {r["id"]: r for r in validate()["points"]}
    perfect, default = rows["cm384-prefill"]["predicted"], rows["cm384-prefill-default-eplb"]["predicted"]
    assert perfect > default
    assert 1.1 < perfect / default < framework("cloudmatrix-infer").moe_imbalance.value


def test_cloudmatrix384_mtp_helps_small_batches_most():
    # Paper ablation: MTP speeds decode up by 6-49%, more at small batch.
    from planner.perf.estimate import estimate

    def tpot(batch_per_npu, k):
        return estimate("deepseek-r1", "cloudmatrix384", tp=1, ep=128, batch=128 * batch_per_npu, input_len=4096,
                        output_len=2, weight_dtype="int8", mtp_tokens=k, mtp_acceptance=0.7).tpot_s

    gain = {b: tpot(b, 0) / tpot(b, 1) - 1 for b in (8, 96)}
    assert 0.06 <= gain[96] < gain[8] <= 0.8


def test_cloudmatrix384_decode_at_tpot_bounds():
    """The paper's headline decode figures are throughputs at a TPOT bound: 1,943 tokens/s per NPU
    under 50 ms, 538 under 15 ms. The model, searching the batch itself, gives the first within 1%
    since session 33 (1,943 at 96 per NPU with the default-EPLB skew; +12% before, under a perfect
    balance the paper's decode does not claim; asserted within 15%, the decode rows' 12% plus the
    batch search's step) and finds 15 ms out of reach, with a floor of ~16.5 ms at one sequence per
    NPU: dispatch and combine at the profile's UB all-to-all latency are ~30% of that step, and each
    die reads the whole BF16 LM head twice (main model and MTP module, 1.85 GB each: ~2.8 ms; the
    paper does not say the head's format). Within 35% of the paper's 14.9 ms at batch 8, the
    point where the paper's measured curve bends below the model's straight line (README: the
    CloudMatrix384 reproduction section)."""
    from planner.validate import decode_at_tpot_bound, load_points

    (p,) = [q for q in load_points().points if q.id == "cm384-decode-b96"]
    at50 = decode_at_tpot_bound(p, 0.050)
    assert abs(at50["tokens_per_s_per_device"] / 1943 - 1) < 0.15
    at15 = decode_at_tpot_bound(p, 0.015)
    assert at15["batch_per_device"] == 0 and at15["min_tpot_s"] > 0.015
    assert at15["min_tpot_s"] == pytest.approx(0.0149, rel=0.35)


def test_trtllm_bench_engine_sizes_are_its_heuristic():
    # trtllm-bench sizes max_batch_size / max_num_tokens per run (validation/trtllm_bench_sizing.py):
    # Llama-3.1-8B FP8 on one H100 at 128/128: KV 2 x 32 x 8 x 128 x 1 B = 64 KiB per token; engine
    # 8.03e9 B = 7.48 GiB; 0.95 x (79.65 - 7.48) GiB / (256 x 64 KiB) = 4,388 requests -> capped at
    # 4,096; tokens min(4,096 x 2, 32,768) = 8,192.
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("sizing", root / "validation/trtllm_bench_sizing.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.sizing("llama-3.1-8b", "h100-sxm", 1, 1, "fp8", "fp8", 128, 128) == (4096, 8192)
    for path, key in mod.FILES.items():
        text = path.read_text()
        assert mod.rewrite(text, key) == text        # every trtllm-bench point carries its sizes
        sized = [p for p in load_points().points if p.source == key]
        assert sized and all(p.max_num_seqs and p.max_batched_tokens for p in sized)


def test_offline_runs_replay_lockstep_waves():
    """An offline run of N fixed-length requests queued at once moves in lockstep: with vLLM's
    on-demand KV, 1,500 Llama-3.1-405B sequences of 128 + 4,096 tokens need 1,500 x 4,224 x
    32,256 B (one FP8 KV head of 128 x 2 x 126 layers per GPU) = 204 GB per GPU at the end of the
    wave, far beyond the pool, so the replay preempts and recomputes and serves at least 15% less
    than the staggered steady state; where the pool holds the whole wave (70B, 3,200 x 2,176
    tokens) the two agree within 3%."""
    from planner.validate import load_points, predict

    pts = {p.id: p for p in load_points().points}
    big = pts["rocmvllm-405b-mi300x-tp8-fp8-128-4096-offline"]
    assert big.num_requests == 1500
    assert predict(big) < 0.85 * predict(big.model_copy(update={"num_requests": None}))
    fits = pts["rocmvllm-70b-mi300x-tp8-fp8-128-2048-offline"]
    assert predict(fits) == pytest.approx(predict(fits.model_copy(update={"num_requests": None})), rel=0.03)


def test_a_points_speculation_reaches_the_closed_loop():
    # a closed-loop point with draft tokens is predicted with them (it was silently ignored): one
    # accepted-70% MTP token yields 1.7 tokens per step, so TPOT falls though each step does more work
    from planner.validate import load_points, predict

    p = next(q for q in load_points().points if q.id == "nim-llama70b-h100-tp2-fp8-200-200-c25-tpot")
    spec = p.model_copy(update={"mtp_tokens": 1, "mtp_acceptance": 0.7})
    assert predict(spec) < 0.8 * predict(p)


def test_closed_loop_benchmark_replays_its_synchronized_clients():
    """bench_serving-style runs (C clients start together, N fixed-length requests): with one
    client the replayed TTFT is one prompt's prefill plus the front end's time (nothing queues) and
    TPOT the steady state's; with 100 clients the first wave's prompts queue behind each other, so
    the mean TTFT falls as the run gets longer (1 wave > 10 waves > the steady state, where clients
    have drifted apart) while TPOT and throughput stay within 5% of the steady state over ten waves
    (8% for one: once its prompts are in, its decodes run without prompt chunks beside them)."""
    import planner
    from planner.validate import load_points, predict

    pts = {p.id: p for p in load_points().points}
    one = pts["nim-llama8b-h100-tp1-fp8-1000-1000-c1-ttft"].model_copy(update={"num_requests": 10})
    e = planner.estimate("llama-3.1-8b", "h100-sxm", batch=1, input_len=1000, output_len=2, weight_dtype="fp8",
                         kv_dtype="fp8", framework="tensorrt-llm")
    assert predict(one) == pytest.approx(e.ttft_s, rel=0.02)
    for kind in ("ttft", "tpot", "throughput"):
        p = pts[f"nim-llama8b-h100-tp1-fp8-1000-1000-c100-{kind}"]
        steady, ten, wave = (predict(p.model_copy(update={"num_requests": n})) for n in (None, 1000, 100))
        if kind == "ttft":
            assert wave > 1.5 * ten > 1.5 * steady
        else:
            assert ten == pytest.approx(steady, rel=0.05) and wave == pytest.approx(steady, rel=0.08)



def test_a_long_closed_loop_settles_from_its_clients_requests_served_alone():
    """A closed loop of C clients sends request j when request j - C is answered. The replay finds
    those send times as a fixed point; started from all-at-zero it undid one wave per round, so a
    one-client run of 300 requests kept its first round's queue (the vllm-ascend tutorial's ShareGPT
    c1 row: mean TTFT 5.8 s, TPOT 2.9x one request's). Started from each request's time alone,
    chained per client (by hand: e2e 1, 2, 3, 4, 5 s over two clients -> sends at 0, 0, 1, 2, 4 s),
    one client is exact at once: its 300-request run has a single request's TTFT and TPOT (2%)."""
    import numpy as np

    from planner.validate import _chained, load_points, predict

    assert np.array_equal(_chained(np.array([1.0, 2, 3, 4, 5]), 2), [0, 0, 1, 2, 4])
    pts = {p.id: p for p in load_points().points}
    one = pts["nim-llama8b-h100-tp1-fp8-1000-1000-c1-ttft"]
    for metric in ("ttft_s", "tpot_s"):
        short, long = (predict(one.model_copy(update={"num_requests": n, "metric": metric})) for n in (2, 300))
        assert long == pytest.approx(short, rel=0.02)

def test_open_loop_benchmark_replays_poisson_arrivals():
    """bench_serving --request-rate R --num-prompts N: an open loop. At a rate where requests seldom
    overlap (0.02 req/s against ~5 s of service) a request is served nearly alone: mean TTFT is one
    prompt's (the closed loop's single client) within 5% (one request in ten finds another one
    decoding, whose step its prompt shares) and output tokens/s is what arrives, R x output,
    within the Poisson draw's spread over 200 requests (10%); at a rate past the engine's it
    cannot exceed the offline run of the same requests; and the point needs its prompt count and
    no concurrency (file:line error otherwise)."""
    from planner.errors import InputError
    from planner.validate import Point, load_points, predict

    pts = {p.id: p for p in load_points().points}
    c1 = pts["nim-llama8b-h100-tp1-fp8-1000-1000-c1-ttft"].model_copy(update={"num_requests": 10})
    slow = {kind: c1.model_copy(update={"concurrency": None, "request_rate": 0.02, "num_requests": 200,
                                        "metric": kind}) for kind in ("ttft_s", "output_tokens_per_s")}
    assert predict(c1) <= predict(slow["ttft_s"]) <= 1.05 * predict(c1)
    assert predict(slow["output_tokens_per_s"]) == pytest.approx(0.02 * 1000, rel=0.10)
    fast = slow["output_tokens_per_s"].model_copy(update={"request_rate": 1e4, "num_requests": 2000})
    offline = fast.model_copy(update={"request_rate": None, "metric": "offline_output_tokens_per_s"})
    assert predict(fast) <= predict(offline) * 1.001
    with pytest.raises((InputError, ValueError), match="request_rate"):
        Point.model_validate(c1.model_dump() | {"request_rate": 1.0})          # with a concurrency


def test_constant_rate_open_loop_queues_less_than_poisson():
    """guidellm --rate-type constant sends evenly spaced requests. At 16 req/s of 1,000/1,000
    tokens on one H100 (8B FP8: ~80 sequences decoding, steps of ~15 ms) Poisson bunching lands
    several prompts in one step and makes them wait behind each other; evenly spaced ones wait
    only for a step boundary, so the constant run's mean TTFT is below the Poisson run's (by ~14%
    here; at light load, 2 req/s, the two agree within a few percent either way: TTFT is then one
    step whatever the arrivals). Both deliver the same output tokens per second within 10% (what
    arrives, R x output). The field describes an open loop only (file:line error otherwise)."""
    from planner.errors import InputError
    from planner.validate import Point, load_points, predict

    pts = {p.id: p for p in load_points().points}
    c1 = pts["nim-llama8b-h100-tp1-fp8-1000-1000-c1-ttft"]
    poisson = c1.model_copy(update={"concurrency": None, "request_rate": 16.0, "num_requests": 400})
    constant = poisson.model_copy(update={"arrivals": "constant"})
    assert predict(constant) < 0.95 * predict(poisson)
    out = {p: predict(p.model_copy(update={"metric": "output_tokens_per_s"})) for p in (poisson, constant)}
    assert out[constant] == pytest.approx(out[poisson], rel=0.10)
    with pytest.raises((InputError, ValueError), match="arrivals"):
        Point.model_validate(c1.model_dump() | {"arrivals": "constant"})       # a closed loop


def test_a_910c_package_serves_as_two_910b_dies():
    """SGLang's Ascend page runs the same Qwen3-32B W8A8 settings on A3 (910C, 2 dies per card) and
    A2 (910B, one die per card) with the same number of dies: measured TPOTs agree within 3%
    (49.24 vs 48.97 ms at 78 clients on 4 dies; 16.87 vs 16.46 ms at 32 clients on 8 dies). With
    per-die accounting the model's A3/A2 decode step (same batch, lengths and drafts) is the
    measured ratio within 5% (the package view had the 910C 11% faster at 78 clients: half the
    all-reduce ranks, each with the package's bandwidth). The decode step is compared, not the
    replayed runs: those differ in prefill chunking (the A3 run at 32 clients prefills in
    32,768-token chunks, the A2 run in one 135,168-token batch), whose stalls reach the TPOT."""
    rows = {r["id"]: r for r in validate()["points"]}
    runs = (("a3-2card-w8a8-3500-1500-c78", "a2-4card-w8a8-3500-1500-c78", 4, 78, 3500, 1500),
            ("a3-4card-w8a8-6000-1500-c32", "a2-8card-w8a8-6000-1500-c32", 8, 32, 6000, 1500))
    for a3, a2, tp_a2, batch, isl, osl in runs:
        x, y = (rows[f"sglasc-spec-qwen3-32b-{k}-tpot"] for k in (a3, a2))
        a3_step, a2_step = (planner.estimate("qwen3-32b", hw, tp=tp, batch=batch, input_len=isl, output_len=osl,
                                             weight_dtype="int8", mtp_tokens=3, mtp_acceptance=0.55,
                                             framework="sglang-ascend").tpot_s
                            for hw, tp in (("ascend-910c", tp_a2 // 2), ("ascend-910b", tp_a2)))
        assert a3_step / a2_step == pytest.approx(x["measured"] / y["measured"], rel=0.05)


def test_a_runs_memory_fraction_replaces_the_engines_default():
    """A point may carry the memory fraction its command set (SGLang --mem-fraction-static): it
    replaces the framework entry's default in the memory policy, whose kind stays the engine's, and
    a smaller fraction leaves less KV cache: Llama-3.1-70B BF16 on four A100s at 64 clients of
    2,000 + 2,000 tokens holds them all at 0.9 (~41 GB of KV per GPU; ~16 GB at their mean context)
    and ~27 of them at 0.5 (~7 GB), so its closed-loop throughput falls."""
    from planner.catalog.frameworks import framework
    from planner.validate import _as_run

    base = dict(id="x", vendor="nvidia", hardware="a100-80g", model="llama-3.1-70b", tp=4, input_len=2000,
                output_len=2000, concurrency=64, metric="output_tokens_per_s", value=1.0, source="s",
                role="held_out")
    for name, kind in (("vllm", "total_fraction"), ("tensorrt-llm", "free_fraction")):
        run = _as_run(framework(name), Point(framework=name, mem_fraction=0.6, **base))
        assert run.memory_policy.kind == kind and run.memory_policy.fraction.value == 0.6
    assert _as_run(framework("vllm"), Point(framework="vllm", **base)) == framework("vllm")
    full, tight = (predict(Point(framework="vllm", mem_fraction=f, **base)) for f in (0.9, 0.5))
    assert tight < 0.7 * full
    with pytest.raises(Exception, match="mem_fraction"):
        Point(framework="vllm", mem_fraction=1.5, **base)


def test_every_sglang_ascend_run_carries_its_commands_memory_fraction():
    # read from each run's --mem-fraction-static (best-practice page 0.685-0.86, cookbook cells
    # 0.85), none left at the engine's default
    pts = [p for p in load_points().points if p.framework == "sglang-ascend"]
    assert len(pts) == 54 and all(p.mem_fraction is not None for p in pts)
    page = [p for p in pts if p.source == "sglang_ascend_bp"]
    assert len(page) == 50 and all(0.68 <= p.mem_fraction <= 0.86 for p in page)
    assert {p.mem_fraction for p in pts if p.source.startswith("sglang_cookbook")} == {0.85}


def test_ascend_profiles_hold_what_the_runtime_gives_a_process():
    # npu-smi lists 65,536 MB per 64 GB device; torch_npu's total is 60.96 GiB on a 910B and
    # 61.27 GiB on a 910C die (the firmware keeps the rest)
    from planner.catalog.hardware import hardware

    assert hardware("ascend-910b").memory.capacity.value == 65_452_113_920
    assert hardware("ascend-910c").memory.capacity.value == pytest.approx(2 * 61.27 * 2**30, rel=1e-4)
    assert hardware("cloudmatrix384").memory.capacity.value == hardware("ascend-910c").memory.capacity.value


def test_mlperf_llama2_70b():
    """MLPerf Inference Llama-2-70B (v4.1-v5.1 closed, per engine instance; mapping rule in the
    file's header). Offline, the rows whose engines the submissions state: H100 / H200 TensorRT-LLM
    FP8 +5% / +5%, B200 NVFP4 +12% (GEMMs at the GEMM-only FP4 plateau: NVIDIA's engines fuse the
    activation quantization), AMD's v5.1 vLLM harness on MI300X / MI325X +12% / +7% (its GEMMs tuned
    offline, at the profiles' plateaus) -> asserted within 15% each. AMD's v4.1 rows on the 2024
    entry run -32% / -19%: that entry was fitted on TP8 Llama-405B runs and is asserted only to stay
    below the measurement. Latency-bounded rows are ordered physically: the interactive bounds
    (450 ms / 40 ms) admit less load than the server ones (2 s / 200 ms) on the same engine. The
    other benchmarks' rows (Mixtral, 405B, 8B: mlperf-moe-405b-8b.yaml) are held out and reported,
    Llama-3.1-405B Offline on H200 (+5%) asserted within 15%; their misses are the README's."""
    rows = {r["id"]: r for r in validate()["points"] if r["id"].startswith("mlperf") and "-at-load-" not in r["id"]}
    assert len(rows) == 34 and sum("llama2" in k for k in rows) == 16
    assert abs(rows["mlperf50-llama31-405b-h200-offline"]["rel_error"]) <= 0.15
    for run in ("mlperf50-llama2-70b-h100", "mlperf50-llama2-70b-h200", "mlperf50-llama2-70b-b200",
                "mlperf51-llama2-70b-mi300x", "mlperf51-llama2-70b-mi325x"):
        assert abs(rows[f"{run}-offline"]["rel_error"]) <= 0.15, run
    assert rows["mlperf41-llama2-70b-mi300x-offline"]["rel_error"] < 0
    (srv,) = [p for p in load_points().points if p.id == "mlperf51-llama2-70b-mi325x-server"]
    tight = srv.model_copy(update={"ttft_bound_s": 0.45, "tpot_bound_s": 0.04})
    assert 0 < predict(tight) < predict(srv)


def test_mlperf_interactive_latency_at_the_runs_own_load():
    """The loadgen summaries of MLPerf v5.0's Llama-2-70B Interactive runs print mean TTFT and mean
    TPOT over every query at the scheduled Poisson rate (mlperf-interactive-latency.yaml): H200 FP8
    at 8.44 requests/s per GPU 119.4 ms / 33.7 ms, B200 NVFP4 at 27.56 requests/s 85.6 ms / 36.1 ms.
    Replayed open loop, the load slows every step: each predicted TPOT lies above the engine's
    single-request TPOT and each TTFT above one mean prompt's prefill. The model runs fast at these
    loads (H200 -14% / -16%, B200 -45% / -41%: README "Validation"); asserted only that it stays
    below the measurement and within 25% (H200) / 50% (B200) of it, so a model that got faster here
    fails."""
    from planner.catalog.hardware import hardware
    from planner.perf.estimate import estimate

    rows = {r["id"]: r for r in validate()["points"] if "-at-load-" in r["id"]}
    pts = {p.id: p for p in load_points().points if "-at-load-" in p.id}
    assert len(rows) == 4 and all(p.role == "held_out" and p.request_rate for p in pts.values())
    for gpu, tol in (("h200", 0.25), ("b200", 0.50)):
        for metric in ("ttft", "tpot"):
            row = rows[f"mlperf50-llama2-70b-{gpu}-interactive-at-load-{metric}"]
            assert -tol <= row["rel_error"] < 0, (gpu, metric, row["rel_error"])
        p = pts[f"mlperf50-llama2-70b-{gpu}-interactive-at-load-tpot"]
        alone = estimate(p.model, _as_run(None, p).apply(hardware(p.hardware)), tp=p.tp, batch=1,
                         input_len=p.input_len, output_len=p.output_len, weight_dtype=p.weight_dtype,
                         kv_dtype=p.kv_dtype)
        assert rows[p.id]["predicted"] > alone.tpot_s
        assert rows[p.id.replace("-tpot", "-ttft")]["predicted"] > alone.ttft_s


def test_a_server_row_is_the_load_a_replayed_run_holds():
    """Server / Interactive rows are replayed: Poisson runs of the dataset's requests through the
    simulator, bisected on the rate. Without bounds the held load is the engine's saturated rate
    (the closed loop kept full; completions must keep up with arrivals, so an overload that only
    queues does not count), within the 4% a Poisson load's steady completions may differ by;
    bounds no run can meet give 0; and the result is the same on a second call (seeded)."""
    (p,) = [q for q in load_points().points if q.id == "mlperf50-llama2-70b-h100-server"]
    fw = _as_run(None, p)
    kw = dict(tp=p.tp, pp=p.pp, ep=p.ep, weight_dtype=p.weight_dtype, kv_dtype=p.kv_dtype)
    full = _closed_loop(fw.model_dump_json(), p.hardware, p.model, p.input_len, p.output_len, None,
                        tuple(kw.items()), p.max_num_seqs, p.max_batched_tokens).output_tokens_per_s
    unbounded = predict(p.model_copy(update={"ttft_bound_s": 1e5, "tpot_bound_s": 1e5}))
    assert unbounded == pytest.approx(full, rel=0.06)
    assert predict(p) <= unbounded
    assert predict(p.model_copy(update={"ttft_bound_s": 0.01, "tpot_bound_s": 0.001})) == 0.0
    assert predict(p) == predict(p)


def test_a_benchmarks_requests_are_drawn_from_its_dataset():
    # The MLPerf rows draw their requests from the bundled per-sample token counts of the datasets:
    # their means are the published ones (Mixtral's reference answers 144.84 tokens per sample, the
    # accuracy table's figure; Llama-2-70B's prompts 5,463,976 / 24,576 = 222.3), so the copies are
    # whole; the replay draws from them (the same draws every time) and the prediction moves.
    import numpy as np

    from planner.serving.trace import load_trace

    assert np.mean(load_trace("mlperf-mixtral-8x7b").output_len) == pytest.approx(144.84, abs=0.005)
    llama2 = load_trace("mlperf-llama2-70b")
    assert len(llama2.input_len) == 24576 and int(llama2.input_len.sum()) == 5_463_976 and not llama2.timed
    (p,) = [q for q in load_points().points if q.id == "mlperf50-llama2-70b-h200-offline"]
    assert p.lengths == "mlperf-llama2-70b" and p.fixed_output
    assert predict(p) == predict(p) != predict(p.model_copy(update={"lengths": None}))


def test_a_measurements_file_names_a_missing_bound_or_unknown_lengths_at_its_line(tmp_path):
    row = ("{id: a, vendor: nvidia, hardware: h200, model: llama-2-70b, framework: tensorrt-llm, input_len: 222, "
           "output_len: 292, metric: server_output_tokens_per_s, value: 4000, source: s, role: held_out%s}")
    for extra, expected in ((", ttft_bound_s: 2", ":4 points.0.ttft_bound_s: server_output_tokens_per_s needs"),
                            (", ttft_bound_s: 2, tpot_bound_s: 0.2, lengths: no-such-trace",
                             ":4 points.0.lengths: unknown trace 'no-such-trace'")):
        f = tmp_path / "m.yaml"
        f.write_text('sources:\n  s: "probe"\npoints:\n  - ' + row % extra + "\n")
        r = runner.invoke(app, ["validate", "--file", str(f)])
        assert r.exit_code == 2 and expected in r.stderr, r.stderr
