import pytest

import planner
from planner.errors import InputError


def test_estimate_fields_and_consistency():
    e = planner.estimate("llama-3.1-70b", "h100-sxm", tp=8, batch=16, input_len=2048, output_len=256)
    assert e.fits and e.accelerators == 8
    assert e.e2e_s == pytest.approx(e.ttft_s + 255 * e.tpot_s)
    assert e.output_tokens_per_s == pytest.approx(16 * 256 / e.e2e_s)
    assert e.total_tokens_per_s == pytest.approx(16 * (2048 + 256) / e.e2e_s)
    assert e.prefill.bound == "compute" and e.decode.bound == "memory"


def test_decode_time_at_least_weight_streaming_time():
    # Every decode step streams all weights of the device once: 141 GB / 8 over 0.85 x 3.35 TB/s.
    e = planner.estimate("llama-3.1-70b", "h100-sxm", tp=8, batch=1, input_len=128, output_len=32)
    assert e.tpot_s > 70.55e9 * 2 / 8 / (3.35e12 * 0.85)


def test_prefill_time_at_least_compute_time():
    # 2 x params x tokens FLOPs over 8 GPUs at 0.75 x 989.4 TFLOP/s is a lower bound on TTFT.
    e = planner.estimate("llama-3.1-70b", "h100-sxm", tp=8, batch=16, input_len=2048, output_len=8)
    assert e.ttft_s > 2 * 69.5e9 * 16 * 2048 / 8 / (989.4e12 * 0.75)


def test_does_not_fit_says_why_and_what_fits():
    e = planner.estimate("llama-3.1-405b", "h100-sxm", tp=4, batch=1, input_len=1000, output_len=10)
    assert not e.fits
    # an "80 GB" H100 has 81,559 MiB = 79.6 GiB (nvidia-smi)
    assert "GiB per device" in e.infeasible_reason and "79.6 GiB" in e.infeasible_reason
    assert e.suggestions and any("--tp 8" in s or "--pp" in s or "fp8" in s for s in e.suggestions)


def test_max_batch_is_the_fitting_boundary():
    e = planner.estimate("llama-3.1-70b", "h100-sxm", tp=4, batch=1, input_len=4000, output_len=1000)
    mb = e.memory.max_batch
    assert planner.estimate("llama-3.1-70b", "h100-sxm", tp=4, batch=mb, input_len=4000, output_len=1000).fits
    assert not planner.estimate("llama-3.1-70b", "h100-sxm", tp=4, batch=mb + 1, input_len=4000,
                                output_len=1000).fits


def test_mla_cache_is_replicated_over_tp_but_split_by_attention_dp():
    kw = dict(batch=64, input_len=4096, output_len=1, weight_dtype="fp8")
    tp8 = planner.estimate("deepseek-v3", "h200", tp=8, ep=8, **kw)
    dp8 = planner.estimate("deepseek-v3", "h200", tp=1, ep=8, **kw)
    assert tp8.memory.kv_cache_bytes == pytest.approx(8 * dp8.memory.kv_cache_bytes)


def test_pipeline_parallel_decode_and_memory():
    a = planner.estimate("llama-3.1-405b", "h100-sxm", tp=8, pp=2, batch=8, input_len=512, output_len=64,
                         weight_dtype="fp8")
    assert a.fits and a.accelerators == 16
    assert a.memory.weights_bytes < 405.9e9 / 16 * 1.1


@pytest.mark.parametrize("kwargs,match", [
    (dict(tp=3), "tp must divide"),
    (dict(ep=2), "ep > 1 needs a mixture-of-experts"),
    (dict(batch=0), "batch must be a positive integer"),
    (dict(input_len=-5), "input_len must be a positive integer"),
    (dict(weight_dtype="fp7"), "unknown dtype"),
])
def test_bad_input(kwargs, match):
    args = dict(tp=1, batch=1, input_len=100, output_len=10) | kwargs
    with pytest.raises(InputError, match=match):
        planner.estimate("llama-3.1-70b", "h100-sxm", **args)


def test_mtp_tokens_per_step_and_wasted_drafts():
    from planner.perf.estimate import estimate
    from planner.perf.speculation import Speculation

    assert Speculation(1, 0.7).tokens_per_step == pytest.approx(1.7)
    assert Speculation(3, 0.5).tokens_per_step == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    kw = dict(tp=8, batch=8, input_len=2048, output_len=64, weight_dtype="fp8")
    base = estimate("deepseek-v3", "h200", **kw).tpot_s
    assert estimate("deepseek-v3", "h200", mtp_tokens=1, mtp_acceptance=0.0, **kw).tpot_s > base   # drafts all rejected
    assert estimate("deepseek-v3", "h200", mtp_tokens=1, mtp_acceptance=0.8, **kw).tpot_s < base   # memory-bound decode
