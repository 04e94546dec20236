import pytest

import planner
from planner.catalog.dtypes import DType
from planner.catalog.hardware import _figures, load_hardware_file
from planner.errors import InputError

REQUIRED = ["a100-80g", "h100-sxm", "h200", "b200", "mi300x", "mi325x", "mi355x", "ascend-910b", "ascend-910c"]


def test_required_profiles_present():
    assert set(REQUIRED) <= set(planner.list_hardware())


@pytest.mark.parametrize("name", REQUIRED + ["cloudmatrix384"])
def test_every_figure_has_a_resolvable_source(name):
    hw = planner.hardware(name)
    figures = _figures(hw)
    assert len(figures) >= 15
    for path, fig in figures:
        assert fig.source in hw.sources, path
        assert hw.sources[fig.source].strip(), path


def test_nvidia_dense_is_half_of_datasheet_sparse():
    # H100 SXM datasheet: 1,979 (BF16) and 3,958 (FP8) TFLOPS "with sparsity".
    h100 = planner.hardware("h100-sxm")
    assert h100.peak_flops[DType.bf16].value == pytest.approx(1979e12 / 2, rel=1e-3)
    assert h100.peak_flops[DType.fp8].value == pytest.approx(3958e12 / 2, rel=1e-3)


def test_link_bandwidth_is_per_direction():
    # NVLink 4: 900 GB/s bidirectional aggregate -> 450 GB/s each way.
    assert planner.hardware("h100-sxm").scale_up.bandwidth_per_direction.value == pytest.approx(450e9)
    # ConnectX-7: 400 Gb/s = 50 GB/s.
    assert planner.hardware("h100-sxm").scale_out.bandwidth_per_direction.value == pytest.approx(50e9)


def test_cloudmatrix384_is_910c_on_a_384_npu_domain():
    cm, c = planner.hardware("cloudmatrix384"), planner.hardware("ascend-910c")
    assert cm.domain_size == 384 and c.domain_size == 8
    assert cm.peak_flops == c.peak_flops and cm.memory == c.memory


def test_no_fp8_on_a100_falls_back_to_bf16_compute():
    a100 = planner.hardware("a100-80g")
    assert a100.compute_dtype(DType.fp8) is DType.bf16
    assert planner.hardware("h100-sxm").compute_dtype(DType.fp8) is DType.fp8


def test_unknown_hardware_suggests_close_match():
    with pytest.raises(InputError, match="did you mean 'h100-sxm'"):
        planner.hardware("h100-sx")


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nvendor: nvidia\npeak_flops: {bf16: [1, 2\n")
    with pytest.raises(InputError, match=r"bad\.yaml:\d+: YAML syntax error"):
        load_hardware_file(bad)


def test_unknown_key_gets_did_you_mean(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nbase: h100-sxm\ndescription: test\nmemroy: {}\n")
    with pytest.raises(InputError, match=r"mine\.yaml:4 memroy: unknown key; did you mean 'memory'"):
        load_hardware_file(f)


def test_user_profile_overrides_base(tmp_path):
    f = tmp_path / "h100-capped.yaml"
    f.write_text("name: h100-capped\nbase: h100-sxm\ndescription: capped\n"
                 "power:\n  tdp: {value: 350 W, source: mine}\nsources:\n  mine: my measurement\n")
    hw = planner.hardware(str(f))
    assert hw.power.tdp.value == 350 and hw.memory.capacity.value == 81559 * 2**20   # nvidia-smi total


def test_a_profile_on_a_base_needs_no_description_of_its_own(tmp_path):
    """It says what it changes on which base; one it gives is kept."""
    f = tmp_path / "h100-capped.yaml"
    f.write_text("name: h100-capped\nbase: h100-sxm\n"
                 "power:\n  tdp: {value: 350 W, source: mine}\nsources:\n  mine: my measurement\n")
    hw = planner.hardware(str(f))
    assert hw.description.startswith("h100-sxm with its own power (NVIDIA H100")
    f.write_text(f.read_text() + "description: mine\n")
    assert planner.hardware(str(f)).description == "mine"
    f.write_text("name: h100-capped\nbase: h100-sxm\npower:\n  tdp: {value: 350 W, source: my own run}\n")
    with pytest.raises(InputError, match=r"h100-capped\.yaml:4 power\.tdp\.source: 'my own run' is not a known "
                                         r"citation key: give the citation under sources:"):
        load_hardware_file(f)


def test_bad_value_names_field(tmp_path):
    f = tmp_path / "neg.yaml"
    f.write_text("name: neg\nbase: h100-sxm\ndescription: x\nefficiency:\n  gemm: {value: 1.5, source: nanoflow}\n")
    with pytest.raises(InputError, match=r"neg\.yaml:5 efficiency\.gemm\.value: .*\(0, 1\]"):
        load_hardware_file(f)


@pytest.mark.parametrize("entry,match", [
    ("{file: nope.csv, source: azure_bench}", r"sweep\.yaml:5 scale_up\.all_reduce_sweep: .*'nope\.csv' not found"),
    ("{file: h100-sxm-allreduce8-nccl.csv, source: nope_key}",
     r"all_reduce_sweep\.source: 'nope_key' is not a known citation key"),
    ("{file: CSV, source: azure_bench}", r"sweep\.yaml:5 scale_up\.all_reduce_sweep: .*could not convert"),
    ("{file: NEG, source: azure_bench}", r"expected rows 'size_bytes,busbw_gbs' of positive numbers"),
])
def test_bad_all_reduce_sweep_is_a_clear_error(tmp_path, entry, match):
    (tmp_path / "bad.csv").write_text("size_bytes,busbw_gbs\n1024,abc\n")
    (tmp_path / "neg.csv").write_text("size_bytes,busbw_gbs\n1024,1.0\n2048,-1\n")
    entry = entry.replace("CSV", str(tmp_path / "bad.csv")).replace("NEG", str(tmp_path / "neg.csv"))
    f = tmp_path / "sweep.yaml"
    f.write_text(f"name: sweep\nbase: h100-sxm\ndescription: x\nscale_up:\n  all_reduce_sweep: {entry}\n")
    with pytest.raises(InputError, match=match):
        load_hardware_file(f)


def test_bundled_all_reduce_sweeps_exist_and_are_shown():
    from typer.testing import CliRunner

    from planner.cli import app

    assert planner.hardware("h100-sxm").scale_up.all_reduce_sweep.path.is_file()
    assert planner.hardware("h800").scale_up.all_reduce_sweep is None   # slower NVLink: not H100's curve
    r = CliRunner().invoke(app, ["hardware", "show", "h100-sxm"])
    assert r.exit_code == 0 and "h100-sxm-allreduce8-nccl.csv" in r.stdout


def test_mi325x_gemm_plateau_is_mi300xs_at_its_sustained_clock():
    # The same 304 CDNA3 CUs and nameplate peaks; under dense MFMA load at 1,000 W the MI325X holds
    # 1,447 MHz where the 750 W MI300X holds 1,207 (AMD's max-achievable-FLOPs runs, BF16), so its
    # GEMMs reach that much more of the shared nameplate.
    from planner.catalog.hardware import hardware

    a, b = hardware("mi300x"), hardware("mi325x")
    assert a.peak_flops[DType.fp8].value == b.peak_flops[DType.fp8].value
    assert b.efficiency.gemm.value / a.efficiency.gemm.value == pytest.approx(1447 / 1207, rel=0.02)


# The best dense matmul measured on each device, TFLOP/s: the Maximum Achievable Matmul FLOPS table
# (stas00/ml-engineering compute/accelerator/README.md: the best shape of a brute-force torch.matmul
# sweep, mean of 100 iterations after 50 warm-up), or a faster measured sweep where a profile cites
# one (MI355X: HipKittens' hipBLASLt 1,579.2 at 16384^3, above MAMF's 1,565.0). A profile's GEMM
# plateau is what LLM-shaped GEMMs sustain, so it may not exceed the best any shape reached, beyond
# the rounding of a two-digit plateau (A100 held NanoFlow's 0.90, 281 TFLOP/s, until session 20).
BEST_MATMUL_TFLOPS = [("a100-80g", "bf16", 271.2), ("h100-sxm", "bf16", 794.5), ("h200", "bf16", 794.5),
                      ("b200", "bf16", 1745.0), ("mi300x", "bf16", 668.4), ("mi325x", "bf16", 784.9),
                      ("mi355x", "bf16", 1579.2), ("h100-sxm", "fp8", 1402.6), ("h200", "fp8", 1453.4),
                      ("b200", "fp8", 3432.5)]


@pytest.mark.parametrize(("name", "fmt", "best_tflops"), BEST_MATMUL_TFLOPS)
def test_gemm_plateau_is_at_most_the_best_measured_matmul(name, fmt, best_tflops):
    hw = planner.hardware(name)
    sustained = hw.peak_flops[DType(fmt)].value * hw.efficiency.gemm_plateau(DType(fmt))
    assert sustained <= best_tflops * 1e12 * 1.005
