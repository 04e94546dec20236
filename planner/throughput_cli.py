"""``planner throughput``: the three questions about one instance under load, and their tables."""

from __future__ import annotations

from planner.errors import InputError
from planner.report import key_value_table, out, print_json, si


def run_throughput(model: str, hardware, *, concurrency: int | None, rate: float | None,
                   ttft_p90: float | None, tpot_p90: float | None, json_out: bool,
                   ttft_p99: float | None = None, tpot_p99: float | None = None, replay: bool = False,
                   **kw) -> None:
    """Closed loop at ``concurrency`` (``planner.throughput``), open loop at ``rate``
    (``load_point.at_rate``) or the most load meeting the SLO (``load_point.max_load``): P90
    and / or P99 bounds on TTFT and TPOT (MLPerf's Server and Interactive scenarios bound P99);
    ``replay``: that load found by replaying runs in the simulator (``serving.replayed_load``)."""
    slo_given = any(v is not None for v in (ttft_p90, tpot_p90, ttft_p99, tpot_p99))
    if sum((concurrency is not None, rate is not None, slo_given)) > 1:
        raise InputError("give one of --concurrency, --rate or the SLO (--ttft-p90/--tpot-p90, --ttft-p99/--tpot-p99)")
    if replay and not slo_given:
        raise InputError("--replay finds the most load meeting an SLO: give --ttft-p90/--tpot-p90 or "
                         "--ttft-p99/--tpot-p99 with it")
    if rate is not None or slo_given:
        from planner.serving import load_point

        if rate is not None:
            r = load_point.at_rate(model, hardware, rate=rate, **kw)
        else:
            from pydantic import ValidationError

            from planner.serving.slo import SLO, Target

            try:
                slo = SLO(ttft_s=Target(p90=ttft_p90, p99=ttft_p99), tpot_s=Target(p90=tpot_p90, p99=tpot_p99))
            except ValidationError as e:
                raise InputError(f"--ttft-p90/--tpot-p90/--ttft-p99/--tpot-p99: {e.errors()[0]['msg']}") from None
            if replay:
                _print_replayed(model, hardware, slo, json_out, **kw)
                return
            r = load_point.max_load(model, hardware, slo=slo, **kw)
        if json_out:
            print_json(r.model_dump(mode="json"))
            return
        lat = lambda d: " / ".join(si(d[p], "s") for p in ("p50", "p90", "p99"))  # noqa: E731
        title = (f"{r.model} on {r.accelerators}x {r.hardware} (tp={r.tp} pp={r.pp} ep={r.ep}), "
                 f"{r.input_len} in / {r.output_len} out, Poisson arrivals")
        out.print(key_value_table(title, [
            ("load", f"{r.requests_per_s:.4g} req/s ({r.output_tokens_per_s:,.0f} output tokens/s)"
                     + ("" if r.binding == "rate" else f"; the most meeting the SLO (binding: {r.binding})")),
            ("capacity", f"{r.max_rate:.4g} req/s at most (prefill busy {100 * r.prefill_utilization:.0f}% here)"),
            *_near_capacity(r),
            ("TTFT p50/p90/p99", lat(r.ttft_s)), ("TPOT p50/p90/p99", lat(r.tpot_s)),
            ("E2E p50/p90/p99", lat(r.e2e_s)), ("decode batch", f"{r.decode_batch:.1f} sequences (mean)"),
            ("power", si(r.power_w, "W")),
            *([("cost", f"${r.usd_per_h:,.2f}/h")] if r.usd_per_h is not None else []),
        ]))
        return
    from planner.serving.closed_loop import throughput

    s = throughput(model, hardware, concurrency=concurrency, **kw)
    if json_out:
        print_json(s.model_dump(mode="json"))
        return
    out.print(key_value_table(f"{s.model} on {s.accelerators}x {s.hardware} (tp={s.tp} pp={s.pp} ep={s.ep}), "
                              f"{s.input_len} in / {s.output_len} out, closed loop", [
        ("concurrency", f"{s.concurrency:.1f} requests in flight" + (" (as many as fit)" if concurrency is None
                                                                      else "")),
        ("throughput", f"{s.requests_per_s:.4g} req/s, {s.output_tokens_per_s:,.0f} output tokens/s, "
                       f"{s.total_tokens_per_s:,.0f} total tokens/s"),
        ("TTFT / TPOT (mean)", f"{si(s.ttft_s, 's')} / {si(s.tpot_s, 's')}"),
        ("decode batch", f"{s.decode_batch:.1f} sequences"), ("limited by", s.limit),
        ("engine limits", f"{s.max_num_seqs:,} sequences, {s.max_batched_tokens:,} tokens per iteration "
                          f"({s.framework or 'vllm'} on {s.hardware}: as given, else its own default there)"),
        ("power", si(s.power_w, "W")), *([("cost", f"${s.usd_per_h:,.2f}/h")] if s.usd_per_h is not None else []),
    ]))


def _near_capacity(r) -> list[tuple[str, str]]:
    """The row that says what 5% less capacity would do at a load close to it (``LoadPoint``)."""
    if r.if_5pct_less_capacity is None:
        return []
    share = r.requests_per_s / r.max_rate
    worse = r.if_5pct_less_capacity
    what = ("the queue would grow without bound" if worse["tpot_s"] is None else
            f"P90 TTFT {si(worse['ttft_s'], 's')}, P90 TPOT {si(worse['tpot_s'], 's')}")
    return [("near capacity", f"{100 * share:.0f}% of it: latency here follows small throughput errors; "
                              f"with 5% less capacity, {what}")]


def _print_replayed(model: str, hardware, slo, json_out: bool, **kw) -> None:
    """The replayed answer (``replayed_load.replayed_max_load``) as a table or one JSON object."""
    from dataclasses import asdict

    from planner.serving.replayed_load import replayed_max_load

    r = replayed_max_load(model, hardware, slo=slo, **kw)
    if json_out:
        print_json(asdict(r))
        return
    lat = lambda d: " / ".join(si(d[p], "s") for p in ("p50", "p90", "p99"))  # noqa: E731
    out.print(key_value_table(f"{model} on {getattr(hardware, 'name', hardware)} (tp={kw['tp']} pp={kw['pp']} "
                              f"ep={kw['ep']}), "
                              f"{kw['input_len']} in / {kw['output_len']} out, Poisson arrivals, replayed", [
        ("load", f"{r.requests_per_s:.4g} req/s ({r.output_tokens_per_s:,.0f} output tokens/s), the most whose "
                 "replayed run meets the SLO"),
        ("TTFT p50/p90/p99", lat(r.ttft_s)), ("TPOT p50/p90/p99", lat(r.tpot_s)),
        ("replay", f"{r.requests:,} requests per run, bisected from {r.bracket_rate:.4g} req/s "
                   "(1.25x the instance kept full)"),
    ]))
