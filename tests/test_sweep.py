"""Sweeps: grid expansion, streaming results, resume after an interruption, and the same rows from
every executor (in process, local processes, a Dask LocalCluster)."""

import csv
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputError
from planner.sweep import executors
from planner.sweep.runner import run_sweep
from planner.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parent.parent
SWEEP = """
name: t
base:
  name: small
  model: llama-3.1-8b
  workload: {rate: 5, input: {dist: fixed, value: 1000}, output: {dist: fixed, value: 200}}
  slo: {ttft_s: {p90: 1.0}, tpot_s: {p90: 0.05}}
  search: {hardware: [h100-sxm], tp: [1, 2]}
grid:
  workload.rate: [5, 400]
  search.hardware: [[h100-sxm], [a100-80g]]
  slo.ttft_s.p90: [0.005, 1.0]
"""


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(SWEEP)
    return p


def _rows(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {r["id"]: {k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)}


def test_grid_expands_to_the_product_with_stable_ids(sweep_file):
    s = load_sweep(sweep_file)
    assert len(s.variants) == 2 * 2 * 2
    assert len({v.id for v in s.variants}) == 8
    assert [v.id for v in load_sweep(sweep_file).variants] == [v.id for v in s.variants]
    last = s.variants[-1]
    assert last.params == {"workload.rate": 400, "search.hardware": ["a100-80g"], "slo.ttft_s.p90": 1.0}
    assert last.scenario["workload"]["rate"] == 400 and last.scenario["slo"]["ttft_s"]["p90"] == 1.0
    assert last.scenario["slo"]["tpot_s"] == {"p90": 0.05}        # the rest of the base is kept


def test_bad_sweep_files_name_the_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(SWEEP.replace("  workload.rate: [5, 400]", "  workload.rate: 5"))
    with pytest.raises(InputError, match=r"bad.yaml:\d+ grid.workload.rate: expected a non-empty list"):
        load_sweep(p)
    p.write_text(SWEEP.replace("slo.ttft_s.p90: [0.005, 1.0]", "slo.ttft_s.p90: [-1]"))
    r = CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "o.csv"), "--quiet"])
    assert r.exit_code == 2 and "variant" in r.output and "ttft_s" in r.output


def test_sweep_rows_and_statuses(sweep_file, tmp_path):
    out = tmp_path / "r.csv"
    r = CliRunner().invoke(app, ["sweep", str(sweep_file), "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert len(rows) == 8
    # a 5 ms TTFT is out of reach: a 1,000-token prompt of an 8B model is 2 x 8.0e9 x 1000 = 1.6e13
    # FLOP, >= 8 ms even at the 989 TFLOP/s dense BF16 peak of two H100s; the 1 s variants are served
    by_ttft = {(r["slo.ttft_s.p90"], r["status"]) for r in rows.values()}
    assert by_ttft == {("0.005", "infeasible"), ("1.0", "ok")}
    ok = [r for r in rows.values() if r["status"] == "ok"]
    assert all(float(r["result.usd_per_h"]) > 0 for r in ok)
    # 80x the demand needs more accelerators on the same hardware
    for hw in ('["h100-sxm"]', '["a100-80g"]'):
        acc = {r["workload.rate"]: int(r["result.accelerators"]) for r in ok if r["search.hardware"] == hw}
        assert acc["400"] > acc["5"]


def test_interrupted_sweep_resumes_without_recomputing(sweep_file, tmp_path):
    s = load_sweep(sweep_file)
    whole = tmp_path / "whole.csv"
    run_sweep(s, whole, progress=False)
    calls = []

    def crashing(todo, base):
        for k, row in enumerate(executors.in_process(todo, base)):
            if k == 3:
                raise KeyboardInterrupt
            calls.append(row["id"])
            yield row

    out = tmp_path / "part.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(s, out, progress=False, executor=crashing)
    assert len(_rows(out)) == 3
    with open(out, "a") as f:
        f.write("deadbeef,5,half a row")        # a crash in the middle of writing a row
    resumed = []

    def counting(todo, base):
        resumed.extend(v.id for v in todo)
        yield from executors.in_process(todo, base)

    summary = run_sweep(s, out, progress=False, executor=counting)
    assert summary.skipped == 3 and summary.ran == 5
    assert set(resumed).isdisjoint(calls) and len(resumed) == 5
    assert _rows(out) == _rows(whole)


def test_local_processes_equal_in_process(sweep_file, tmp_path):
    s = load_sweep(sweep_file)
    run_sweep(s, tmp_path / "a.csv", progress=False)
    run_sweep(s, tmp_path / "b.csv", workers=2, progress=False)
    assert _rows(tmp_path / "a.csv") == _rows(tmp_path / "b.csv")


def test_dask_local_cluster_equals_in_process(sweep_file, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed", reason="dask.distributed not installed (pip install "
                                      "'planner[dask]')")
    s = load_sweep(sweep_file)
    run_sweep(s, tmp_path / "a.csv", progress=False)
    # worker processes import this checkout, not another installed copy
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        run_sweep(s, tmp_path / "b.csv", scheduler=c.scheduler_address, progress=False)
    assert _rows(tmp_path / "a.csv") == _rows(tmp_path / "b.csv")


def test_parquet_output_and_resume(sweep_file, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow not installed (pip install 'planner[parquet]')")
    s = load_sweep(sweep_file)
    out = tmp_path / "r.parquet"

    def first_two(todo, base):
        rows = executors.in_process(todo, base)
        yield next(rows)
        yield next(rows)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(s, out, progress=False, executor=first_two)
    assert len(pq.read_table(out)) == 2
    summary = run_sweep(s, out, progress=False)
    assert summary.skipped == 2 and summary.ran == 6
    t = pq.read_table(out)
    assert sorted(t.column("id").to_pylist()) == sorted(v.id for v in s.variants)


def test_bundled_sweep_loads():
    s = load_sweep(ROOT / "scenarios/sweeps/chat-grid.yaml")
    assert len(s.variants) == 36


def test_whatif_and_plan_do_not_import_the_sweep_machinery():
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for cmd in (["whatif", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "4", "--input-len",
                 "512", "--output-len", "64", "--json"],
                ["plan", str(ROOT / "scenarios/llama70b-slo-search.yaml"), "--json"]):
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "planner", *cmd], capture_output=True,
                           text=True, env=env, check=True)
        modules = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time")}
        assert "planner.cli" in modules
        assert not {m for m in modules if m.startswith(("planner.sweep", "distributed", "dask", "pyarrow"))}


def test_batches_cover_every_variant_once(sweep_file):
    from planner.sweep.executors import batches

    v = load_sweep(sweep_file).variants * 125            # 1,000 (ids repeat; only the grouping is checked)
    for slots, size in ((2, 16), (64, 3), (1000, 1)):     # 1000 // (4 x slots), at most 16, at least 1
        b = batches(v, slots)
        assert {len(x) for x in b[:-1]} == {size}
        assert [x[0] for batch in b for x in batch] == [u.id for u in v]


def test_a_foreign_out_file_is_refused_untouched(tmp_path):
    """--out onto a file that is not a sweep's (no id column) is refused before anything is
    written, and the file keeps every byte, its unterminated last line too (the resume logic
    used to trim a sweep's half-written line from it first)."""
    from planner.sweep.sink import open_sink

    mine = tmp_path / "mine.csv"
    mine.write_bytes(b"my,data\n1,2\n3,4")
    with pytest.raises(InputError, match="not a sweep result file.*left as it is"):
        open_sink(mine, ["rate"])
    assert mine.read_bytes() == b"my,data\n1,2\n3,4"
    ours = tmp_path / "ours.csv"
    ours.write_bytes(b"id,rate,status\na,1,ok\nb,2,o")           # a sweep's, cut mid-line by a crash
    assert open_sink(ours, ["rate"]).done == {"a"} and ours.read_bytes() == b"id,rate,status\na,1,ok\n"


def test_a_bad_variant_is_named_as_the_scenario_would_name_it(tmp_path):
    """A grid value the scenario refuses is reported with the scenario's own message and path
    (pydantic's union tag dropped: workload.rate, not workload.requests.rate)."""
    from planner.sweep.runner import check

    base = Path(__file__).resolve().parent.parent / "scenarios" / "chat-h100.yaml"
    f = tmp_path / "g.yaml"
    f.write_text(f"name: g\nbase: {base}\ngrid: {{workload.rate: [5, -1]}}\noutput: g.csv\n")
    with pytest.raises(InputError, match=r"variant \{'workload.rate': -1\}: workload\.rate: Input should be greater "
                                         r"than or equal to 0\.000001, got -1$"):
        check(load_sweep(f))


def test_rows_are_reused_only_for_the_scenario_they_ran(tmp_path):
    """Ids hash the variant's whole scenario: a second sweep file writing to the same output from
    another base (another model) runs its variants, where it took the first one's rows as done, and
    an edited base runs again."""
    out = tmp_path / "shared.csv"
    a = tmp_path / "a.yaml"
    a.write_text(SWEEP)
    b = tmp_path / "b.yaml"
    b.write_text(SWEEP.replace("model: llama-3.1-8b", "model: qwen3-32b"))
    assert run_sweep(load_sweep(a), out, progress=False).ran == 8
    second = run_sweep(load_sweep(b), out, progress=False)
    assert second.skipped == 0 and second.ran == 8
    assert run_sweep(load_sweep(b), out, progress=False).skipped == 8      # a rerun of the same skips
    assert len(_rows(out)) == 16


def test_a_value_given_twice_in_a_grid_is_refused(tmp_path):
    p = tmp_path / "twice.yaml"
    p.write_text(SWEEP.replace("workload.rate: [5, 400]", "workload.rate: [5, 400, 5]"))
    with pytest.raises(InputError, match=r"twice.yaml:\d+ grid.workload.rate: 5 is given more than once"):
        load_sweep(p)


def test_a_parquet_out_file_not_a_sweeps_is_refused_untouched(sweep_file, tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (pip install 'planner[parquet]')")
    import pyarrow.parquet as pq

    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"garbage")
    r = CliRunner().invoke(app, ["sweep", str(sweep_file), "--out", str(garbage), "--quiet"])
    assert r.exit_code == 2 and "not a readable Parquet file" in r.output and garbage.read_bytes() == b"garbage"
    mine = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"id": ["abc"], "my_measurements": [42.0]}), mine)
    before = mine.read_bytes()
    r = CliRunner().invoke(app, ["sweep", str(sweep_file), "--out", str(mine), "--quiet"])
    assert r.exit_code == 2 and "not this sweep's result file" in r.output and mine.read_bytes() == before
