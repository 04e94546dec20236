"""Fuzz suite (issue #17): generated CLI argument lists, scenario documents, hardware profiles and
raw bytes, valid and mutated. Whatever comes in, the planner answers with exit 0 (planned), 1
(understood but infeasible) or 2 (bad input) - never a traceback, never non-standard JSON under
``--json``, never an output file after a failure.

The run is derandomized (same cases every time, so CI is reproducible); set
``PLANNER_FUZZ_RANDOM=1`` to explore new cases. ``test_fuzz_case_count`` prints how many cases ran.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.errors import PlannerError

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
COUNT: dict[str, int] = {}


def fuzz(n: int) -> settings:
    """``n`` cases, no per-case deadline (a loaded CI machine), reproducible unless asked."""
    return settings(max_examples=n, deadline=None, derandomize=not os.environ.get("PLANNER_FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "qwen3-32b"]
HARDWARE = ["h100-sxm", "a100-80g", "mi300x", "ascend-910b", "b200"]
DTYPES = [d.value for d in planner.DType]

# YAML values a user (or a typo) might put anywhere
junk = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["8 GB", "3.35 TB/s", "h100", "fp9", "-1", "1e400", "0x10", "~", "[1, 2]", "ttft"]),
    st.lists(st.integers(-3, 9), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)

BASE = {
    "name": "fuzz", "model": "llama-3.1-8b",
    "workload": {"rate": 5, "input": {"dist": "fixed", "value": 512}, "output": {"dist": "fixed", "value": 128}},
    "slo": {"ttft_s": {"p90": 2.0}, "tpot_s": {"p90": 0.1}},
    "engine": {"max_batched_tokens": 8192, "max_num_seqs": 256},
    "search": {"hardware": ["h100-sxm"], "tp": [1, 2]},
    "cost": {"mode": "rent"},
}


def _count(kind: str) -> None:
    COUNT[kind] = COUNT.get(kind, 0) + 1


def _paths(doc, prefix=()):
    """Every key path of a nested document."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append((*prefix, i))
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw, base: dict, max_mutations: int = 3):
    """``base`` with up to ``max_mutations`` of: a value replaced by junk, a key deleted, an
    unknown key added, a key renamed (a typo)."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, max_mutations))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        key = path[-1]
        op = draw(st.sampled_from(["replace", "replace", "delete", "add", "rename"]))
        if op == "replace":
            parent[key] = draw(junk)
        elif op == "delete":
            del parent[key]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "rate", "cv", "mtp_tokens", "available", "trace"]))] = draw(junk)
        elif op == "rename" and isinstance(parent, dict):
            parent[str(key)[:-1] or "x"] = parent.pop(key)
    return doc


def _clean(r, json_out: bool) -> None:
    """The contract every run keeps, whatever the input."""
    assert r.exit_code in (0, 1, 2), (r.exit_code, r.stderr[-2000:], repr(r.exception))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.stderr
    if r.exit_code == 2:
        assert r.stderr.strip(), "exit 2 must say what was wrong"
    if json_out and r.stdout.strip():
        json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON output"))


# -- CLI arguments ---------------------------------------------------------------------------------
ints = st.one_of(st.integers(-5, 300), st.sampled_from(["0", "-1", "1.5", "x", "99999999999", "1e3"]))
whatif_args = st.fixed_dictionaries({
    "--model": st.one_of(st.sampled_from(MODELS), st.text(max_size=8)),
    "--hardware": st.one_of(st.sampled_from(HARDWARE), st.sampled_from(["h100", "", "x.yaml", "/"])),
    "--tp": st.one_of(st.sampled_from([1, 2, 4, 8]), ints), "--batch": ints,
    "--input-len": st.one_of(st.integers(1, 200_000), ints), "--output-len": ints,
}, optional={"--pp": ints, "--ep": ints, "--weight-dtype": st.sampled_from([*DTYPES, "fp9", "BF16"]),
             "--kv-dtype": st.sampled_from([*DTYPES, "e4m3"]), "--mtp-tokens": ints,
             "--mtp-acceptance": st.sampled_from(["0.5", "0.99", "1", "-0.1", "nan", "inf", "x"])})


@fuzz(220)
@given(whatif_args, st.booleans(), st.booleans())
def test_fuzz_whatif_cli(args, json_out, explain):
    _count("whatif CLI")
    argv = ["whatif", *[x for k, v in args.items() for x in (k, str(v))]]
    argv += ["--json"] if json_out else []
    argv += ["--explain"] if explain else []
    _clean(runner.invoke(app, argv), json_out)


load = st.one_of(st.just([]), st.tuples(st.sampled_from(["--concurrency", "--rate"]), ints).map(list),
                 st.lists(st.sampled_from(["--ttft-p90", "--tpot-p90", "0.05", "1", "0", "-1", "nan", "x"]),
                          max_size=4))


@fuzz(100)
@given(whatif_args, load, st.booleans())
def test_fuzz_throughput_cli(args, extra, json_out):
    _count("throughput CLI")
    args = {k: v for k, v in args.items() if k not in ("--batch", "--mtp-tokens", "--mtp-acceptance")}
    argv = ["throughput", *[x for k, v in args.items() for x in (k, str(v))], *map(str, extra)]
    _clean(runner.invoke(app, argv + (["--json"] if json_out else [])), json_out)


# -- scenario documents through `planner plan` -----------------------------------------------------
@fuzz(160)
@given(mutated(BASE))
def test_fuzz_scenario_plan(doc):
    _count("scenario plan")
    with tempfile.TemporaryDirectory() as d:
        path, csv_path = Path(d) / "s.yaml", Path(d) / "out.csv"
        path.write_text(yaml.safe_dump(doc))
        r = runner.invoke(app, ["plan", str(path), "--json", "--csv", str(csv_path)])
        _clean(r, True)
        if r.exit_code != 0:
            assert not csv_path.exists(), "an output file was written by a failed run"
        assert sorted(p.name for p in Path(d).iterdir()) == sorted(["s.yaml", *(["out.csv"] * (r.exit_code == 0))])


BUNDLED = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "scenarios").glob("*.yaml"))}


@fuzz(120)
@given(st.sampled_from(sorted(BUNDLED)), st.data())
def test_fuzz_bundled_scenario_load(name, data):
    """Mutations of every bundled design's scenario load or fail with a located InputError."""
    _count("bundled scenario load")
    doc = data.draw(mutated(BUNDLED[name], max_mutations=2))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        for rel in ("models",):                  # relative paths the bundled scenarios use
            (Path(d) / rel).symlink_to(ROOT / "scenarios" / rel)
        try:
            planner.load_scenario(path)
        except PlannerError as e:
            assert str(path) in str(e), f"error does not name the file: {e}"


# -- hardware profiles ---------------------------------------------------------------------------------
PROFILE = {"name": "fuzzhw", "base": "h100-sxm", "description": "fuzzed",
           "memory": {"capacity": {"value": "80 GB", "source": "nv_h100_ds"},
                      "bandwidth": {"value": "3.35 TB/s", "source": "nv_h100_ds"}},
           "power": {"tdp": {"value": "700 W", "source": "nv_h100_ds"},
                     "idle": {"value": "75 W", "source": "splitwisesim_power"}},
           "price": {"rent": {"value": "4.9 USD/h", "source": "aws_cb"}},
           "efficiency": {"gemm": {"value": 0.78, "source": "xla_h100_gemm"}}}


@fuzz(80)
@given(mutated(PROFILE))
def test_fuzz_hardware_profile(doc):
    _count("hardware profile")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "hw.yaml"
        path.write_text(yaml.safe_dump(doc))
        r = runner.invoke(app, ["whatif", "-m", "llama-3.1-8b", "-H", str(path), "-i", "256", "-o", "32", "--json"])
        _clean(r, True)


# -- raw bytes -------------------------------------------------------------------------------------
@fuzz(60)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=200).map(lambda t: t.encode("utf-16")),
                 st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_fuzz_raw_bytes(raw):
    _count("raw bytes")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.yaml"
        path.write_bytes(raw)
        r = runner.invoke(app, ["plan", str(path), "--json"])
        _clean(r, True)
        assert r.exit_code == 2


# -- the Python API --------------------------------------------------------------------------------
api_value = st.one_of(st.integers(-3, 70_000), st.floats(allow_nan=True), st.booleans(), st.none(),
                      st.text(max_size=6), st.sampled_from(DTYPES))


@fuzz(100)
@given(st.sampled_from(["estimate", "throughput", "kv_cache_bytes_per_token"]),
       st.one_of(st.sampled_from(MODELS), st.text(max_size=6), st.integers()),
       st.dictionaries(st.sampled_from(["tp", "pp", "ep", "batch", "input_len", "output_len", "weight_dtype",
                                        "kv_dtype", "concurrency", "mtp_tokens", "mtp_acceptance"]), api_value))
def test_fuzz_api_raises_only_planner_errors(fn, model, kwargs):
    """Public functions answer or raise InputError/InfeasibleError, whatever they are given."""
    _count("python API")
    kwargs = {"input_len": 256, "output_len": 32, **kwargs}
    try:
        if fn == "kv_cache_bytes_per_token":
            planner.kv_cache_bytes_per_token(model, kwargs.get("kv_dtype", "bf16"))
        elif fn == "estimate":
            kwargs.pop("concurrency", None)
            planner.estimate(model, "h100-sxm", **kwargs)
        else:
            for k in ("batch", "mtp_tokens", "mtp_acceptance"):
                kwargs.pop(k, None)
            planner.throughput(model, "h100-sxm", **kwargs)
    except PlannerError:
        pass


def test_fuzz_case_count(capsys):
    """Print how many generated cases ran; a full run of this file generates at least 500."""
    total = sum(COUNT.values())
    with capsys.disabled():
        print(f"\nfuzz: {total} generated cases (" + ", ".join(f"{k}: {v}" for k, v in COUNT.items()) + ")")
    if len(COUNT) == 7:
        assert total >= 500
