"""Command-line interface: a thin typer layer over the public API.

Errors: bad input -> one line on stderr, exit 2 (typer/click usage errors too); an understood but
infeasible request (model does not fit, ...) -> the answer and why, exit 1. Heavy modules load
inside commands, so ``planner --help`` starts fast.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from enum import Enum
from typing import TypeVar

import typer

F = TypeVar("F", bound=Callable)


def _guard(fn: F) -> F:
    """Turn planner errors into one line on stderr and their exit code (2 input, 1 infeasible)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from planner.errors import PlannerError

        try:
            return fn(*args, **kwargs)
        except PlannerError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None

    return wrapper  # type: ignore[return-value]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="LLM serving-cluster capacity planner: roofline models of prefill and decode.")
hardware_app = typer.Typer(no_args_is_help=True, help="Hardware profiles.")
models_app = typer.Typer(no_args_is_help=True, help="Model catalog.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")


class DTypeOpt(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    fp4 = "fp4"
    int4 = "int4"


@hardware_app.command("list")
@_guard
def hardware_list(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled hardware profiles."""
    from rich.table import Table

    from planner.catalog.dtypes import DType
    from planner.catalog.hardware import hardware, list_hardware
    from planner.report import out, print_json, si

    rows = []
    for name in list_hardware():
        h = hardware(name)
        rows.append(dict(name=name, vendor=h.vendor, bf16_flops=h.peak_flops[DType.bf16].value,
                         hbm_bytes=h.memory.capacity.value, hbm_bytes_per_s=h.memory.bandwidth.value,
                         domain=h.domain_size, tdp_w=h.power.tdp.value,
                         usd_per_h=h.price.rent.value if h.price.rent else None))
    if json_out:
        print_json(rows)
        return
    t = Table(title="Hardware profiles (per device; dense peak)")
    for col in ("name", "vendor", "BF16", "HBM", "HBM BW", "scale-up domain", "TDP", "$/h"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["vendor"], si(r["bf16_flops"], "FLOP/s"), si(r["hbm_bytes"], "B"),
                  si(r["hbm_bytes_per_s"], "B/s"), str(r["domain"]), si(r["tdp_w"], "W"),
                  f"{r['usd_per_h']:.2f}" if r["usd_per_h"] else "-")
    out.print(t)


@hardware_app.command("show")
@_guard
def hardware_show(name: str = typer.Argument(..., help="Profile name or a YAML file."),
                  json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show every figure of a profile with its source."""
    from rich.table import Table

    from planner.catalog.hardware import _figures, hardware
    from planner.report import out, print_json

    h = hardware(name)
    if json_out:
        print_json(h.model_dump(mode="json"))
        return
    t = Table(title=f"{h.name}: {h.description}")
    for col in ("figure", "value (SI)", "source", "note"):
        t.add_column(col)
    used = set()
    for path, fig in _figures(h):
        t.add_row(path, f"{fig.value:.6g}", fig.source, fig.note or "")
        used.add(fig.source)
    out.print(t)
    src = Table(title="Sources", show_header=False)
    for key in sorted(used):
        src.add_row(key, h.sources[key])
    out.print(src)


@models_app.command("list")
@_guard
def models_list(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled models."""
    from rich.table import Table

    from planner.catalog.model_catalog import list_models, model
    from planner.perf.params import parameter_counts
    from planner.report import out, print_json

    rows = []
    for name in list_models():
        m = model(name)
        total, active = parameter_counts(m)
        rows.append(dict(name=name, family=m.family, attention=m.attention_kind, layers=m.num_layers,
                         moe=m.moe is not None, hybrid=m.linear_attention is not None,
                         params=total, active_params=active))
    if json_out:
        print_json(rows)
        return
    t = Table(title="Models")
    for col in ("name", "family", "attention", "layers", "params", "active", "MoE", "hybrid"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["family"], r["attention"], str(r["layers"]), f"{r['params'] / 1e9:.1f} B",
                  f"{r['active_params'] / 1e9:.1f} B", "yes" if r["moe"] else "", "yes" if r["hybrid"] else "")
    out.print(t)


@models_app.command("show")
@_guard
def models_show(name: str = typer.Argument(..., help="Catalog name or a local config.json."),
                json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show a model's architecture, parameter counts and KV bytes per token."""
    from planner.catalog.model_catalog import model
    from planner.perf.memory import kv_cache_bytes_per_token
    from planner.perf.params import parameter_counts
    from planner.report import key_value_table, out, print_json

    m = model(name)
    total, active = parameter_counts(m)
    data = m.model_dump(mode="json") | {"params": total, "active_params": active,
                                        "kv_bytes_per_token_bf16": kv_cache_bytes_per_token(m)}
    if json_out:
        print_json(data)
        return
    rows = [(k, str(v)) for k, v in data.items() if v not in (None, False, [], ())]
    out.print(key_value_table(f"{m.name}", rows))


@app.command()
@_guard
def whatif(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local config.json."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Profile name or YAML file."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel degree (attention)."),
    pp: int = typer.Option(1, "--pp", min=1, help="Pipeline stages."),
    ep: int = typer.Option(1, "--ep", min=1, help="Expert-parallel degree (MoE)."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Sequences in the batch."),
    input_len: int = typer.Option(..., "--input-len", "-i", min=1, help="Prompt tokens per sequence."),
    output_len: int = typer.Option(..., "--output-len", "-o", min=1, help="Generated tokens per sequence."),
    weight_dtype: DTypeOpt = typer.Option(DTypeOpt.bf16, "--weight-dtype", help="Weight format."),
    kv_dtype: DTypeOpt | None = typer.Option(None, "--kv-dtype", help="KV-cache format (default bf16)."),  # noqa: UP007
    mtp_tokens: int = typer.Option(0, "--mtp-tokens", min=0, help=(
        "Draft tokens per decode step (multi-token prediction; the draft module is one layer like the "
        "model's last plus the LM head).")),
    mtp_acceptance: float = typer.Option(0.0, "--mtp-acceptance", min=0.0, max=0.99,
                                         help="Probability a draft token is accepted (given its predecessor was)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    explain: bool = typer.Option(False, "--explain", help="Per-operator breakdown."),
) -> None:
    """Roofline TTFT, TPOT, throughput and memory of one instance serving one batch."""
    from planner.perf.estimate import estimate
    from planner.report import err, print_json

    e = estimate(model, hardware, tp=tp, pp=pp, ep=ep, batch=batch, input_len=input_len,
                 output_len=output_len, weight_dtype=weight_dtype.value,
                 kv_dtype=kv_dtype.value if kv_dtype else None, mtp_tokens=mtp_tokens, mtp_acceptance=mtp_acceptance)
    if json_out:
        print_json(e.model_dump(mode="json"))
    else:
        from planner.whatif_report import print_estimate
        print_estimate(e, explain=explain)
    if not e.fits:
        err.print(f"[bold red]does not fit:[/] {e.infeasible_reason}")
        if e.suggestions:
            err.print("would fit: " + "; ".join(e.suggestions))
        raise typer.Exit(1)


@app.command()
@_guard
def plan(scenario: str = typer.Argument(..., help="Scenario YAML file."),
         json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
         plot: str | None = typer.Option(None, "--plot", help="Also draw the result into this image file "
                                         "(needs matplotlib: pip install 'planner[plot]')."),
         csv_out: str | None = typer.Option(None, "--csv", help="Also write the front / sweep / table as CSV."),
         ) -> None:
    """Plan a scenario: the cheapest deployment meeting its SLOs (and the simulator's check)."""
    from planner.report import print_json
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    scn = load_scenario(scenario)
    if plot:
        from planner.plots import _pyplot

        _pyplot()                       # fail fast, before the work, if matplotlib is missing
    if json_out:
        result = run_scenario(scn)
    else:   # a transient spinner on stderr while the design runs (quiet under --json)
        from planner.report import err

        with err.status(f"planning {scn.name} ({scn.design.type})..."):
            result = run_scenario(scn)
    if json_out:
        print_json(result.model_dump(mode="json"))
    elif result.design == "splitwise":
        from planner.plan_report import print_splitwise

        print_splitwise(result)
    elif result.design == "polca":
        from planner.plan_report import print_polca

        print_polca(result)
    elif result.design == "prfaas":
        from planner.plan_report import print_prfaas

        print_prfaas(result)
    elif result.design == "slo-search":
        from planner.plan_report import print_slo_search

        print_slo_search(result)
    elif result.design == "fleet":
        from planner.plan_report import print_fleet

        print_fleet(result)
    else:
        from planner.plan_report import print_plan

        print_plan(result)
    if plot:
        from planner.plots import plot_result

        plot_result(result, plot)
    if csv_out:
        from planner.export import write_csv

        write_csv(result, csv_out)


@app.command()
@_guard
def compare(a: str = typer.Argument(..., help="First scenario YAML."),
            b: str = typer.Argument(..., help="Second scenario YAML."),
            json_out: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Run two scenarios and show their headline numbers side by side."""
    from planner.report import print_json
    from planner.run import headline, run_scenario
    from planner.scenario import load_scenario

    heads = [headline(run_scenario(load_scenario(x))) for x in (a, b)]
    if json_out:
        print_json({"a": heads[0], "b": heads[1]})
        return
    from rich.table import Table

    from planner.report import out

    t = Table(title="Scenarios side by side")
    t.add_column("")
    t.add_column(a)
    t.add_column(b)
    for key in dict.fromkeys([*heads[0], *heads[1]]):
        fmt = (lambda v: f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
        t.add_row(key, fmt(heads[0].get(key, "-")), fmt(heads[1].get(key, "-")))
    out.print(t)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the scenario format."""
    from planner.report import print_json
    from planner.scenario import scenario_schema

    print_json(scenario_schema())


@app.command()
@_guard
def validate(json_out: bool = typer.Option(False, "--json", help="Print {points, summary} as JSON."),
             file: str | None = typer.Option(None, "--file", help="Another measurements YAML."),
             ) -> None:
    """Predicted vs published measurements: per-point error and a summary per vendor and metric."""
    from pathlib import Path

    from planner.report import print_json
    from planner.validate import validate as run

    result = run(Path(file) if file else None)
    if json_out:
        print_json(result)
        return
    from planner.validate_report import print_validation

    print_validation(result)


@app.command()
@_guard
def sweep(file: str = typer.Argument(..., help="Sweep YAML: a base scenario and a grid of overrides."),
          out: str | None = typer.Option(None, "--out", help="Result file, .csv or .parquet (default: the "
                                         "sweep's 'output', else SWEEP.csv beside it)."),
          workers: int = typer.Option(1, "--workers", min=1, help="Local worker processes."),
          scheduler: str | None = typer.Option(None, "--scheduler", help="Dask scheduler address, e.g. "
                                               "tcp://host:8786 (pip install \"planner[dask]\")."),
          quiet: bool = typer.Option(False, "--quiet", help="No progress line on stderr."),
          ) -> None:
    """Run every variant of a sweep; rows stream into one file as they finish, a rerun skips done ids."""
    from pathlib import Path

    from planner.sweep.runner import run_sweep
    from planner.sweep.spec import load_sweep

    sw = load_sweep(file)
    target = out or sw.output or str(Path(file).with_suffix(".csv"))
    try:
        s = run_sweep(sw, target, workers=workers, scheduler=scheduler, progress=not quiet)
    except KeyboardInterrupt:
        typer.echo(f"\ninterrupted: finished rows are in {target}; rerun the same command to resume", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"{target}: {s.ran} variants run ({s.failed} infeasible or failed), {s.skipped} already done, "
               f"{s.total} in the sweep, {s.seconds:.1f} s", err=True)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
