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

from planner.units import MAX_DEGREE

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
frameworks_app = typer.Typer(no_args_is_help=True, help="Serving-engine entries (--framework, engine.framework).")
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")
app.add_typer(frameworks_app, name="frameworks")


def _print_version(value: bool) -> None:
    if value:
        from planner import __version__

        typer.echo(f"planner {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """LLM serving-cluster capacity planner: roofline models of prefill and decode."""


FRAMEWORK_HELP = ("Serving engine whose efficiencies and overheads apply (vllm, vllm-rocm, sglang, tensorrt-llm, ... "
                  "or a framework YAML file), one of the device vendor's; default vLLM for the device's vendor "
                  "(vllm, vllm-rocm, vllm-ascend-graph).")


MEMORY_FRACTION_HELP = ("The engine's memory setting as on its command line: vLLM --gpu-memory-utilization and "
                        "SGLang --mem-fraction-static (of total memory), TensorRT-LLM "
                        "kv_cache_free_gpu_mem_fraction (of what weights and activations leave); default the "
                        "framework's.")
KV_POOL_TOKENS_HELP = ("Cap on the tokens the engine's KV pool holds per attention replica, as on its command "
                       "line: SGLang --max-total-tokens, TensorRT-LLM kv_cache_config.max_tokens, vLLM "
                       "--num-gpu-blocks-override x --block-size; the pool is the smaller of this and what "
                       "memory holds, except that vLLM allocates it as given (above memory: refused); default "
                       "memory alone.")
STATE_DTYPE_HELP = ("Format of linear-attention recurrent states (Gated DeltaNet: SGLang --mamba-ssm-dtype, "
                    "vLLM --mamba-ssm-cache-dtype); default the framework's (SGLang fp32, vLLM the model's bf16).")


class StateDTypeOpt(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class DTypeOpt(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    fp6 = "fp6"
    fp4 = "fp4"
    int4 = "int4"


@hardware_app.command("list")
@_guard
def hardware_list(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled hardware profiles."""
    from rich.table import Table

    from planner.catalog.dtypes import DType
    from planner.catalog.hardware import hardware, list_hardware
    from planner.hardware_compare import price_range
    from planner.report import out, print_json, si

    rows = []
    for name in list_hardware():
        h = hardware(name)
        rows.append(dict(name=name, vendor=h.vendor, bf16_flops=h.peak_flops[DType.bf16].value,
                         hbm_bytes=h.memory.capacity.value, hbm_bytes_per_s=h.memory.bandwidth.value,
                         domain=h.domain_size, tdp_w=h.power.tdp.value,
                         platform_w=h.power.platform.value if h.power.platform else None,
                         usd_per_h=h.price.rent.value if h.price.rent else None, usd_per_h_range=price_range(h)))
    if json_out:
        print_json(rows)
        return
    t = Table(title="Hardware profiles (per device; dense peak; $/h range: hardware_profiles/prices.yaml)")
    for col in ("name", "vendor", "BF16", "HBM", "HBM BW", "scale-up domain", "TDP", "platform", "$/h", "$/h range"):
        t.add_column(col)
    for r in rows:
        lo_hi = r["usd_per_h_range"]
        t.add_row(r["name"], r["vendor"], si(r["bf16_flops"], "FLOP/s"), si(r["hbm_bytes"], "B"),
                  si(r["hbm_bytes_per_s"], "B/s"), str(r["domain"]), si(r["tdp_w"], "W"),
                  si(r["platform_w"], "W") if r["platform_w"] else "-",
                  f"{r['usd_per_h']:.2f}" if r["usd_per_h"] else "-",
                  f"{lo_hi[0]:.2f}-{lo_hi[1]:.2f}" if lo_hi else "-")
    out.print(t)


@hardware_app.command("show")
@_guard
def hardware_show(name: str = typer.Argument(..., help="Profile name or a YAML file."),
                  json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show every figure of a profile with its source."""
    from rich.table import Table

    from planner.catalog.hardware import _figures, hardware
    from planner.report import figure_table, out, print_json

    h = hardware(name)
    if json_out:
        print_json(h.model_dump(mode="json"))
        return
    rows = [(path, f"{fig.value:.6g}", fig.source, fig.note or "") for path, fig in _figures(h)]
    sweep = h.scale_up.all_reduce_sweep
    if sweep is not None:        # a measured curve, not one number: the file it is read from
        rows.append(("scale_up.all_reduce_sweep", sweep.file, sweep.source, sweep.note or ""))
    out.print(figure_table(f"{h.name}: {h.description}", rows))
    used = {src for _, _, src, _ in rows}
    src = Table(title="Sources", show_header=False)
    for key in sorted(used):
        src.add_row(key, h.sources[key])
    out.print(src)


@hardware_app.command("compare")
@_guard
def hardware_compare(names: list[str] = typer.Argument(..., help="Two or more profile names."),
                     model: str = typer.Option(None, "--model", help="Add serving tokens/s per $ for this model."),
                     purchase: str = typer.Option(None, "--purchase", help="on_demand, spot, reserved_1y, reserved_3y, "
                                                  "capacity_block or own (default: each profile's default rate)."),
                     provider: str = typer.Option(None, "--provider", help="Provider in prices.yaml (else cheapest)."),
                     price: list[str] = typer.Option([], "--price", help="NAME=USD per device-hour (repeatable)."),
                     input_len: int = typer.Option(2000, "--input-len", min=1, max=10_000_000),
                     output_len: int = typer.Option(500, "--output-len", min=1, max=10_000_000),
                     weight_dtype: DTypeOpt = typer.Option(DTypeOpt.fp8, "--weight-dtype"),
                     framework: list[str] = typer.Option(
                         [], "--framework", help="Engine of the serving figures: NAME for every profile, or "
                         "VENDOR=NAME / PROFILE=NAME (repeatable, e.g. --framework nvidia=sglang); default: each "
                         "vendor's own."),
                     json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Profiles side by side with roofline ratios per dollar (FLOP/s, HBM bandwidth, tokens/s)."""
    from rich.table import Table

    from planner.errors import InputError
    from planner.hardware_compare import compare
    from planner.perf.cost import CostModel
    from planner.report import out, print_json, si

    try:
        named = {k.strip(): float(v) for k, v in (p.split("=", 1) for p in price)}
    except ValueError:
        raise typer.BadParameter("expected NAME=USD, e.g. --price mi355x=4.5", param_hint="--price") from None
    unused = sorted(set(named) - {n.strip() for n in names})
    if unused:        # a typo would be ignored silently, and the price the user meant never used
        raise typer.BadParameter(f"{', '.join(unused)} is not among the compared profiles ({', '.join(names)})",
                                 param_hint="--price")
    try:
        cost = CostModel(purchase=purchase, provider=provider, prices=named)
    except ValueError as e:
        from pydantic import ValidationError

        from planner.checks import split_located

        err = e.errors()[0] if isinstance(e, ValidationError) else None
        field = str(err["loc"][0]) if err and err["loc"] else ""
        where, msg = split_located(err["msg"].removeprefix("Value error, ")) if err else ((), str(e))
        hint = f"--{(where[0] if where else field).replace('_', '-')}" if err else "--purchase/--price"
        raise typer.BadParameter(msg, param_hint=hint) from None
    keyed = [f for f in framework if "=" in f]
    if keyed and len(keyed) < len(framework) or len(framework) > 1 and not keyed:
        raise typer.BadParameter("give one NAME for every profile, or VENDOR=NAME / PROFILE=NAME entries",
                                 param_hint="--framework")
    choice = dict(f.split("=", 1) for f in keyed) if keyed else (framework[0] if framework else None)
    try:
        rows = compare(names, cost, model, input_len, output_len, weight_dtype.value, choice)
    except InputError as e:
        if str(e).startswith("framework: "):        # the option's own problem, said as the option's
            raise typer.BadParameter(str(e).removeprefix("framework: "), param_hint="--framework") from None
        raise
    if json_out:
        print_json(rows)
        return
    def fmt(v, unit):
        return si(v, unit) if v else "-"

    figures = [("BF16", "bf16_flops", "FLOP/s"), ("FP8", "fp8_flops", "FLOP/s"), ("FP4", "fp4_flops", "FLOP/s"),
               ("HBM", "hbm_bytes", "B"), ("HBM BW", "hbm_bytes_per_s", "B/s"),
               ("host memory", "host_memory_bytes", "B"), ("host memory BW/dir", "host_memory_bytes_per_s", "B/s"),
               ("scale-up BW/dir", "scale_up_bytes_per_s", "B/s"), ("scale-out BW/dir", "scale_out_bytes_per_s", "B/s"),
               ("TDP", "tdp_w", "W"), ("platform W/device", "platform_w", "W"),
               ("ridge (BF16)", "ridge_flop_per_byte", "FLOP/B"), ("$/h", "usd_per_h", "$/h"),
               ("BF16 FLOP per $", "bf16_flop_per_usd", "FLOP"), ("HBM bytes per $", "hbm_bytes_per_usd", "B")]
    t = Table(title="Hardware side by side (per device; dense peak)")
    t.add_column("figure")
    for r in rows:
        t.add_column(r["name"])
    t.add_row("scale-up domain", *[str(r["domain"]) for r in rows])
    for label, key, unit in figures:
        t.add_row(label, *[fmt(r[key], unit) for r in rows])
    if model is not None:
        t.add_row(f"{model} layout", *[f"{r['serving']['layout']}, {r['serving']['weights']}" if r["serving"] else
                                       f"does not fit {r['domain']} devices" for r in rows])
        t.add_row("engine" if framework else "engine (vendor's default)",
                  *[r["serving"]["framework"] if r["serving"] else "-" for r in rows])
        t.add_row("output tok/s per device",
                  *[f"{r['serving']['output_tokens_per_s_per_device']:.0f}" if r["serving"] else "-" for r in rows])
        t.add_row("output tokens per $", *[fmt(r["output_tokens_per_usd"], "tok") for r in rows])
    out.print(t)
    for r in rows:
        out.print(f"price {r['name']}: {r['price']}")


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


@models_app.command("drafts")
@_guard
def models_drafts(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled EAGLE-3 draft models (for --draft / engine.draft)."""
    from rich.table import Table

    from planner.catalog.draft import draft, list_drafts
    from planner.report import out, print_json

    rows = []
    for name in list_drafts():
        d = draft(name)
        m = d.layer
        rows.append(dict(name=name, target_hidden=d.target_hidden, layers=m.num_layers, hidden=m.hidden_size,
                         intermediate=m.intermediate_size, draft_vocab=m.vocab_size, params=d.params, source=d.source))
    if json_out:
        print_json(rows)
        return
    t = Table(title="EAGLE-3 drafts (one dense layer each; BF16)")
    for col in ("name", "hidden", "MLP", "draft vocab", "params", "source"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], str(r["hidden"]), str(r["intermediate"]), f"{r['draft_vocab']:,}",
                  f"{r['params'] / 1e9:.2f} B", r["source"].split(";")[0])
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


@frameworks_app.command("list")
@_guard
def frameworks_list(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the bundled serving-engine entries, the vendors whose devices each runs on, and each
    vendor's default (the engine of a prediction that names none)."""
    from rich.table import Table

    from planner.catalog.frameworks import DEFAULT_FRAMEWORKS, framework, list_frameworks
    from planner.report import out, print_json

    rows = []
    for name in list_frameworks():
        fw = framework(name)
        default_for = [v for v, d in DEFAULT_FRAMEWORKS.items() if d == name]
        rows.append(dict(name=name, family=fw.family, vendors=fw.vendors, default_for=default_for,
                         description=fw.description))
    if json_out:
        print_json(rows)
        return
    t = Table(title="Serving engines (--framework NAME or a framework YAML file; planner frameworks show NAME)")
    for col in ("name", "engine", "vendors", "default on", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["family"] or "-", ", ".join(r["vendors"]), ", ".join(r["default_for"]),
                  r["description"])
    out.print(t)


@frameworks_app.command("show")
@_guard
def frameworks_show(name: str = typer.Argument(..., help="Entry name or a framework YAML file."),
                    json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show every figure an engine entry sets, with its source and note."""
    from planner.catalog.frameworks import entry_figures, framework
    from planner.report import figure_table, out, print_json

    fw = framework(name)
    rows = entry_figures(fw)
    if json_out:
        print_json({"name": fw.name, "family": fw.family, "vendors": fw.vendors, "description": fw.description,
                    "figures": [dict(path=p, value=v, source=src, note=note) for p, v, src, note in rows]})
        return
    def shown(value: object) -> str:
        return f"{value:.6g}" if isinstance(value, float) else ("-" if value in ({}, "") else str(value))

    engine = f"{fw.family} on " if fw.family else ""
    out.print(figure_table(f"{fw.name or name} ({engine}{', '.join(fw.vendors) or 'any vendor'}): {fw.description}",
                           [(path, shown(value), src, note) for path, value, src, note in rows]))


@app.command()
@_guard
def whatif(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local config.json."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Profile name or YAML file."),
    tp: int = typer.Option(1, "--tp", min=1, max=MAX_DEGREE, help="Tensor-parallel degree (attention)."),
    pp: int = typer.Option(1, "--pp", min=1, max=MAX_DEGREE, help="Pipeline stages."),
    ep: int = typer.Option(1, "--ep", min=1, max=MAX_DEGREE, help="Expert-parallel degree (MoE)."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Sequences in the batch."),
    input_len: int = typer.Option(..., "--input-len", "-i", min=1, help="Prompt tokens per sequence."),
    output_len: int = typer.Option(..., "--output-len", "-o", min=1, help="Generated tokens per sequence."),
    weight_dtype: DTypeOpt = typer.Option(DTypeOpt.bf16, "--weight-dtype", help="Weight format."),
    kv_dtype: DTypeOpt | None = typer.Option(None, "--kv-dtype", help="KV-cache format (default bf16)."),  # noqa: UP007
    mtp_tokens: int = typer.Option(0, "--mtp-tokens", min=0, max=64, help=(
        "Draft tokens per decode step (multi-token prediction; the draft module is one layer like the "
        "model's last plus the LM head, unless --draft names a draft model).")),
    mtp_acceptance: float = typer.Option(0.0, "--mtp-acceptance", min=0.0, max=0.99,
                                         help="Probability a draft token is accepted (given its predecessor was)."),
    draft: str | None = typer.Option(None, "--draft", help=(  # noqa: UP007
        "EAGLE-3 draft model proposing the draft tokens: a bundled name (qwen3-235b-a22b-eagle3, "
        "qwen3-32b-eagle3, llama-3.1-8b-eagle3, llama-3.1-70b-eagle3, deepseek-v3-eagle3) or a local "
        "EAGLE-3 config.json.")),
    framework: str | None = typer.Option(None, "--framework", help=FRAMEWORK_HELP),  # noqa: UP007
    state_dtype: StateDTypeOpt | None = typer.Option(None, "--state-dtype", help=STATE_DTYPE_HELP),  # noqa: UP007
    memory_fraction: float | None = typer.Option(None, "--memory-fraction", min=0.01, max=1.0,  # noqa: UP007
                                                 help=MEMORY_FRACTION_HELP),
    kv_pool_tokens: int | None = typer.Option(None, "--kv-pool-tokens", min=1, help=KV_POOL_TOKENS_HELP),  # noqa: UP007
    cp: int = typer.Option(1, "--cp", min=1, max=MAX_DEGREE, help="Context parallelism: prefill over N instances of "
                           "the layout (ring attention; TPOT and memory stay one instance's)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    explain: bool = typer.Option(False, "--explain", help="Per-operator breakdown: roofline time, the "
                                 "efficiency applied and its source."),
) -> None:
    """Roofline TTFT, TPOT, throughput and memory of one instance serving one batch."""
    from planner.perf.estimate import estimate, operator_breakdown
    from planner.report import err, print_json

    if mtp_acceptance and not mtp_tokens:
        raise typer.BadParameter("an acceptance rate without draft tokens would be ignored; give --mtp-tokens too",
                                 param_hint="--mtp-acceptance")

    e = estimate(model, hardware, tp=tp, pp=pp, ep=ep, batch=batch, input_len=input_len,
                 output_len=output_len, weight_dtype=weight_dtype.value,
                 kv_dtype=kv_dtype.value if kv_dtype else None, mtp_tokens=mtp_tokens, mtp_acceptance=mtp_acceptance,
                 framework=framework, cp=cp, draft=draft, state_dtype=state_dtype.value if state_dtype else None,
                 memory_fraction=memory_fraction, kv_pool_tokens=kv_pool_tokens)
    if json_out:
        doc = e.model_dump(mode="json")
        if explain:
            doc["breakdown"] = operator_breakdown(e)
        print_json(doc)
    else:
        from planner.report.whatif import print_estimate
        print_estimate(e, explain=explain)
    if not e.fits:
        err.print(f"[bold red]does not fit:[/] {e.infeasible_reason}")
        if e.suggestions:
            err.print("would fit: " + "; ".join(e.suggestions))
        raise typer.Exit(1)


@app.command()
@_guard
def throughput(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local config.json."),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Profile name or YAML file."),
    tp: int = typer.Option(1, "--tp", min=1, max=MAX_DEGREE, help="Tensor-parallel degree (attention)."),
    pp: int = typer.Option(1, "--pp", min=1, max=MAX_DEGREE, help="Pipeline stages."),
    ep: int = typer.Option(1, "--ep", min=1, max=MAX_DEGREE, help="Expert-parallel degree (MoE)."),
    input_len: int = typer.Option(..., "--input-len", "-i", min=1, help="Prompt tokens per request."),
    output_len: int = typer.Option(..., "--output-len", "-o", min=1, help="Generated tokens per request."),
    weight_dtype: DTypeOpt = typer.Option(DTypeOpt.bf16, "--weight-dtype", help="Weight format."),
    kv_dtype: DTypeOpt | None = typer.Option(None, "--kv-dtype", help="KV-cache format (default bf16)."),  # noqa: UP007
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", min=1,  # noqa: UP007
                                           help="Closed loop: this many requests in flight."),
    rate: float | None = typer.Option(None, "--rate", "-r", min=0.0, help="Open loop: Poisson "  # noqa: UP007
                                      "arrivals at this many requests/s."),
    ttft_p90: float | None = typer.Option(None, "--ttft-p90", min=0.0, help="SLO: P90 time to first "  # noqa: UP007
                                          "token, s (with --tpot-p90: the most load meeting both)."),
    tpot_p90: float | None = typer.Option(None, "--tpot-p90", min=0.0, help="SLO: P90 time per output "  # noqa: UP007
                                          "token, s."),
    ttft_p99: float | None = typer.Option(None, "--ttft-p99", min=0.0, help="SLO: P99 time to first "  # noqa: UP007
                                          "token, s (MLPerf Server / Interactive bound P99)."),
    tpot_p99: float | None = typer.Option(None, "--tpot-p99", min=0.0, help="SLO: P99 time per output "  # noqa: UP007
                                          "token, s."),
    framework: str | None = typer.Option(None, "--framework", help=FRAMEWORK_HELP),  # noqa: UP007
    state_dtype: StateDTypeOpt | None = typer.Option(None, "--state-dtype", help=STATE_DTYPE_HELP),  # noqa: UP007
    memory_fraction: float | None = typer.Option(None, "--memory-fraction", min=0.01, max=1.0,  # noqa: UP007
                                                 help=MEMORY_FRACTION_HELP),
    kv_pool_tokens: int | None = typer.Option(None, "--kv-pool-tokens", min=1, help=KV_POOL_TOKENS_HELP),  # noqa: UP007
    replay: bool = typer.Option(False, "--replay", help="With an SLO: find the load by replaying Poisson runs "
                                "(600 s of requests) in the simulator, as MLPerf's Server scenario measures it; "
                                "slower than the analytic curve (about a second)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Serving steady state of ONE instance: at a concurrency (closed loop; default: as many as fit),
    at a request rate (open loop), or the most load meeting a TTFT/TPOT SLO (P90 and/or P99)."""
    from planner.serving.batching import Engine
    from planner.throughput_cli import run_throughput

    if state_dtype is not None or memory_fraction is not None or kv_pool_tokens is not None:   # as that engine ran
        from planner.catalog.frameworks import as_run

        hardware = as_run(hardware, framework, state_dtype.value if state_dtype else None, memory_fraction,
                          kv_pool_tokens)
    run_throughput(model, hardware, tp=tp, pp=pp, ep=ep, input_len=input_len, output_len=output_len,
                   weight_dtype=weight_dtype.value, kv_dtype=kv_dtype.value if kv_dtype else None,
                   concurrency=concurrency, rate=rate, ttft_p90=ttft_p90, tpot_p90=tpot_p90, ttft_p99=ttft_p99,
                   tpot_p99=tpot_p99, replay=replay, json_out=json_out, engine=Engine(framework=framework))


@app.command()
@_guard
def plan(scenario: str = typer.Argument(..., help="Scenario YAML file."),
         json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
         plot: str | None = typer.Option(None, "--plot", help="Also draw the result into this image file "
                                         "(needs matplotlib: pip install 'planner\\[plot]')."),
         csv_out: str | None = typer.Option(None, "--csv", help="Also write the front / sweep / table as CSV."),
         sets: list[str] = typer.Option([], "--set", help="Override a scenario field: key.path=value "
                                        "(e.g. --set workload.rate=40); repeatable."),
         emit: tuple[str, str] | None = typer.Option(None, "--emit", metavar="ENGINE DIR",  # noqa: UP007
                                              help="Write the chosen deployment's launch files into DIR: ENGINE is "
                                              "vllm, sglang, trtllm, mindie or k8s (colocated design)."),
         ) -> None:
    """Plan a scenario: the cheapest deployment meeting its SLOs (and the simulator's check)."""
    from planner.report import print_json
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    scn = load_scenario(scenario, sets)
    from planner.report.outputs import check_plan_outputs

    check_plan_outputs(scenario, scn, csv_out, plot)   # before the work: folder, suffix, not an input
    if emit and emit[0] is not None:
        from planner.emit import check_emit

        check_emit(*emit, design=scn.design.type)
    if plot:
        from planner.report.plots import _pyplot

        _pyplot()                       # fail fast, before the work, if matplotlib is missing
    if json_out:
        result = run_scenario(scn)
    else:   # a transient spinner on stderr while the design runs (quiet under --json)
        from planner.report import err

        with err.status(f"planning {scn.name} ({scn.design.type})..."):
            result = run_scenario(scn)
    from planner.plan_prices import scenario_prices, unstated

    extra = unstated(result, scenario_prices(scn))          # prices a result type cannot carry itself
    if json_out:
        print_json(result.model_dump(mode="json") | ({"prices": [q.model_dump() for q in extra]} if extra else {}))
    elif result.design == "splitwise":
        from planner.report.plan import print_splitwise

        print_splitwise(result)
    elif result.design == "polca":
        from planner.report.plan import print_polca

        print_polca(result)
    elif result.design == "prfaas":
        from planner.report.plan import print_prfaas

        print_prfaas(result)
    elif result.design == "slo-search":
        from planner.report.plan import print_slo_search

        print_slo_search(result)
    elif result.design == "distserve":
        from planner.report.plan import print_distserve

        print_distserve(result)
    elif result.design == "fleet":
        from planner.report.plan import print_fleet

        print_fleet(result)
    elif result.design == "horizon":
        from planner.report.horizon import print_horizon

        print_horizon(result)
    else:
        from planner.report.plan import print_plan

        print_plan(result)
    if extra and not json_out:
        from planner.report import out

        out.print("prices used: " + "; ".join(q.text() for q in extra))
    if not json_out:
        from planner.report.plan import print_certainty

        print_certainty(result)
    if plot:
        from planner.report.plots import plot_result

        plot_result(result, plot)
    if csv_out:
        from planner.report.export import write_csv

        write_csv(result, csv_out)
    if emit and emit[0] is not None:
        from planner.emit import emit as write_launch_files
        from planner.emit import launch_note

        for path in write_launch_files(result, scn, *emit):
            typer.echo(f"wrote {path}", err=True)
        if note := launch_note(result, scn, emit[0]):
            typer.echo(f"note: {note}", err=True)


@app.command()
@_guard
def compare(scenarios: list[str] = typer.Argument(..., help="Two or more scenario YAML files."),
            json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
            sets: list[str] = typer.Option([], "--set", help="Override a field in every scenario: "
                                           "key.path=value; repeatable.")) -> None:
    """Run scenarios and show their headline numbers side by side (JSON keys a, b, c, ...)."""
    from planner.errors import PlannerError
    from planner.report import err, print_json
    from planner.run import headline, run_scenario
    from planner.scenario import load_scenario

    if len(scenarios) < 2:
        raise typer.BadParameter("give at least two scenarios", param_hint="SCENARIOS")
    loaded = [load_scenario(x, sets) for x in scenarios]     # every file checked before any run
    heads = []
    with err.status("comparing...") as status:
        for k, (path, scn) in enumerate(zip(scenarios, loaded, strict=True)):
            status.update(f"comparing {k + 1}/{len(loaded)}: {scn.name} ({scn.design.type})...")
            try:
                heads.append(headline(run_scenario(scn)))
            except PlannerError as e:              # which of the scenarios has no answer
                raise type(e)(f"{path}: {e}") from None
    labels = [chr(ord("a") + k) if k < 26 else f"s{k + 1}" for k in range(len(heads))]
    if json_out:
        print_json(dict(zip(labels, heads, strict=True)))
        return
    from rich.table import Table

    from planner.report import out

    t = Table(title="Scenarios side by side")
    t.add_column("")
    for x in scenarios:
        t.add_column(x)
    for key in dict.fromkeys(k for h in heads for k in h):
        fmt = (lambda v: f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
        t.add_row(key, *(fmt(h.get(key, "-")) for h in heads))
    out.print(t)


@app.command()
@_guard
def sessions(scenario: str = typer.Argument(..., help="Scenario YAML with a session workload."),
             json_out: bool = typer.Option(False, "--json", help="Print {plan, curve} as JSON."),
             plot: str | None = typer.Option(None, "--plot", help="Draw the capacity-vs-hit-rate curve into this "
                                             "image file (needs matplotlib).")) -> None:
    """Prefix cache of a session workload: hit rate per KV tier, simulator check, capacity curve."""
    from planner.catalog.model_catalog import model as get_model
    from planner.designs.kv_cache import KVCacheSpec, capacity_curve
    from planner.errors import InputError
    from planner.report import print_json
    from planner.run import run_scenario
    from planner.scenario import load_scenario
    from planner.serving.sessions import SessionWorkload

    scn = load_scenario(scenario)
    if not isinstance(scn.workload, SessionWorkload) or scn.design.type != "colocated":
        raise InputError(f"{scenario}: 'planner sessions' needs a colocated scenario with workload.sessions")
    if plot:
        from planner.report.outputs import check_plan_outputs
        from planner.report.plots import _pyplot

        check_plan_outputs(scenario, scn, None, plot)   # before the work: folder, suffix, not an input
        _pyplot()
    result = run_scenario(scn)
    curve = capacity_curve(get_model(scn.model), result.best, scn.workload, scn.kv_cache or KVCacheSpec(),
                           engine=scn.engine)
    if json_out:
        print_json({"plan": result.model_dump(mode="json"), "curve": curve.model_dump(mode="json")})
    else:
        from planner.report.sessions import print_sessions

        print_sessions(result, curve)
    if plot:
        from planner.report.sessions import plot_curve

        plot_curve(result, curve, plot)


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
    """Predicted vs every bundled published measurement: per-point error, summaries per vendor and framework."""
    from pathlib import Path

    from planner.report import err, print_json
    from planner.validate import validate as run

    with err.status("validating...") as status:
        result = run(Path(file) if file else None,
                     progress=lambda k, n: status.update(f"validating point {k + 1}/{n}..."))
    if json_out:
        print_json(result)
        return
    from planner.report.validation import print_validation

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


@app.command()
@_guard
def calibrate(
    results: list[str] = typer.Argument(..., help=(
        "Result files: vLLM benchmark_serving / vllm bench serve JSON, SGLang bench_serving JSONL, "
        "GenAI-Perf / AIPerf profile_export JSON, trtllm-bench --report_json.")),
    hardware: str = typer.Option(..., "--hardware", "-H", help="Profile name or YAML file the runs used."),
    model: str = typer.Option(..., "--model", "-m", help="Catalog name or local config.json the runs served."),
    name: str = typer.Option(..., "--framework", help="Name of the fitted entry (a catalog entry is the start)."),
    output: str | None = typer.Option(None, "--output", "-o", help="Entry file to write (default NAME.yaml)."),
    tp: int | None = typer.Option(None, "--tp", min=1, max=MAX_DEGREE,
                                  help="Tensor-parallel degree (default: the files' or 1)."),
    pp: int | None = typer.Option(None, "--pp", min=1, max=MAX_DEGREE,
                                  help="Pipeline stages (default: the files' or 1)."),
    ep: int | None = typer.Option(None, "--ep", min=1, max=MAX_DEGREE,
                                  help="Expert-parallel degree (default: the files' or 1)."),
    weight_dtype: DTypeOpt = typer.Option(DTypeOpt.bf16, "--weight-dtype", help="Weight format of the runs."),
    kv_dtype: DTypeOpt | None = typer.Option(None, "--kv-dtype", help="KV-cache format of the runs."),  # noqa: UP007
    json_out: bool = typer.Option(False, "--json", help="Print the fit report as JSON."),
    host_only: bool = typer.Option(False, "--host-only", help="Fit host time per step, per running sequence and "
                                   "per request instead of the step time and GEMM / memory scales (an engine on "
                                   "the profile's kernels, e.g. MindIE)."),
) -> None:
    """Fit a framework entry (step overhead, GEMM and memory scales) to your own benchmark runs."""
    from pathlib import Path

    from planner.calibrate_files import calibrate_files, check_entry_target, dump_entry
    from planner.outputs import atomic_path
    from planner.report import err, out, print_json

    deploy = dict(tp=tp, pp=pp, ep=ep, weight_dtype=weight_dtype.value, kv_dtype=kv_dtype.value if kv_dtype else None)
    path = check_entry_target(Path(output or f"{name}.yaml"), [*results, hardware, model])   # before the fit
    fw, report = calibrate_files(results, hardware, model, name, deploy, host_only)
    with atomic_path(path) as tmp:
        tmp.write_text(dump_entry(name, fw, report, str(path)))
    report["written"] = str(path)
    if json_out:
        print_json(report)
        return
    fitted = (f"step overhead {report['step_overhead_ms']:.2f} ms, per sequence {report['sequence_overhead_us']:.0f} "
              f"us, per request {report['request_overhead_ms']:.1f} ms" if host_only else
              f"step overhead {report['step_overhead_ms']:.2f} ms, GEMM scale {report['gemm_scale']:.3f}, "
              f"memory scale {report['memory_scale']:.3f}")
    if report["base"]:
        err.print(f"note: {report['base']}")
    out.print(f"{name}: {fitted} from {report['runs']} run(s) ({', '.join(report['tools'])})")
    out.print(f"error on those runs: median {report['median_abs_rel_error']:.1%}, max "
              f"{report['max_abs_rel_error']:.1%}; slowdown P10/P50/P90 "
              + "/".join(f"{v:.3f}" for v in report["slowdown_p10_p50_p90"]))
    if report["at_bounds"]:
        out.print(f"warning: {', '.join(report['at_bounds'])} ended at the edge of its range: the runs hold "
                  "something the engine model does not (e.g. API-server latency in TTFT), read the errors above")
    out.print(f"wrote {path} (use it as --framework {path} or engine.framework: {path})")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
