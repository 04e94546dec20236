"""The decode step SGLang-on-Ascend runs at full batch, against the peak output tokens/s its
benchmark printouts give (validation/printouts/sglang-ascend-best-practice.csv).

sglang.bench_serving prints the most output tokens any one-second window of the run saw. In a window
without prompts every client decodes, so that peak is the full batch's decode rate: clients x accept
length / step. The model's step for the same engine, layout and batch (context = the prompt, where
decode starts) must give it within 10%: the nine one-node runs below come out at -6.2% .. +7.6%
(median -2.6%); the window's own acceptance is the run's mean only on
average, and in a closed loop of several waves a window may hold a prompt step (which lowers the
peak). Nothing was fitted to the peaks (the A2 runs' means calibrate the engine entry; the A3
runs are held out). Three runs are
left out, and the README says why: Qwen3-30B-A3B at 156 clients (+20%), Qwen3-235B over two nodes
(+28%) and dense Qwen3-32B at 120 clients (-21%, accept length 1.69)."""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from planner import validate as V
from planner.perf.estimate import resolve_dtypes
from planner.perf.parallel import Layout, dp_ranks
from planner.serving.batching import iteration
from planner.serving.simulate import replica_budget

PRINTOUTS = Path(__file__).resolve().parents[1] / "validation" / "printouts" / "sglang-ascend-best-practice.csv"

# printout section -> the validation point of the same run (its engine, layout and lengths)
RUNS = {
    "Qwen3-235B Atlas 800I A3-8Card PD Mixed 2K-2K 100ms": "sglasc-spec-qwen3-235b-a3-8card-w8a8-2000-2000-c576",
    "Qwen3 235B High Throughput 50ms 3": "sglasc-spec-qwen3-235b-a3-8card-w8a8-2048-2048-c480",
    "Qwen3 235B High Throughput 50ms 2": "sglasc-spec-qwen3-235b-a3-8card-w8a8-3500-1500-c272",
    "DeepSeek R1 High Performance 50ms 2": "sglasc-spec-dsr1-a3-8card-w4a8-2048-2048-c255",
    "DeepSeek R1 High Performance 50ms 4": "sglasc-spec-dsr1-a3-8card-w4a8-3500-1500-c144",
    "Qwen3 32B Low Latency 18ms": "sglasc-spec-qwen3-32b-a3-4card-w8a8-6000-1500-c32",
    "Qwen3 32B High Throughput 50ms 1": "sglasc-spec-qwen3-32b-a3-2card-w8a8-3500-1500-c78",
    "Qwen3 32B A2 Low Latency 18ms": "sglasc-spec-qwen3-32b-a2-8card-w8a8-6000-1500-c32",
    "Qwen3 32B A2 High Throughput 50ms 1": "sglasc-spec-qwen3-32b-a2-4card-w8a8-3500-1500-c78",
}


@cache
def _printouts() -> dict[str, dict[str, str]]:
    with PRINTOUTS.open() as f:
        return {r["section_name"]: r for r in csv.DictReader(line for line in f if not line.startswith("#"))}


@cache
def _points():
    return V.load_points().points


def _full_batch_rate(point_id: str, accept_length: float) -> float:
    """Output tokens/s of the run's clients decoding together (as many as the engine admits)."""
    p = next(q for q in _points() if q.id == f"{point_id}-throughput")
    clients = min(p.concurrency, p.max_num_seqs or p.concurrency)
    m, hw, engine = V._replay_inputs(V._as_run(None, p).model_dump_json(), p)
    lay, dtypes = Layout.of(p.tp, p.ep, p.pp), resolve_dtypes(m, p.weight_dtype, p.kv_dtype)
    tokens = engine.instance_limits(dp_ranks(hw, lay), hw)[1]
    step = iteration(m, hw, lay, dtypes, float(clients), float(p.input_len), 0.0, float(p.input_len),
                     engine.speculation, power=False, replica_tokens=replica_budget(tokens, dp_ranks(hw, lay))).time_s
    return clients * accept_length / float(np.asarray(step))


@pytest.mark.parametrize("section", sorted(RUNS))
def test_full_batch_decode_meets_the_printed_peak(section):
    row = _printouts()[section]
    rate = _full_batch_rate(RUNS[section], float(row["accept_length"]))
    assert rate == pytest.approx(float(row["peak_output_throughput"]), rel=0.10)
