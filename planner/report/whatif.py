"""Rich rendering of an ``Estimate`` (``planner whatif``)."""

from __future__ import annotations

from rich.table import Table

from planner.perf.estimate import Estimate, estimate_inputs, operator_breakdown
from planner.report import key_value_table, out, si


def banded(value: float, p10: float | None, p90: float | None, unit: str) -> str:
    """``13.5 ms (12.1-16.0)``: the model's value and its P10-P90 band in the value's prefix."""
    text = si(value, unit)
    if p10 is None or p90 is None:
        return text
    number, _, suffix = text.partition(" ")
    scale = value / float(number) if float(number) else 1.0

    def num(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"

    return f"{text} ({num(p10 / scale)}-{num(p90 / scale)})"


def _range(p10: float | None, p90: float | None) -> str:
    return f" ({p10:,.0f}-{p90:,.0f})" if p10 is not None and p90 is not None else ""


def _cap_text(cap: int | None, pool: int) -> str:
    """What the launch's KV-pool token cap does to the pool: binds it, or asks more than memory gives
    (an engine that takes the smaller then ignores it; one that allocates it as given fails)."""
    if cap is None:
        return ""
    if cap <= pool:
        return f" (capped at {cap:,}: --kv-pool-tokens)"
    return f" (--kv-pool-tokens {cap:,} asks more than memory gives)"


def print_estimate(e: Estimate, explain: bool = False) -> None:
    cp = f" cp={e.cp} (prefill over {e.cp} instances)" if e.cp > 1 else ""
    layout = f"tp={e.tp} pp={e.pp} ep={e.ep}{cp} ({e.accelerators} x {e.hardware})"
    mem = e.memory
    rows = [
        ("layout", layout),
        ("batch x lengths", f"{e.batch} x ({e.input_len} in, {e.output_len} out)"),
        ("dtypes", f"weights {e.weight_dtype}, KV {e.kv_dtype}"
                   + (f", linear-attention state {e.state_dtype}" if e.state_dtype else "")),
        ("framework", f"{e.framework} (efficiencies and overheads of this engine; --framework to change)"),
        ("TTFT", f"{banded(e.ttft_s, e.ttft_s_p10, e.ttft_s_p90, 's')}  ({_bound(e.prefill.bound)}, "
                 f"comm {si(e.prefill.comm_s, 's')})"),
        ("TPOT", f"{banded(e.tpot_s, e.tpot_s_p10, e.tpot_s_p90, 's')}  ({_bound(e.decode.bound)}, "
                 f"comm {si(e.decode.comm_s, 's')})" if e.output_len > 1 else
                 "- (one output token: the prefill makes it, no decode step)"),
        ("end-to-end", si(e.e2e_s, "s")),
        ("output tokens/s",
         f"{e.output_tokens_per_s:,.0f}{_range(e.output_tokens_per_s_p10, e.output_tokens_per_s_p90)}  "
         f"({e.output_tokens_per_s / e.accelerators:,.0f} per device)"),
        ("total tokens/s", f"{e.total_tokens_per_s:,.0f}"),
        ("memory / device", f"{si(mem.used_bytes, 'B')} of {si(mem.capacity_bytes, 'B')}: weights "
                            f"{si(mem.weights_bytes, 'B')}, KV {si(mem.kv_cache_bytes, 'B')}, workspace "
                            f"{si(mem.workspace_bytes, 'B')}, "
                            + (f"communicator buffers {si(mem.comm_buffer_bytes, 'B')}"
                               + (" (made after the KV pool is sized: held in the engine's reserve)"
                                  if mem.comm_buffers_in_reserve else "") + ", " if mem.comm_buffer_bytes else "")
                            + (f"recurrent-state slots {si(mem.state_pool_bytes, 'B')} (the engine's state pool: "
                               f"{mem.state_slot_cap:,} requests at most), " if mem.state_slot_cap is not None else "")
                            + (f"runtime at start-up {si(mem.startup_bytes, 'B')}, " if mem.startup_bytes else "")
                            + f"reserve {si(mem.reserved_bytes, 'B')}"
                            + (" beside them" if mem.comm_buffer_bytes and mem.comm_buffers_in_reserve else "")
                            + (f" (engine memory setting {mem.memory_fraction:g} of "
                               + ("total memory" if mem.fraction_of == "total" else "what the weights leave")
                               + (", the engine's own pick for this device, layout and draft" if mem.fraction_auto
                                  else "")
                               + "; --memory-fraction to change)" if mem.fraction_of else "")),
        ("max batch that fits", f"{mem.max_batch:,}; the KV pool holds {mem.pool_tokens:,} tokens per attention "
                                "replica" + _cap_text(mem.kv_pool_tokens, mem.pool_tokens)),
        ("fits", "yes" if e.fits else "[bold red]no[/]"),
    ]
    if e.mtp_tokens:
        from planner.perf.speculation import Speculation

        spec = Speculation(e.mtp_tokens, e.mtp_acceptance)   # the draft model does not change the tokens per step
        spread = ""
        lo, hi = spec.quantile_tokens([0.1, 0.9])
        if hi - lo >= 0.005:
            spread = f"; {lo:.2f}-{hi:.2f} across requests, P10-P90"
        rows.insert(5, ("MTP", f"{e.mtp_tokens} draft token(s), {e.mtp_acceptance:.0%} accepted: "
                               f"{spec.tokens_per_step:.2f} tokens per decode step{spread} (TPOT = step / that; "
                               "comm is per step); drafts by "
                               + (f"the EAGLE-3 model {e.draft}" if e.draft else "the model's MTP module")))
    if e.bands:
        rows.append(("bands (P10-P90)", "; ".join(f"{k}: {v}" for k, v in e.bands.items())
                     + " (planner/catalog/bands.yaml)"))
    if e.usd_per_h is not None:
        per_m = e.usd_per_million_output_tokens
        rows.append(("cost", f"${e.usd_per_h:,.2f}/h" + (f", ${per_m:,.2f} per M output tokens" if per_m else
                                                         ", no output tokens")))
    for note in e.notes:
        rows.append(("note", note))
    out.print(key_value_table(f"{e.model} on {e.hardware}", rows))
    if explain:
        dies = estimate_inputs(e)[1].dies_per_device
        unit = "per device" if dies == 1 else f"per die: each of the {dies} dies of a package is one rank"
        t = Table(title=f"Per-operator breakdown ({unit}, all layers)",
                  caption="long sources are cut at their first clause; --json gives each in full")
        left = ("phase", "operator", "bound", "efficiency applied", "source")
        for col in ("phase", "operator", "layers", "time", "share", "roofline", "FLOPs", "bytes", "bound",
                    "efficiency applied", "source"):
            t.add_column(col, justify="left" if col in left else "right")
        totals = {"prefill": e.ttft_s, "decode": e.tpot_s}
        for r in operator_breakdown(e):
            t.add_row(r["phase"], r["op"], str(r["layers"]), si(r["time_s"], "s"),
                      f"{100 * r['time_s'] / totals[r['phase']]:.1f}%", si(r["roofline_s"], "s"),
                      si(r["flops"], "FLOP"), si(r["bytes"], "B"), r["bound"], r["efficiency"],
                      short_source(r["source"]))
        out.print(t)


def short_source(text: str, width: int = 48) -> str:
    """A source as a table cell: whole when short, else its first clause (up to the first
    parenthesis, comma, colon or semicolon within ``width`` characters) and an ellipsis."""
    if len(text) <= width:
        return text
    cuts = [i for sep in (" (", ", ", ": ", "; ") if 0 < (i := text.find(sep)) <= width]
    head = text[:min(cuts)] if cuts else text[:width].rsplit(" ", 1)[0]
    return head + " ..."


def _bound(bound: str) -> str:
    """``compute-bound``, ...; a phase the engine's host time sets (step overhead, eager operator
    launches) is ``host-bound``."""
    return "host-bound" if bound == "overhead" else f"{bound}-bound"
