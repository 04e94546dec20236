"""Eagerly launched prompt steps (``Efficiency.eager_prefill_dispatch``, ``graph_max_tokens``):
a step the engine launches operator by operator takes at least the host's time to launch them.
Numbers derived by hand from the vllm-ascend entry (0.66 ms per modelled operator, 40 ms per step
+ 20 us per sequence, 5 ms per request) and the Qwen3.5-35B-A3B layer list."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog.frameworks import Framework, TokenCount, as_run, framework
from planner.catalog.model_catalog import model as get_model
from planner.errors import PlannerError
from planner.perf.estimate import estimate, operator_breakdown, resolve_dtypes
from planner.perf.ops import DTypes, Step
from planner.perf.parallel import Layout
from planner.perf.roofline import eager_step, step_time
from planner.serving.batching import iteration

DISPATCH_S = 0.66e-3
FRONT_S = 5e-3 + 40e-3 + 20e-6          # request + step overhead of one sequence


def _ttft(n: int, tp: int = 1, fw: str = "vllm-ascend") -> float:
    return estimate("qwen3.5-35b-a3b", "ascend-910b", tp=tp, batch=1, input_len=n, output_len=2,
                    weight_dtype="int8", framework=fw).ttft_s


def test_eager_prompt_step_takes_the_hosts_launches():
    # 40 layers (30 Gated DeltaNet, 10 full attention), each 9 operators at TP1 (3 of the mixer,
    # router, permute, experts, shared expert up/down, norms), + embedding + LM head = 362;
    # 513 tokens is past the 512-token graphs, and the device's ~50 ms is below the host's 239 ms
    assert _ttft(513) == pytest.approx(FRONT_S + 362 * DISPATCH_S, rel=1e-9)


def test_tensor_parallel_all_reduces_are_launched_too():
    # TP2 adds the mixer's and the FFN's all-reduce to every layer: 40 x 11 + 2 = 442
    assert _ttft(513, tp=2) == pytest.approx(FRONT_S + 442 * DISPATCH_S, rel=1e-9)


def test_a_step_within_the_graphs_is_not_floored():
    # 512 tokens replays vLLM's largest piecewise graph: the device's time, far below 239 ms
    assert _ttft(512) < FRONT_S + 100e-3
    assert _ttft(513) > _ttft(512) + 0.15


def test_a_run_without_prompt_graphs_floors_every_prompt_step():
    hw = as_run("ascend-910b", framework("vllm-ascend").model_copy(
        update={"graph_max_tokens": TokenCount(value=0, source="test")}))
    e = estimate("qwen3.5-35b-a3b", hw, tp=1, batch=1, input_len=64, output_len=2, weight_dtype="int8")
    assert e.ttft_s == pytest.approx(FRONT_S + 362 * DISPATCH_S, rel=1e-9)


def test_engines_without_the_figure_are_unchanged():
    hw = as_run("h100-sxm", "vllm")
    assert hw.efficiency.eager_prefill_dispatch is None
    assert eager_step(hw, 4096, 4096) is False
    st_ = step_time(get_model("llama-3.1-8b"), hw, Layout.of(1, 1, 1), Step.of(1, 4096, 0.0, prompt=True), DTypes())
    assert np.array_equal(st_.layers_s, st_.device_s)


def test_decode_steps_and_small_mixed_steps_replay_graphs():
    hw = as_run("ascend-910b", "vllm-ascend")
    mask = eager_step(hw, np.array([0, 100, 100, 600]), np.array([900, 400, 513, 600]))
    assert mask.tolist() == [False, False, True, True]


@settings(max_examples=30, deadline=None)
@given(n_decode=st.integers(0, 256), prefill=st.integers(0, 8192))
def test_the_floor_never_makes_an_iteration_faster(n_decode, prefill):
    """The iteration with the floor is never shorter than its device time plus overhead, and is
    exactly that where the step is not eager."""
    m = get_model("qwen3.5-35b-a3b")
    hw = as_run("ascend-910b", "vllm-ascend")
    plain = as_run("ascend-910b", framework("vllm-ascend").model_copy(update={"eager_prefill_dispatch": None}))
    lay, dt = Layout.of(1, 1, 1), DTypes()
    args = (n_decode, 2048.0, prefill, max(prefill, 1))
    with_floor = float(np.ravel(iteration(m, hw, lay, dt, *args, power=False).time_s)[0])
    without = float(np.ravel(iteration(m, plain, lay, dt, *args, power=False).time_s)[0])
    assert with_floor >= without
    if prefill == 0 or n_decode + prefill <= 512:
        assert with_floor == without


def test_a_candidate_is_launched_its_own_operators_in_a_block():
    """A block of candidates lists the operators of all of them (the EP dispatch and combine of
    the layouts whose experts span more ranks than attention), with no work in the rows of the
    others: a row's eager floor counts its own, so a candidate's prompt step is the same evaluated
    in a block or alone (the streaming search's block size changed a plan before)."""
    m, hw = get_model("deepseek-v3"), as_run("cloudmatrix384", "vllm-ascend")
    tp, ep = np.array([1, 4, 16, 16]), np.array([16, 16, 16, 64])
    dt = resolve_dtypes(m, "int8", None)
    block = Layout.of(tp[:, None], ep[:, None], np.ones((4, 1), int))
    together = np.ravel(iteration(m, hw, block, dt, 8.0, 2000.0, 2048.0, 2000.0, power=False).time_s)
    for i in range(4):
        alone = iteration(m, hw, Layout.of(tp[i:i + 1, None], ep[i:i + 1, None], np.ones((1, 1), int)), dt,
                          8.0, 2000.0, 2048.0, 2000.0, power=False).time_s
        assert together[i] == float(np.ravel(alone)[0])


def test_explain_names_the_wait():
    e = estimate("qwen3.5-35b-a3b", "ascend-910b", tp=1, batch=1, input_len=1024, output_len=2,
                 weight_dtype="int8", framework="vllm-ascend")
    rows = operator_breakdown(e)
    waits = [r for r in rows if r["op"] == "eager_dispatch"]
    assert [r["phase"] for r in waits] == ["prefill"]
    device = sum(r["time_s"] for r in rows if r["phase"] == "prefill" and r["kind"] != "overhead")
    assert waits[0]["time_s"] == pytest.approx(362 * DISPATCH_S - device, rel=1e-6)
    assert "362 operators" in waits[0]["efficiency"]


@pytest.mark.parametrize("bad", [-1, 1.5])
def test_graph_max_tokens_is_a_whole_count(bad):
    with pytest.raises((ValueError, PlannerError)):
        Framework(description="x", graph_max_tokens={"value": bad, "source": "test"})


def test_a_framework_file_can_start_from_a_bundled_entry(tmp_path):
    """``base:`` inherits every field of the bundled entry; the file's fields replace them."""
    from planner.catalog.frameworks import load_framework_file

    f = tmp_path / "decode-graphs.yaml"
    f.write_text("vllm-ascend-decode-graphs:\n  base: vllm-ascend\n"
                 "  graph_max_tokens: {value: 0, source: 'my launch: FULL_DECODE_ONLY'}\n")
    fw = load_framework_file(f)
    base = framework("vllm-ascend")
    assert fw.name == "vllm-ascend-decode-graphs"
    assert fw.graph_max_tokens.value == 0 and base.graph_max_tokens.value == 512
    assert fw.step_overhead == base.step_overhead and fw.memory_policy == base.memory_policy
    assert fw.gemm_speedup_over_bf16 == base.gemm_speedup_over_bf16
    # the 64-token prompt of test_a_run_without_prompt_graphs_floors_every_prompt_step, through the file
    e = estimate("qwen3.5-35b-a3b", "ascend-910b", tp=1, batch=1, input_len=64, output_len=2,
                 weight_dtype="int8", framework=str(f))
    assert e.ttft_s == pytest.approx(FRONT_S + 362 * DISPATCH_S, rel=1e-9)


def test_an_unknown_base_is_located(tmp_path):
    from planner.catalog.frameworks import load_framework_file

    f = tmp_path / "x.yaml"
    f.write_text("x:\n  base: vllm-asc\n")
    with pytest.raises(PlannerError, match=r"x\.yaml:2: base: expected a bundled framework .* got 'vllm-asc'"):
        load_framework_file(f)


def test_an_entry_of_the_bundled_file_may_start_from_an_earlier_one(tmp_path, monkeypatch):
    import planner.catalog.frameworks as F

    f = tmp_path / "frameworks.yaml"
    f.write_text("a:\n  description: first\n  step_overhead: {value: 2 ms, source: s}\n"
                 "b:\n  base: a\n  description: second\n  max_num_seqs: {value: 8, source: s}\n"
                 "c:\n  base: d\n  description: third\n")
    monkeypatch.setattr(F, "FRAMEWORKS_FILE", f)
    F._frameworks.cache_clear()
    try:
        with pytest.raises(PlannerError, match=r"frameworks\.yaml:9: base: expected a bundled framework \(a, b\)"):
            F._frameworks()
        f.write_text(f.read_text().rsplit("c:\n", 1)[0])
        F._frameworks.cache_clear()
        fws = F._frameworks()
        assert fws["b"].step_overhead.value == pytest.approx(2e-3) and fws["b"].max_num_seqs.value == 8
        assert fws["b"].description == "second"
    finally:
        F._frameworks.cache_clear()


def test_host_times_past_ten_seconds_are_refused():
    with pytest.raises((ValueError, PlannerError), match="at most 10 s"):
        Framework(description="x", eager_prefill_dispatch={"value": "11 s", "source": "test"})
