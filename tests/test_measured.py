"""Measured step-time tables in place of the roofline (planner.perf.measured)."""

from pathlib import Path

import numpy as np
import pytest

from planner.catalog.dtypes import DType
from planner.catalog.hardware import hardware
from planner.catalog.model_catalog import model
from planner.errors import InputError
from planner.perf.measured import load_table, tables_in_use
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.serving.batching import iteration

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "scenarios/data/splitwisesim-llama2-70b-h100-tp8.csv"
M, HW = model("llama-2-70b"), hardware("h100-sxm")
LAY = Layout.of(8, 1, 1)
DT = DTypes(weight=DType.bf16, kv=DType.bf16)


def _prefill(tokens, batch=1.0):
    return iteration(M, HW, LAY, DT, 0.0, 16.0, batch * np.asarray(tokens, float), np.asarray(tokens, float)).time_s


def _decode(batch, ctx=576.0):
    return iteration(M, HW, LAY, DT, np.asarray(batch, float), ctx, 0.0, 512.0).time_s


def test_reproduces_the_tables_own_points_exactly():
    with tables_in_use({"h100-sxm": load_table(CSV)}):
        pre = _prefill([128, 256, 512, 1024, 2048, 4096, 8192])
        dec = _decode([1, 2, 4, 8, 16, 32, 64])
    # SplitwiseSim medians (shared/reference/papers.md): ms
    assert np.ravel(pre) * 1e3 == pytest.approx([58.2, 51.7, 53.4, 77.9, 136.8, 390.3, 844.9], abs=1e-9)
    assert np.ravel(dec) * 1e3 == pytest.approx([29.8, 30.3, 31.8, 32.5, 34.2, 38.6, 50.2], abs=1e-9)


def test_interpolates_linearly_between_points():
    with tables_in_use({"h100-sxm": load_table(CSV)}):
        mid = float(np.ravel(_decode(24.0))[0])            # halfway between batch 16 and 32
        pre = float(np.ravel(_prefill(3072.0))[0])         # halfway between 2048 and 4096 tokens
    assert mid == pytest.approx((0.0342 + 0.0386) / 2, rel=1e-12)
    assert pre == pytest.approx((0.1368 + 0.3903) / 2, rel=1e-12)


def test_continuous_at_the_edge_and_roofline_shaped_beyond():
    with tables_in_use({"h100-sxm": load_table(CSV)}):
        at_edge = float(np.ravel(_decode(64.0))[0])
        just_out = float(np.ravel(_decode(64.0 * (1 + 1e-7)))[0])
        far = float(np.ravel(_decode(256.0))[0])
        long_ctx = float(np.ravel(_decode(8.0, ctx=4096.0))[0])
    assert just_out == pytest.approx(at_edge, rel=1e-6)
    r = lambda b, c=576.0: float(np.ravel(_decode(b, c))[0])   # noqa: E731  roofline (no table in use)
    assert far == pytest.approx(r(256.0) * 0.0502 / r(64.0), rel=1e-9)
    assert long_ctx == pytest.approx(r(8.0, 4096.0) * 0.0325 / r(8.0), rel=1e-9)
    assert long_ctx > 0.0325                               # more KV to read: slower than the measured point


def test_other_layouts_and_hardware_keep_the_roofline():
    lay4 = Layout.of(4, 1, 1)
    base = iteration(M, HW, lay4, DT, 8.0, 576.0, 0.0, 512.0).time_s
    a100 = iteration(M, hardware("a100-80g"), LAY, DT, 8.0, 576.0, 0.0, 512.0).time_s
    with tables_in_use({"h100-sxm": load_table(CSV)}):
        assert iteration(M, HW, lay4, DT, 8.0, 576.0, 0.0, 512.0).time_s == pytest.approx(base)
        assert iteration(M, hardware("a100-80g"), LAY, DT, 8.0, 576.0, 0.0, 512.0).time_s == pytest.approx(a100)


@pytest.mark.parametrize("text, where", [
    ("phase,batch,tokens,context,seconds\nprefill,1,128,0,abc\n", ":2 seconds"),
    ("phase,batch,tokens,context,seconds\nprefil,1,128,0,0.1\n", ":2 phase"),
    ("phase,batch,tokens,seconds\nprefill,1,128,0.1\n", ":1: header"),
    ("phase,batch,tokens,context,seconds\ndecode,1,1,10,0.1\ndecode,2,1,10,0.2\ndecode,1,1,20,0.1\n",
     ": decode rows must form a full grid"),
    ("phase,batch,tokens,context,seconds\ndecode,1,1,10,0.1\ndecode,1,1,10,0.2\n", ":3: decode point"),
])
def test_bad_tables_name_file_line_and_column(tmp_path, text, where):
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=f"t.csv{where}"):
        load_table(f)


def test_scenario_notes_the_table():
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    r = run_scenario(load_scenario(ROOT / "scenarios/measured-llama70b-h100.yaml"))
    assert any("splitwisesim-llama2-70b-h100-tp8.csv" in n for n in r.notes)
    assert any("fell outside the measured tables" in n for n in r.notes)


def test_a_table_for_an_unknown_hardware_is_a_clean_error(tmp_path):
    from planner.scenario import load_scenario

    text = (ROOT / "scenarios/measured-llama70b-h100.yaml").read_text().replace("  h100-sxm: data/", "  h100: data/")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(InputError, match=r"s.yaml:\d+ measured.*did you mean"):
        load_scenario(tmp_path / "s.yaml")


def test_measured_table_interpolation_stays_within_its_values():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    g = load_table(CSV).grids["decode"]

    @settings(max_examples=50, deadline=None)
    @given(st.floats(1, 64))
    def inside(b):
        v = float(g.interpolate([np.array(b), np.array(1.0), np.array(576.0)]))
        assert g.seconds.min() - 1e-15 <= v <= g.seconds.max() + 1e-15

    inside()


def test_estimate_uses_the_table_too():
    import planner

    with tables_in_use({"h100-sxm": load_table(CSV)}):
        e = planner.estimate("llama-2-70b", "h100-sxm", tp=8, batch=1, input_len=2048, output_len=129)
        e4 = planner.estimate("llama-2-70b", "h100-sxm", tp=4, batch=1, input_len=2048, output_len=129)
    assert e.ttft_s == pytest.approx(0.1368, rel=1e-12)          # the table's prefill of 2048 tokens
    base = planner.estimate("llama-2-70b", "h100-sxm", tp=4, batch=1, input_len=2048, output_len=129)
    assert e4.ttft_s == pytest.approx(base.ttft_s)                # a tp4 instance keeps the roofline
    assert e.tpot_s > 0.0298 * 0.99                               # measured decode, longer context than 576
