import numpy as np
import pytest
from pydantic import ValidationError

from planner.errors import InputError
from planner.serving.trace import load_trace
from planner.serving.workload import Arrival, Fixed, LogNormal, Workload, length_stats


def test_bundled_azure_traces_match_published_stats():
    # shared/data/azure-llm-2023/README.md and the Splitwise paper (Sec. III): medians 1020 / 129 (conv)
    conv = load_trace("azure-conv-2023")
    assert len(conv.input_len) == 19_366
    assert np.median(conv.input_len) == 1020 and np.median(conv.output_len) == 129
    code = load_trace("azure-code-2023")
    assert len(code.input_len) == 8_819 and np.median(code.output_len) == 13
    assert code.mean_rate == pytest.approx(2.57, abs=0.01)


def test_lognormal_median_and_p90_are_honoured():
    d = LogNormal(median=1000, p90=3000)
    x = d.sample(200_000, np.random.default_rng(0))
    assert np.median(x) == pytest.approx(1000, rel=0.02)
    assert np.quantile(x, 0.9) == pytest.approx(3000, rel=0.03)


def test_gamma_arrivals_have_the_requested_rate_and_cv():
    w = Workload(rate=4.0, input=Fixed(value=10), output=Fixed(value=10), arrival=Arrival(process="gamma", cv=3.0))
    t, _, _ = w.sample(200_000, 7)
    gaps = np.diff(t)
    assert 1 / gaps.mean() == pytest.approx(4.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.05)


def test_sampling_is_reproducible_by_seed():
    w = Workload(rate=2.0, trace="azure-conv-2023")
    a = w.sample(1000, 3)
    b = w.sample(1000, 3)
    c = w.sample(1000, 4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[1], c[1])


def test_trace_replay_keeps_rows_and_rescales_time():
    w = Workload(trace="azure-code-2023", arrival=Arrival(process="trace"), rate=2 * 2.5664)
    t, i, o = w.sample(100, 0)
    tr = load_trace("azure-code-2023")
    assert np.array_equal(i, tr.input_len[:100])
    assert t[99] == pytest.approx(tr.arrival_s[99] / 2, rel=1e-3)


def test_length_stats_by_hand():
    w = Workload(rate=1, input=Fixed(value=1000), output=Fixed(value=201), prefix_hit=0.25)
    s = length_stats(w)
    assert s.mean_prefill == 750 and s.mean_output == 201
    assert s.mean_decode_ctx == pytest.approx(1000 + 100)   # mid-decode context
    assert s.mean_inv_decode == pytest.approx(1 / 200)


def test_trace_errors(tmp_path):
    missing = tmp_path / "t.csv"
    missing.write_text("TIMESTAMP,ContextTokens\n0,10\n")
    with pytest.raises(InputError, match=r"t\.csv:1: trace has no output-token column"):
        load_trace(str(missing))
    bad = tmp_path / "u.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1.5,ten,5\n")
    with pytest.raises(InputError, match=r"u\.csv:3: expected a timestamp and two token counts"):
        load_trace(str(bad))
    with pytest.raises(InputError, match="did you mean 'azure-conv-2023'"):
        load_trace("azure-conv-2024")


def test_workload_validation():
    with pytest.raises(ValidationError, match="give a rate"):
        Workload(input=Fixed(value=1), output=Fixed(value=1))
    with pytest.raises(ValidationError, match="p90"):
        LogNormal(median=100, p90=50)


def test_vectorized_trace_parse_equals_the_row_parser(tmp_path):
    from planner.serving.trace import TRACES_DIR, _parse_columns, _parse_rows

    for name in ("azure-conv-2023", "azure-code-2023"):
        path = TRACES_DIR / f"{name}.csv"
        fast, slow = _parse_columns(path, [0, 1, 2]), _parse_rows(path, [0, 1, 2])
        # the row parser adds a fraction to a 1.7e9 s epoch stamp in float64 (~2e-7 s of rounding)
        assert np.allclose(fast[0] - fast[0][0], slow[0] - slow[0][0], rtol=0, atol=1e-6)
        assert (fast[1] == slow[1]).all() and (fast[2] == slow[2]).all()
    p = tmp_path / "t.csv"
    p.write_text("time,input_tokens,output_tokens\n2.5,10,3\n0.5,\"20\",4\n1.0,30.0,5\n")
    tr = load_trace(str(p))
    assert tr.arrival_s.tolist() == [0.0, 0.5, 2.0]
    assert tr.input_len.tolist() == [20, 30, 10] and tr.output_len.tolist() == [4, 5, 3]


def test_a_trace_without_timestamps_is_a_length_distribution(tmp_path):
    # A benchmark dataset's per-sample token counts (no arrival times): its lengths serve a workload
    # at a rate given to it; asking it for its rate or its arrival times is an error that says so.
    p = tmp_path / "lengths.csv"
    p.write_text("input_length,output_length\n100,10\n300,30\n")
    tr = load_trace(str(p))
    assert not tr.timed and tr.input_len.tolist() == [100, 300] and tr.output_len.tolist() == [10, 30]
    w = Workload(trace=str(p), rate=2.0)
    _, inp, out = w.sample(1000, seed=1)
    assert set(inp.tolist()) == {100, 300} and ((out * 10) == inp).all()    # rows drawn jointly
    with pytest.raises(ValidationError, match="no timestamps.*give the workload a rate"):
        Workload(trace=str(p))
    with pytest.raises(ValidationError, match="has none"):
        Workload(trace=str(p), rate=1.0, arrival={"process": "trace"})
    bad = tmp_path / "bad.csv"
    bad.write_text("input_length,output_length\n100,10\n3x,30\n")
    with pytest.raises(InputError, match=r"bad\.csv:3: expected two token counts"):
        load_trace(str(bad))
