"""Context-parallel prefill: per-rank work, ring traffic, the overlap rule, and where it is offered
(whatif --cp, Splitwise prompt pools)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.catalog.hardware import hardware
from planner.catalog.model_catalog import model
from planner.cli import app
from planner.perf.context_parallel import cp_prefill
from planner.perf.estimate import resolve_dtypes
from planner.perf.ops import OpKind
from planner.perf.parallel import Layout

S = 131072


def _flops(st, kinds) -> float:
    """FLOPs of the step's operators of ``kinds`` (the LM head aside: one logit row per sequence)."""
    return sum(float(np.ravel(t.op.count * np.asarray(t.op.flops))[0]) for t in st.ops
               if t.op.kind in kinds and t.op.name != "lm_head")


def test_ring_bytes_and_rank_memory_hand_derived():
    """Llama-3.1-70B at TP8, BF16 KV: one KV head per device, 2 x 128 x 2 B = 512 B per token and
    layer. cp = 4 on 131,072 tokens: a block is 32,768 x 512 = 16,777,216 B, passed 3 times in each
    of 80 layers = 4,026,531,840 B per device; a rank keeps 32,768 x 80 x 512 = 1,342,177,280 B."""
    m = model("llama-3.1-70b")
    r = cp_prefill(m, hardware("h200"), Layout.of(8), resolve_dtypes(m, "fp8", "bf16"), S, 4)
    assert float(r.ring_bytes_per_device) == 4_026_531_840
    assert float(r.kv_bytes_per_rank_device) == 1_342_177_280


def test_flops_per_rank_hand_derived():
    """A rank does 1/cp of the linear layers' FLOPs and of the causal attention's: 64 query heads
    / TP8 = 8 per device, 4 x 8 x 128 x S (S + 1) / 2 / cp FLOPs per layer."""
    m = model("llama-3.1-70b")
    hw, dt = hardware("h200"), resolve_dtypes(m, "fp8", "bf16")
    one, four = (cp_prefill(m, hw, Layout.of(8), dt, S, k).step for k in (1, 4))
    att = _flops(four, {OpKind.attention})
    assert att == pytest.approx(80 * 4 * 8 * 128 * S * (S + 1) / 2 / 4, rel=1e-12)
    assert att * 4 == pytest.approx(_flops(one, {OpKind.attention}), rel=1e-12)
    gemm = {OpKind.gemm}
    assert _flops(four, gemm) * 4 == pytest.approx(_flops(one, gemm), rel=1e-12)


def test_more_cp_never_slows_a_128k_prefill():
    """Compute-bound at 128K: every doubling of cp at least nearly halves the time (the ring hides
    under attention), and never slows it down."""
    m = model("llama-3.1-70b")
    for name in ("h200", "mi300x", "a100-80g"):
        hw = hardware(name)
        r = cp_prefill(m, hw, Layout.of(8), resolve_dtypes(m, "fp8", "bf16"), 128_000, np.array([1, 2, 4, 8, 16]))
        assert np.all(np.diff(r.time_s) < 0), name
        assert np.all(r.exposed_ring_s == 0), name
        assert np.all(r.time_s[1:] < 0.55 * r.time_s[:-1]), name


def test_ring_exposed_beyond_attention():
    """On a short prompt over many ranks the ring outlasts the attention it hides under: exposed =
    ring - attention, and more cp can then be slower."""
    m = model("llama-3.1-70b")
    r = cp_prefill(m, hardware("h200"), Layout.of(8), resolve_dtypes(m, "fp8", "bf16"), 4096, np.array([8, 32]))
    att = np.array([sum(float(np.ravel(t.time_s)[i]) for t in r.step.ops if t.op.kind is OpKind.attention)
                    for i in range(2)])
    assert np.allclose(r.exposed_ring_s, r.ring_s - att)
    assert np.allclose(r.time_s, r.step.total_s + r.exposed_ring_s)
    assert r.time_s[1] > r.time_s[0]


def test_whatif_cp():
    args = ["whatif", "-m", "llama-3.1-70b", "-H", "h200", "--tp", "8", "--weight-dtype", "fp8", "-i", "128000",
            "-o", "100", "--json"]
    one, four = (json.loads(CliRunner().invoke(app, args + ["--cp", str(k)]).output) for k in (1, 4))
    assert four["cp"] == 4 and four["accelerators"] == 32
    assert four["ttft_s"] < 0.3 * one["ttft_s"]
    assert four["tpot_s"] == one["tpot_s"]
    r = CliRunner().invoke(app, ["whatif", "-m", "qwen3-next-80b-a3b", "-H", "h200", "--tp", "4", "-i", "100000",
                                 "-o", "10", "--cp", "2"])
    assert r.exit_code == 2 and "linear-attention" in r.output


def test_splitwise_prompt_pool_with_cp():
    """A prompt machine of cp instances prefills each long prompt about cp times faster (the ring
    hidden): same accelerators, the service time a quarter; cp elsewhere is an input error."""
    from planner.designs.pool_physics import prompt_service
    from planner.designs.splitwise import Candidate, SplitwiseSpec, evaluate_splitwise
    from planner.errors import InputError
    from planner.serving.batching import Engine
    from planner.serving.slo import SLO
    from planner.serving.workload import Workload

    m, hw = model("llama-3.1-70b"), hardware("h200")
    w = Workload(rate=1.0, input={"dist": "fixed", "value": 100_000}, output={"dist": "fixed", "value": 200})
    dt = resolve_dtypes(m, "fp8", "bf16")
    one, four = (prompt_service(m, hw, Layout.of(8), dt, w, k)[1] for k in (1, 4))
    assert np.all(four < 0.27 * one) and np.all(four > 0.25 * one)

    def run(prompt_cp: int, token_cp: int = 1):
        d = Candidate(name="x", prompt={"hardware": "h200", "count": 4 // prompt_cp, "cp": prompt_cp},
                      token={"hardware": "h200", "count": 2, "cp": token_cp})
        return evaluate_splitwise(m, d, SplitwiseSpec(weight_dtype="fp8"), w, SLO(ttft_s={"p90": 30.0}), Engine(),
                                  dt, {"h200": 5.408})

    a, b = run(1), run(4)
    assert a.accelerators == b.accelerators and "tp8 cp4 (prompt)" in b.machines
    with pytest.raises(InputError, match="prompt pools only"):
        run(1, 2)
