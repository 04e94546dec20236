"""Robustness of sweep outputs and grids, --set parsing and benchmark files: bad input is a located
`InputError` before anything runs, and a resumed result file keeps every row whole."""

import csv
import json
import math
import time
from pathlib import Path

import pytest

from planner.benchfiles import read_runs
from planner.errors import InputError
from planner.overrides import apply_sets
from planner.sweep.runner import run_sweep
from planner.sweep.spec import load_sweep

SWEEP = """
name: t
base:
  name: small
  model: llama-3.1-8b
  workload: {rate: 5, input: {dist: fixed, value: 1000}, output: {dist: fixed, value: 200}}
  slo: {ttft_s: {p90: 1.0}, tpot_s: {p90: 0.05}}
  search: {hardware: [h100-sxm], tp: [1]}
grid:
  workload.rate: [5, 10, 20]
"""


@pytest.fixture
def sweep(tmp_path: Path):
    p = tmp_path / "s.yaml"
    p.write_text(SWEEP)
    return load_sweep(p)


class Fake:
    """An executor yielding made-up rows shaped as `run_variant`'s (a long message on request),
    stopping after `stop` rows with a KeyboardInterrupt; it records the ids it was given."""

    def __init__(self, stop: int | None = None, message: str = "") -> None:
        self.stop, self.message, self.ran = stop, message, []

    def __call__(self, todo, base):
        for k, v in enumerate(todo):
            if k == self.stop:
                raise KeyboardInterrupt
            self.ran.append(v.id)
            yield {"id": v.id, **v.params, "status": "ok", "message": self.message, "result.usd_per_h": 2.5,
                   "result.binding": "tpot, p90", "seconds": 0.01}


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_resume_into_another_files_columns_is_refused_untouched(sweep, tmp_path):
    """An existing CSV with an id column but other columns is refused, naming the file and the
    differing columns, before any variant runs; a resume of the same sweep still appends."""
    other = tmp_path / "other.csv"
    other.write_bytes(b"id,other\nxyz,1\n")
    fake = Fake()
    with pytest.raises(InputError, match=r"other\.csv:1: header: .*has other and lacks workload\.rate.*--out"):
        run_sweep(sweep, other, progress=False, executor=fake)
    assert other.read_bytes() == b"id,other\nxyz,1\n" and fake.ran == []

    out = tmp_path / "r.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, progress=False, executor=Fake(stop=1))
    s = run_sweep(sweep, out, progress=False, executor=Fake())
    assert (s.skipped, s.ran) == (1, 2)
    header, *rows = _rows(out)
    assert header == ["id", "workload.rate", "status", "message", "seconds", "result.usd_per_h", "result.binding",
                      "extra"]
    assert sorted(r[0] for r in rows) == sorted(v.id for v in sweep.variants)
    assert all(r[5] == "2.5" and r[6] == "tpot, p90" for r in rows)


@pytest.mark.parametrize("tail", ['{id},"unterminated\n', '{id},10,ok,"half a mess', "{id},10,o"])
def test_a_half_written_last_row_is_dropped_and_rerun_once(sweep, tmp_path, capsys, tail):
    """A stopped run's incomplete last row (no newline yet, or an open quote) is cut off with a
    one-line note and its variant reruns; two reruns give one whole row per id."""
    out = tmp_path / "r.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, progress=False, executor=Fake(stop=1))
    kept = out.read_bytes()
    with open(out, "a", newline="") as f:
        f.write(tail.format(id=sweep.variants[1].id))
    first = run_sweep(sweep, out, progress=False, executor=Fake())
    assert "r.csv: dropped line 3, an incomplete row a stopped run left; its variant runs again" in \
        capsys.readouterr().err
    again = run_sweep(sweep, out, progress=False, executor=Fake())
    assert (first.skipped, first.ran, again.skipped, again.ran) == (1, 2, 3, 0)
    assert out.read_bytes().startswith(kept)
    header, *rows = _rows(out)
    assert sorted(r[0] for r in rows) == sorted(v.id for v in sweep.variants)
    assert all(len(r) == len(header) and r[2] == "ok" and r[5] == "2.5" for r in rows)


def test_a_result_cell_over_128_kib_is_read(sweep, tmp_path):
    out = tmp_path / "r.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, progress=False, executor=Fake(stop=1, message="x" * 200_000))
    limit = csv.field_size_limit()
    s = run_sweep(sweep, out, progress=False, executor=Fake())
    assert (s.skipped, s.ran) == (1, 2) and csv.field_size_limit() == limit


def test_an_output_folder_that_does_not_exist_is_refused_before_running(sweep, tmp_path):
    fake = Fake()
    with pytest.raises(InputError, match=r"nodir/x\.csv.*folder .*nodir does not exist"):
        run_sweep(sweep, tmp_path / "nodir" / "x.csv", progress=False, executor=fake)
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(InputError, match=r"d\.csv.*is a folder"):
        run_sweep(sweep, tmp_path / "d.csv", progress=False, executor=fake)
    assert fake.ran == [] and not (tmp_path / "nodir").exists()


def test_a_grid_past_the_limit_is_refused_before_it_is_built(tmp_path):
    from planner.sweep.spec import MAX_VARIANTS

    p = tmp_path / "big.yaml"
    n = int(MAX_VARIANTS ** 0.5) + 1
    p.write_text(SWEEP.replace("  workload.rate: [5, 10, 20]", f"  a: {list(range(n))}\n  b: {list(range(n))}"))
    with pytest.raises(InputError, match=rf"big\.yaml:9 grid: {n * n:,} variants \({n} x {n}\), more than"):
        load_sweep(p)
    p.write_text(SWEEP.replace("  workload.rate: [5, 10, 20]", "\n".join(f"  k{i}: {list(range(40))}"
                                                                      for i in range(12))))
    t = time.perf_counter()
    with pytest.raises(InputError, match=r"grid: 1\.68e\+19 variants"):
        load_sweep(p)
    assert time.perf_counter() - t < 5


@pytest.mark.parametrize("value, found", [("2024-01-01", "2024-01-01 is a date value"),
                                          ("!!binary aGVsbG8=", "b'hello' is a bytes value"),
                                          ("{rate: !!set {a, b}}", "is a set value"),
                                          ("{1: a, b: c}", r"keys \[1, 'b'\]: expected all text")])
def test_a_grid_value_that_is_not_json_is_named(tmp_path, value, found):
    p = tmp_path / "s.yaml"
    p.write_text(SWEEP.replace("[5, 10, 20]", f"\n    - 5\n    - {value}"))
    with pytest.raises(InputError, match=rf"s\.yaml:12 grid\.workload\.rate\.1(\.rate)?: .*{found}"):
        load_sweep(p)


def test_set_paths_and_values_python_cannot_convert_are_input_errors():
    data = {"search": {"tp": [1, 2]}, "workload": {"rate": 5}}
    assert apply_sets(data, ["search.tp.1=4"])[0]["search"]["tp"] == [1, 4]
    with pytest.raises(InputError, match=r"--set search\.tp\.²=1: cannot set '²' here \(expected a list index "
                                         r"below 2\)"):
        apply_sets(data, ["search.tp.²=1"])
    with pytest.raises(InputError, match=r"--set search\.tp\.²\.x=1: search\.tp\.² is not a mapping"):
        apply_sets(data, ["search.tp.².x=1"])
    with pytest.raises(InputError, match=r"--set workload\.rate=9{20}\.\.\.\(5,000 characters\): .*5000 digits; "
                                         r"expected a number of at most 4,300 digits"):
        apply_sets(data, ["workload.rate=" + "9" * 5000])


def _vllm(**change) -> dict:
    return {"completed": 100, "total_input_tokens": 100_000, "total_output_tokens": 20_000, "mean_ttft_ms": 150.0,
            "mean_tpot_ms": 20.0, "output_throughput": 900.0, "max_concurrency": 16, "request_rate": "inf"} | change


@pytest.mark.parametrize("change, field, want", [
    (dict(max_concurrency=math.inf), "max_concurrency", "positive finite number, got inf"),
    (dict(max_concurrency=None, num_prompts=math.inf), "num_prompts", "positive finite number, got inf"),
    (dict(total_input_tokens=math.inf), "total_input_tokens", "positive finite number, got inf"),
    (dict(total_output_tokens=-math.inf), "total_output_tokens", "positive finite number, got -inf"),
    (dict(max_concurrency=-1), "max_concurrency", "positive finite number, got -1"),
    (dict(max_concurrency=None, request_rate=-2.0, request_throughput=1.0), "request_rate",
     'positive number or "inf", got -2.0'),
])
def test_benchmark_counts_and_rates_must_be_positive_and_finite(tmp_path, change, field, want):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_vllm(**change)))
    with pytest.raises(InputError, match=rf"run\.json: field '{field}': expected a {want}"):
        read_runs(f)
    f.write_text(json.dumps(_vllm(request_rate=math.inf)))
    assert read_runs(f)[0].concurrency == 16
