"""Readers of the result files serving-benchmark tools write, for ``planner calibrate``.

Each reader returns ``Run`` records: the lengths, the load (closed-loop concurrency, or the
offered request rate of an open-loop run), and the mean TTFT, mean TPOT and output throughput the
tool measured (SI units). Formats, by the fields read (others are ignored):

* **vLLM** ``benchmarks/benchmark_serving.py --save-result`` and ``vllm bench serve
  --save-result`` (vLLM 0.4 - 0.11, one JSON object per file): ``mean_ttft_ms``,
  ``mean_tpot_ms``, ``output_throughput`` (tokens/s), ``completed``, ``total_input_tokens``,
  ``total_output_tokens`` (mean lengths = totals / completed), ``max_concurrency`` (null or
  absent: no cap; with ``request_rate`` "inf" all ``num_prompts`` are in flight at once),
  ``request_rate`` ("inf" or a number), ``request_throughput``, ``mean_e2el_ms`` (if the run kept
  the e2el percentile metric; ``mean_latency_ms`` before vLLM 0.6).
* **SGLang** ``python -m sglang.bench_serving --output-file`` (SGLang 0.3 - 0.5, JSON Lines: one
  object per run appended): the same field names as vLLM (``mean_ttft_ms``, ``mean_tpot_ms``,
  ``output_throughput``, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
  ``max_concurrency``, ``request_rate``) plus ``concurrency`` (mean requests in flight, = sum of
  latencies / duration) and ``mean_e2e_latency_ms``.
* **GenAI-Perf** ``profile_export_genai_perf.json`` (genai-perf 0.0.x, 2024-25) and **AIPerf**
  ``profile_export_aiperf.json`` (aiperf 0.1 - 0.3, 2025): metric objects ``{"unit": "ms", "avg":
  ...}`` named ``time_to_first_token``, ``inter_token_latency``, ``output_token_throughput``,
  ``request_throughput``, ``input_sequence_length``, ``output_sequence_length`` (AIPerf may nest
  them under ``records``), and ``input_config`` holding the ``concurrency`` or ``request_rate``
  the run was launched with (at any depth).
* **trtllm-bench** ``throughput --report_json`` (TensorRT-LLM 0.17 - 1.x): ``request_info``
  (``avg_input_length``, ``avg_output_length``, ``avg_num_concurrent_requests``),
  ``performance.system_output_throughput_tok_s``, ``streaming_metrics.avg_ttft_ms`` /
  ``avg_tpot_ms`` (only with ``--streaming``), ``world_info`` (``tp_size``, ``pp_size``,
  ``ep_size``), ``engine.version``.

An open-loop run (finite request rate, no concurrency cap) is turned into the closed loop the
model predicts by Little's law: requests in flight = request throughput x mean end-to-end latency
(the tool's own mean, or TTFT + (output - 1) x TPOT). A run that completes no more requests than
it keeps in flight (one wave, never refilled) has no steady state - its tokens/s is set by the
slowest request's makespan - so only its TTFT and TPOT are used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InputError
from planner.yamlio import read_text


@dataclass(frozen=True)
class Run:
    """One benchmark run, as the model can predict it (SI units)."""

    file: str
    tool: str
    input_len: int
    output_len: int
    concurrency: int                       # closed-loop requests in flight
    ttft_s: float | None
    tpot_s: float | None
    output_tokens_per_s: float | None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    version: str | None = None


def _num(obj: dict, key: str, path: Path, *, required: bool = True, positive: bool = False,
         inf: bool = False) -> float | None:
    """Field ``key`` as a finite number (``inf``: also "inf" or Infinity, a request rate's "all at
    once"; ``positive``: above 0, a count or a rate); absent is None unless ``required``."""
    v = obj.get(key)
    if v is None and not required:
        return None
    if inf and (v == math.inf or isinstance(v, str) and v.lower() == "inf"):
        return math.inf
    kind = ("positive " if positive else "") + ('number or "inf"' if inf else "finite number")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or positive and v <= 0:
        raise InputError(f"{path}: field {key!r}: expected a {kind}, got {v!r}")
    return float(v)


def _stat(obj: dict, key: str, path: Path, *, required: bool = True) -> float | None:
    """``avg`` of a GenAI-Perf/AIPerf metric object (a length, latency or rate: above 0)."""
    v = obj.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, dict) or isinstance(v.get("avg"), bool) or not isinstance(v.get("avg"), (int, float)) \
            or not math.isfinite(v["avg"]) or v["avg"] <= 0:
        raise InputError(f"{path}: field {key!r}: expected an object with a positive finite numeric 'avg', "
                         f"got {v!r}")
    return float(v["avg"])


def _degree(obj: dict, key: str, path: Path) -> int | None:
    """A parallel degree of the run's layout (trtllm-bench ``world_info``): a positive integer, or absent."""
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 1:
        raise InputError(f"{path}: field 'world_info.{key}': expected a positive integer, got {v!r}")
    return int(v)


def _find(obj, key: str):
    """First value of ``key`` at any depth of nested dicts."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def _concurrency(path: Path, cap: float | None, rate: float | None, req_per_s: float | None,
                 e2e_s: float | None) -> int:
    if cap is not None and cap > 0 and (rate is None or rate == math.inf):
        return int(round(cap))
    if req_per_s is not None and e2e_s is not None:
        return max(1, int(round(req_per_s * e2e_s)))          # Little's law
    raise InputError(f"{path}: field 'max_concurrency': expected a concurrency cap, or the request "
                     "throughput and mean latency of an open-loop run")


def _vllm_like(obj: dict, path: Path, tool: str) -> Run:
    done = _num(obj, "completed", path)
    if done <= 0:
        raise InputError(f"{path}: field 'completed': expected at least one completed request, got {done:g}")
    i = _num(obj, "total_input_tokens", path, positive=True) / done
    o = _num(obj, "total_output_tokens", path, positive=True) / done
    ttft = _num(obj, "mean_ttft_ms", path, positive=True) / 1e3
    tpot = _num(obj, "mean_tpot_ms", path, positive=True) / 1e3
    e2e = next((v for k in ("mean_e2el_ms", "mean_e2e_latency_ms", "mean_latency_ms")
                if (v := _num(obj, k, path, required=False))), None)
    e2e_s = e2e / 1e3 if e2e else ttft + (o - 1) * tpot
    measured_c = _num(obj, "concurrency", path, required=False, positive=True)       # SGLang: mean in flight
    cap = _num(obj, "max_concurrency", path, required=False, positive=True)
    rate = _num(obj, "request_rate", path, required=False, positive=True, inf=True)
    if not cap and rate == math.inf and "num_prompts" in obj:        # every prompt sent at t = 0
        cap = _num(obj, "num_prompts", path, positive=True)
    if measured_c and not cap:
        c = max(1, int(round(measured_c)))
    else:
        c = _concurrency(path, cap, rate, _num(obj, "request_throughput", path, required=False, positive=True),
                         e2e_s)
    tps = _num(obj, "output_throughput", path, positive=True)
    if done <= c:              # one wave, never refilled: no steady state, the slowest request sets the makespan
        tps = None
    return Run(str(path), tool, int(round(i)), int(round(o)), c, ttft, tpot, tps,
               version=obj.get("vllm_version") or obj.get("version"))


def _genai_perf(obj: dict, path: Path) -> Run:
    m = obj.get("records", obj)
    tool = "aiperf" if "records" in obj or "aiperf" in path.name else "genai-perf"
    i, o = _stat(m, "input_sequence_length", path), _stat(m, "output_sequence_length", path)
    ttft = _stat(m, "time_to_first_token", path) / 1e3
    itl = _stat(m, "inter_token_latency", path) / 1e3
    cfg = obj.get("input_config", {})
    load = {k: v for k in ("concurrency", "request_rate")                # (other kinds of value: not given)
            if isinstance(v := _find(cfg, k), (int, float)) and not isinstance(v, bool)}
    cap = _num(load, "concurrency", path, required=False)
    rate = _num(load, "request_rate", path, required=False, inf=True)
    lat = _stat(m, "request_latency", path, required=False)
    c = _concurrency(path, cap, rate, _stat(m, "request_throughput", path, required=False), lat / 1e3 if lat else None)
    return Run(str(path), tool, int(round(i)), int(round(o)), c, ttft, itl,
               _stat(m, "output_token_throughput", path), version=_find(cfg, "version"))


def _trtllm_bench(obj: dict, path: Path) -> Run:
    req, perf = obj.get("request_info"), obj.get("performance")
    if not isinstance(req, dict) or not isinstance(perf, dict):
        raise InputError(f"{path}: field 'request_info'/'performance': expected trtllm-bench report sections")
    stream = obj.get("streaming_metrics") or {}
    world = obj.get("world_info") or {}
    c = _num(req, "avg_num_concurrent_requests", path, positive=True)
    ttft = _num(stream, "avg_ttft_ms", path, required=False, positive=True)
    tpot = _num(stream, "avg_tpot_ms", path, required=False, positive=True)
    return Run(str(path), "trtllm-bench", int(round(_num(req, "avg_input_length", path, positive=True))),
               int(round(_num(req, "avg_output_length", path, positive=True))), max(1, int(round(c))),
               ttft / 1e3 if ttft else None, tpot / 1e3 if tpot else None,
               _num(perf, "system_output_throughput_tok_s", path, positive=True),
               tp=_degree(world, "tp_size", path), pp=_degree(world, "pp_size", path),
               ep=_degree(world, "ep_size", path),
               version=(obj.get("engine") or {}).get("version"))


def _one(obj, path: Path) -> Run:
    if not isinstance(obj, dict):
        raise InputError(f"{path}: expected a JSON object per run, got {type(obj).__name__}")
    if "request_info" in obj or "performance" in obj:
        return _trtllm_bench(obj, path)
    if "time_to_first_token" in obj or "records" in obj:
        return _genai_perf(obj, path)
    if "mean_ttft_ms" in obj:
        return _vllm_like(obj, path, "sglang" if "mean_e2e_latency_ms" in obj else "vllm")
    raise InputError(f"{path}: field 'mean_ttft_ms': not found - not a vLLM/SGLang, GenAI-Perf/AIPerf or "
                     "trtllm-bench result file")


def read_runs(path: str | Path) -> list[Run]:
    """Every run in one result file (JSON, or JSON Lines for SGLang)."""
    path = Path(path)
    text = read_text(path, "result file")
    try:
        return [_one(json.loads(text), path)]
    except json.JSONDecodeError:
        pass
    runs = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                runs.append(_one(json.loads(line), path))
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}: not JSON or JSON Lines: {e.msg}") from None
    if not runs:
        raise InputError(f"{path}: no runs found")
    return runs
