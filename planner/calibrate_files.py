"""``planner calibrate RESULTS... --hardware H --model M --framework NAME -o NAME.yaml``: fit a
framework entry to the user's own benchmark runs (``benchfiles.py`` reads them).

Every run is predicted by the closed-loop serving model (``planner.throughput`` at the run's
lengths and concurrency) with a candidate entry; the step overhead, GEMM scale and memory scale
minimize the sum of squared log errors of mean TTFT, mean TPOT and output tokens/s over all runs
(``scipy.optimize.least_squares``, trust-region reflective, bounds 0.1-100 ms and 0.1-1.0; started
from the best point of a 2 x 2 x 2 grid of ``calibrate.candidate`` entries). Log errors weigh a 10%
miss alike on a 20 ms TPOT and a 2 s TTFT. ``--host-only`` fits host time instead of kernel scales -
per step (0.1-100 ms), per running sequence (0-2,000 us) and per request in TTFT (0-500 ms) - for
an engine that runs the profile's kernels and differs by its scheduler (MindIE's synchronous
scheduling: the catalog's mindie entry is fitted so). The entry keeps the base entry's scheduling defaults
(max_num_seqs, KV reservation) when NAME is a catalog framework. The written file is a
one-entry frameworks file, usable wherever a framework name is (``framework(path)``); its header
gives the fit's residuals and their slowdown quantiles (in-sample: a band for these runs only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from planner.benchfiles import Run, read_runs
from planner.calibrate import candidate
from planner.catalog.bands import conformal_quantile
from planner.catalog.frameworks import Framework, framework
from planner.catalog.hardware import hardware
from planner.errors import InputError
from planner.serving.batching import Engine
from planner.serving.closed_loop import throughput

METRICS = ("ttft_s", "tpot_s", "output_tokens_per_s")
# the fitted parameters, in the units ``_entry`` reads them in: (name, the two starting values of
# the 2 x 2 x 2 grid, lower and upper bound, least-squares scale); the default fit, and --host-only
KERNEL = (("step_overhead_ms", (3.0, 15.0), 0.1, 100.0, 5.0), ("gemm_scale", (0.5, 0.9), 0.1, 1.0, 0.2),
          ("memory_scale", (0.6, 0.95), 0.1, 1.0, 0.2))
HOST = (("step_overhead_ms", (3.0, 15.0), 0.1, 100.0, 5.0),
        ("sequence_overhead_us", (0.0, 200.0), 0.0, 2000.0, 100.0),
        ("request_overhead_ms", (0.0, 40.0), 0.0, 500.0, 10.0))


def predict_runs(runs: list[Run], fw: Framework, hw_name: str, model: str, deploy: dict) -> np.ndarray:
    """Predicted (runs x METRICS) for entry ``fw``; one serving steady state per run."""
    hw = fw.apply(hardware(hw_name))
    out = np.empty((len(runs), len(METRICS)))
    for k, r in enumerate(runs):
        s = throughput(model, hw, input_len=r.input_len, output_len=r.output_len, concurrency=r.concurrency,
                       engine=Engine(**fw.engine_knobs()), **deploy)
        out[k] = [getattr(s, m) for m in METRICS]
    return out


def measured(runs: list[Run]) -> np.ndarray:
    """Measured (runs x METRICS), NaN where a run does not report the metric."""
    return np.array([[getattr(r, m) if getattr(r, m) else np.nan for m in METRICS] for r in runs], dtype=float)


def _entry(base: Framework, x, host: bool, note: str | None = None) -> Framework:
    """``base`` with fitted parameters ``x`` (``KERNEL`` or ``HOST`` order, in their units)."""
    if host:
        return candidate(base, x[0] * 1e-3, None, sequence_s=x[1] * 1e-6, request_s=x[2] * 1e-3, note=note)
    return candidate(base, x[0] * 1e-3, float(x[1]), float(x[2]), note=note)


def _log_errors(x, base, runs, hw_name, model, deploy, meas, host) -> np.ndarray:
    pred = predict_runs(runs, _entry(base, x, host), hw_name, model, deploy)
    e = np.log(pred / meas)
    return e[np.isfinite(e)]


def fit_runs(runs: list[Run], hw_name: str, model: str, deploy: dict, base: Framework,
             host: bool = False) -> tuple[Framework, dict]:
    """The fitted entry and its report (parameters, residuals, in-sample slowdown quantiles);
    ``host``: the three host times instead of the step time and kernel scales."""
    from scipy.optimize import least_squares

    meas = measured(runs)
    if np.isfinite(meas).sum() < 3:
        raise InputError("calibrate needs at least 3 measured values (TTFT, TPOT or throughput) to fit 3 parameters")
    params = HOST if host else KERNEL
    args = (base, runs, hw_name, model, deploy, meas, host)
    starts = [np.array(x) for x in np.array(np.meshgrid(*(p[1] for p in params))).reshape(3, -1).T]   # 8 corners
    x0 = min(starts, key=lambda x: float(np.sum(_log_errors(x, *args) ** 2)))
    lo, hi = [p[2] for p in params], [p[3] for p in params]
    res = least_squares(_log_errors, np.clip(x0, lo, hi), args=args, bounds=(lo, hi),
                        diff_step=1e-3, x_scale=[p[4] for p in params], xtol=1e-6, ftol=1e-8)
    fw = _entry(base, res.x, host, note=f"planner calibrate on {len(runs)} run(s) of {hw_name}/{model}")
    pred = predict_runs(runs, fw, hw_name, model, deploy)
    rel = pred / meas - 1.0
    slowdown = np.where(np.arange(len(METRICS)) < 2, meas / pred, pred / meas)[np.isfinite(meas)]
    s = np.sort(slowdown)
    report = {**{p[0]: float(v) for p, v in zip(params, res.x, strict=True)},
              "points": int(np.isfinite(meas).sum()),
              "median_abs_rel_error": float(np.nanmedian(np.abs(rel))),
              "max_abs_rel_error": float(np.nanmax(np.abs(rel))),
              "per_metric_median_abs_rel_error": {m: float(np.nanmedian(np.abs(rel[:, j]))) if np.isfinite(
                  rel[:, j]).any() else None for j, m in enumerate(METRICS)},
              "slowdown_p10_p50_p90": [conformal_quantile(s, q) for q in (0.1, 0.5, 0.9)],
              "at_bounds": [p[0] for p, v, a, b in zip(params, res.x, lo, hi, strict=True)
                            if min(v - a, b - v) < 1e-6 * (b - a)]}
    return fw, report


def base_entry(name: str) -> Framework:
    """The catalog entry ``name`` if there is one, else an empty entry (profile defaults)."""
    try:
        return framework(name)
    except InputError:
        return Framework(description=f"{name} (calibrated from the user's benchmark runs)")


def calibrate_files(files: list[str], hw_name: str, model: str, name: str, deploy: dict,
                    host: bool = False) -> tuple[Framework, dict]:
    from planner.catalog.frameworks import vendor_mismatch

    twice = sorted({f for f in files if sum(Path(g).resolve() == Path(f).resolve() for g in files) > 1})
    if twice:
        raise InputError(f"{twice[0]}: given more than once; each result file is its runs once")
    runs = [r for f in files for r in read_runs(f)]
    hw = hardware(hw_name)                               # unknown names fail before any work
    base = base_entry(name)
    if why := vendor_mismatch(base, hw):
        raise InputError(f"--framework: {why}")
    for key in ("tp", "pp", "ep"):                       # the files' layout unless given
        if deploy.get(key) is None:
            vals = {getattr(r, key) for r in runs if getattr(r, key)}
            if len(vals) > 1:
                raise InputError(f"the result files ran {key} = {', '.join(str(v) for v in sorted(vals))}: one fit is "
                                 f"for one layout; calibrate each layout's files apart (or give --{key})")
            deploy[key] = int(vals.pop()) if vals else 1
    fw, report = fit_runs(runs, hw_name, model, deploy, base, host)
    report |= {"base": _base_note(name),
               "files": files, "runs": len(runs), "tools": sorted({r.tool for r in runs}), "hardware": hw_name,
               "model": model, **{k: v for k, v in deploy.items() if v is not None}}
    desc = f"{name}: fitted by planner calibrate to {len(runs)} run(s) ({', '.join(report['tools'])}) on {hw_name}"
    return fw.model_copy(update={"description": desc}), report


def _base_note(name: str) -> str | None:
    """None where ``name`` is a catalog entry (the fit starts from it); else what the fit starts
    from, with the catalog entry the name may have meant."""
    import difflib

    from planner.catalog.frameworks import list_frameworks

    if name in list_frameworks():
        return None
    close = difflib.get_close_matches(name, list_frameworks(), n=1, cutoff=0.6)
    return (f"{name} is not a catalog entry, so the fit starts from the profile's defaults and no engine's scheduler"
            + (f" (did you mean --framework {close[0]}?)" if close else ""))


HEADER = "# Framework entry fitted by `planner calibrate`"


def check_entry_target(path: Path, inputs: list[str]) -> Path:
    """``path`` if the fitted entry may be written there (``outputs.check_output``: its folder
    writable, not a folder, not one of the result files), and it is new or an entry an earlier
    ``planner calibrate`` wrote (a refit replaces it); any other existing file is the user's and
    is never overwritten."""
    from planner.errors import InputError
    from planner.outputs import check_output
    from planner.yamlio import read_text

    check_output(path, "--output", inputs)
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise InputError(f"--output {path}: a framework entry is a YAML file (.yaml or .yml), which --framework "
                         "and engine.framework read by that suffix")
    if path.exists() and not read_text(path, "file").startswith(HEADER):
        raise InputError(f"--output {path}: exists and was not written by planner calibrate; it is left as it is: "
                         f"give another --output (or --framework name) or move it away")
    return path


def dump_entry(name: str, fw: Framework, report: dict, path: str | None = None) -> str:
    """A one-entry frameworks file with the fit's report as its header."""
    path = path or f"{name}.yaml"
    head = [f"{HEADER} (planner/calibrate_files.py); use it by path:",
            f"#   --framework {path}, or engine.framework: {path} in a scenario",
            f"# runs: {report['runs']} from {', '.join(Path(f).name for f in report['files'])} "
            f"({', '.join(report['tools'])})",
            f"# hardware {report['hardware']}, model {report['model']}, tp {report.get('tp')}, ep {report.get('ep')}, "
            f"pp {report.get('pp')}",
            f"# in-sample error: median {report['median_abs_rel_error']:.1%}, max {report['max_abs_rel_error']:.1%} "
            f"over {report['points']} values; slowdown (measured/predicted time) P10/P50/P90 "
            + "/".join(f"{v:.3f}" for v in report["slowdown_p10_p50_p90"]),
            f"# parameters at the edge of their range: {', '.join(report['at_bounds']) or 'none'}"]
    body = {name: fw.model_dump(mode="json", exclude_none=True)}
    return "\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False, width=200)
