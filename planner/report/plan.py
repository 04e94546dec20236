"""Rich rendering of a ``PlanResult`` (``planner plan``)."""

from __future__ import annotations

from rich.table import Table

from planner.report import key_value_table, out, si
from planner.run import PlanResult


def _lat(d: dict[str, float]) -> str:
    return " / ".join(si(d[p], "s") for p in ("p50", "p90", "p99"))


def print_plan(r: PlanResult) -> None:
    b = r.best
    states = f", {b.state_dtype} recurrent states" if b.state_dtype else ""
    rows = [
        ("workload", f"{r.rate:g} req/s, mean {r.mean_input_tokens:,.0f} in / {r.mean_output_tokens:,.0f} out tokens"),
        ("deployment", f"{b.instances} x ({b.hardware} tp={b.tp} ep={b.ep} pp={b.pp}, {b.weight_dtype} weights, "
                       f"{b.kv_dtype} KV{states}) = {b.accelerators} accelerators"
                       + (f", on {b.engine}" if b.engine else "")),
        ("load per instance", f"{b.rate_per_instance:.3g} req/s of {b.max_rate_per_instance:.3g} max under the SLOs; "
                              f"mean decode batch {b.decode_batch:.0f} (set max_num_seqs >= {b.max_num_seqs} per "
                              "engine replica, i.e. per attention-DP rank)"),
        ("TTFT p50/p90/p99", _lat(b.ttft_s)),
        ("TPOT p50/p90/p99", _lat(b.tpot_s)),
        ("E2E p50/p90/p99", _lat(b.e2e_s)),
        ("SLO attainment", f"{100 * b.slo_attainment:.1f}% (analytic)"),
        ("binding constraint", b.binding),
        ("cost", f"${b.usd_per_h:,.2f}/h; ${b.usd_per_million_output_tokens:,.3f} per M output tokens, "
                 f"${b.usd_per_million_tokens:,.3f} per M tokens"),
        ("power", f"avg {si(b.avg_power_w, 'W')}, peak {si(b.peak_power_w, 'W')}, provisioned "
                  f"{si(b.provisioned_power_w, 'W')}; {b.output_tokens_per_joule:.2f} output tokens/J"),
    ]
    out.print(key_value_table(f"{r.scenario}: cheapest {r.design} deployment of {r.model}", rows))
    if r.simulation is not None:
        s = r.simulation
        t = key_value_table(f"simulator check ({s.requests:,} requests, seed {s.seed}, {s.instances} instances)", [
            ("TTFT p50/p90/p99", _lat(s.ttft_s)), ("TPOT p50/p90/p99", _lat(s.tpot_s)),
            ("E2E p50/p90/p99", _lat(s.e2e_s)), ("SLO attainment", f"{100 * s.slo_attainment:.1f}%"),
            ("throughput", f"{s.requests_per_s:.3g} req/s"), ("preemptions", str(s.preemptions)),
            ("meets SLOs", "yes" if s.meets_slo else "[bold red]no[/]: " + "; ".join(s.violations)),
        ])
        out.print(t)
    if r.alternatives:
        t = Table(title="Next-cheapest alternatives")
        engines = len({a.engine for a in (b, *r.alternatives)}) > 1      # named where they differ
        for col in ("hardware", *(("engine",) if engines else ()), "tp", "ep", "pp", "dtype", "instances", "accel.",
                    "$/h", "$/M out tok", "TTFT p90", "TPOT p90", "binding"):
            t.add_column(col)
        for a in r.alternatives:
            t.add_row(a.hardware, *((a.engine or "-",) if engines else ()), str(a.tp), str(a.ep), str(a.pp),
                      a.weight_dtype, str(a.instances), str(a.accelerators), f"{a.usd_per_h:,.1f}",
                      f"{a.usd_per_million_output_tokens:.3f}", si(a.ttft_s["p90"], "s"), si(a.tpot_s["p90"], "s"),
                      a.binding)
        out.print(t)
    if getattr(r, "cache", None) is not None:
        out.print(f"prefix cache: {_cache_line(r.cache)}; details: planner sessions SCENARIO")
    for n in r.notes:
        out.print(f"[yellow]note:[/] {n}")


def _cache_line(c) -> str:
    tiers = ", ".join(f"{t.tier} {t.hit_rate:.1%}" for t in c.tiers)
    return (f"{c.hit_rate:.1%} of prompt tokens hit ({tiers}; bound {c.upper_bound:.1%}) at "
            f"{c.sessions_per_s_per_instance:.3g} sessions/s per machine")


def print_splitwise(r) -> None:
    """Comparison table of a Splitwise scenario (every baseline and design at its max SLO rate)."""
    t = Table(title=f"{r.scenario}: {r.model}, largest request rate meeting the SLOs")
    for col in ("design", "machines", "accel.", "req/s", "out tok/s", "$/h", "power (prov.)", "avg power",
                "tok/J", "TTFT p90", "TPOT p90", "binding"):
        t.add_column(col)
    for row in r.rows:
        t.add_row(row.name, row.machines, str(row.accelerators), f"{row.max_rate:.3g}",
                  f"{row.output_tokens_per_s:,.0f}", f"{row.usd_per_h:,.0f}", si(row.provisioned_power_w, "W"),
                  si(row.avg_power_w, "W"), f"{row.output_tokens_per_joule:.3g}",
                  si(row.ttft_s.get("p90", float("nan")), "s"), si(row.tpot_s.get("p90", float("nan")), "s"),
                  row.binding)
    out.print(t)
    ratios = Table(title="Designs against baselines (throughput, cost, provisioned power)")
    for col in ("design", "baseline", "throughput", "cost", "power"):
        ratios.add_column(col)
    for x in r.ratios:
        ratios.add_row(x["design"], x["baseline"], f"{x['throughput']:.2f}x", f"{x['cost']:.2f}x", f"{x['power']:.2f}x")
    out.print(ratios)
    if r.pareto:
        front = Table(title=f"Pareto front of searched splits (throughput vs cost vs power; {len(r.pareto)} points, "
                            "top 10 by throughput)")
        for col in ("pair", "prompt", "token", "req/s", "$/h", "power (prov.)"):
            front.add_column(col)
        for x in r.pareto[:10]:
            front.add_row(x["pair"], str(x["prompt"]), str(x["token"]), f"{x['req_per_s']:.3g}",
                          f"{x['usd_per_h']:,.0f}", si(x["power_w"], "W"))
        out.print(front)
    for row in r.rows:
        if row.cache is not None:
            out.print(f"prefix cache of {row.name} (its prefilling machines): {_cache_line(row.cache)}")
    for v in r.verdicts:
        out.print(f"[bold]{v}[/]")
    slo = r.slo
    out.print("SLOs: " + "; ".join(f"{m}.{p} <= {si(v, 's')}" for m in ("ttft_s", "tpot_s", "e2e_s")
                                   for p, v in getattr(slo, m).items()))


def print_polca(r) -> None:
    budgets = ", ".join(f"{k} {si(v, 'W')}" for k, v in r.budgets_w.items()) or f"row {si(r.budget_w, 'W')}"
    t = Table(title=f"{r.scenario}: {r.model} on {r.hardware}, budgets {budgets}; load {r.load}, peak "
                    f"{r.peak_rate_per_server:.3g} req/s per server (capacity {r.server_capacity_rate:.3g})")
    for col in ("extra", "servers", "uncapped peak", "peak / budget", "brakes", "cap events /day", "capped time",
                "mean cap", f"spike {r.spike_window_s:g}s", "HP P50 impact", "HP P99 impact", "LP thr. loss", "ok"):
        t.add_column(col)
    for lv in r.levels:
        util = " ".join(f"{k[:2]} {v:.0%}" for k, v in lv.peak_utilization.items())
        brakes = " ".join(f"{k[:2]} {v}" for k, v in lv.brake_events_by_level.items() if v) or "0"
        t.add_row(f"{lv.oversubscription:.0%}", str(lv.servers), f"{lv.peak_power_fraction:.1%}", util, brakes,
                  f"{lv.capping_events_per_day:.0f}", f"{lv.capped_time_fraction:.1%}", si(lv.mean_capping_s, "s"),
                  f"{lv.spike_fraction:.1%}", f"{lv.hp_p50_impact:.2%}", f"{lv.hp_p99_impact:.2%}",
                  f"{lv.lp_throughput_loss:.2%}", "yes" if lv.meets_criteria else "no")
    out.print(t)
    out.print(f"[bold]{r.extra_servers} more servers ({r.extra_servers_fraction:.0%}) fit the row's power budget "
              "with no power-brake event and the performance limits met[/]")
    for n in r.notes:
        out.print(f"[yellow]note:[/] {n}")


def print_prfaas(r) -> None:
    t = Table(title=f"{r.scenario}: {r.model} (KV {r.kv_bytes_per_token:,} B/token + "
                    f"{r.state_bytes_per_request / 2**20:.0f} MiB state per request)")
    for col in ("system", "threshold", "Np / Nd / Nremote", "max req/s", "offloaded", "link", "TTFT P50 / P90",
                "queued TTFT P50 / P90", "TPOT", "accel.", "$/h"):
        t.add_column(col)
    for s in r.systems:
        thr = f"{s.threshold_tokens / 1e3:.1f}K" if s.threshold_tokens is not None else "-"
        t.add_row(s.name, thr, f"{s.prefill_instances} / {s.decode_instances} / {s.remote_instances}",
                  f"{s.max_rate:.3g}", f"{s.offload_fraction:.1%}",
                  f"{s.link_gbps:.1f} Gb/s ({s.link_utilization:.0%})",
                  f"{si(s.ttft_s['p50'], 's')} / {si(s.ttft_s['p90'], 's')}",
                  f"{si(s.ttft_queued_s['p50'], 's')} / {si(s.ttft_queued_s['p90'], 's')}", si(s.tpot_s, "s"),
                  str(s.accelerators), f"{s.usd_per_h:,.0f}")
    out.print(t)
    g = r.gains
    cost = f", {g['equal_cost_throughput']:.2f}x at equal cost" if "equal_cost_throughput" in g else ""
    out.print(f"[bold]PrfaaS vs homogeneous PD: {g['throughput']:.2f}x throughput, "
              f"P90 TTFT -{g['p90_ttft_reduction']:.0%}{cost}[/]")
    if r.bandwidth_sweep:
        s = Table(title="Link bandwidth sweep (threshold re-optimized at each bandwidth)")
        for col in ("Gb/s", "max req/s", "vs homogeneous", "threshold", "offloaded", "link util.", "P90 TTFT"):
            s.add_column(col)
        for p in r.bandwidth_sweep:
            s.add_row(f"{p['bandwidth_gbps']:g}", f"{p['max_rate']:.3g}", f"{p['throughput_gain']:.2f}x",
                      f"{p['threshold_tokens'] / 1e3:.1f}K", f"{p['offload_fraction']:.1%}",
                      f"{p['link_utilization']:.0%}", si(p["p90_ttft_s"], "s"))
        out.print(s)
    if r.counterfactual:
        c = r.counterfactual
        be = c["break_even_gbps"]
        out.print(f"dense counterfactual {c['model']} ({c['kv_bytes_per_token']:,} B/token): offload pays from "
                  + (f"{be:g} Gb/s" if be else "no swept bandwidth"))
    if r.cache is not None:
        out.print(f"prefix cache at the local site: {_cache_line(r.cache)}")
    if r.simulation:
        m = r.simulation
        out.print(f"simulator at {m.rate:.3g} req/s: TTFT mean {si(m.ttft_s['mean'], 's')} / P90 "
                  f"{si(m.ttft_s['p90'], 's')} (analytic {si(m.analytic_ttft_queued_s['mean'], 's')} / "
                  f"{si(m.analytic_ttft_queued_s['p90'], 's')}), offloaded {m.offload_fraction:.1%}, link "
                  f"{m.link_gbps:.1f} Gb/s, fallbacks {m.fallback_fraction:.1%}")
    for n in r.notes:
        out.print(f"[yellow]note:[/] {n}")


def print_slo_search(r) -> None:
    t = Table(title=f"{r.scenario}: {r.model}, best per hardware and mode ({r.candidates} layouts x dtypes, "
                    "each a full load curve)")
    for col in ("mode", "hardware", "dtype", "layout", "out tok/s/GPU", "tok/s/user", "TTFT p90", "TPOT p90"):
        t.add_column(col)
    for c in r.best:
        t.add_row(c.mode, c.hardware, c.weight_dtype, c.layout, f"{c.tokens_per_s_per_gpu:,.0f}",
                  f"{c.tokens_per_s_per_user:.1f}", si(c.ttft_s, "s"), si(c.tpot_s, "s"))
    out.print(t)
    f = Table(title=f"Pareto front: throughput per GPU vs speed per user ({len(r.pareto)} points)")
    for col in ("mode", "hardware", "dtype", "layout", "out tok/s/GPU", "tok/s/user"):
        f.add_column(col)
    for c in r.pareto[:15]:
        f.add_row(c.mode, c.hardware, c.weight_dtype, c.layout, f"{c.tokens_per_s_per_gpu:,.0f}",
                  f"{c.tokens_per_s_per_user:.1f}")
    out.print(f)
    out.print(f"[bold]{r.verdict}[/]")


def print_fleet(r) -> None:
    t = Table(title=f"{r.scenario}: cheapest heterogeneous fleet for {r.model} (MILP)")
    t.add_column("hardware")
    t.add_column("instances")
    t.add_column("layout")
    t.add_column("engine")
    for k, b in enumerate(r.buckets):
        t.add_column(f"bucket {k + 1}: {b['input_min']:.0f}-{b['input_max']:.0f} in, {b['rate']:.3g} req/s")
    for hw, n in r.instances.items():
        t.add_row(hw, str(n), r.layouts[hw], r.engines.get(hw, "-"), *(f"{v:.0%}" for v in r.routing[hw]))
    out.print(t)
    singles = ", ".join(f"{h} ${v:,.1f}/h" for h, v in sorted(r.best_single.items(), key=lambda x: x[1]))
    out.print(f"[bold]fleet ${r.usd_per_h:,.1f}/h; one hardware type alone: {singles or 'none within availability'}"
              + (f"; saving {r.saving_vs_best_single:.0%}" if r.best_single else "") + "[/]")
    if r.sweep:
        _print_fleet_sweep(r)


def _print_fleet_sweep(r) -> None:
    t = Table(title="rate sweep: the mix vs one hardware type alone")
    for col in ("req/s", "fleet", "$/h", "best single", "$/h", "saving vs best", "saving vs worst"):
        t.add_column(col)
    for p in r.sweep:
        t.add_row(f"{p.rate:g}", ", ".join(f"{n} x {h}" for h, n in p.instances.items()), f"{p.usd_per_h:,.2f}",
                  p.best_single, f"{p.best_single_usd_per_h:,.2f}", f"{p.saving_vs_best_single:.0%}",
                  f"{p.saving_vs_worst_single:.0%}")
    out.print(t)
    if r.saving_range:
        out.print(f"[bold]saving over the sweep: {r.saving_range[0]:.0%}-{r.saving_range[1]:.0%} vs single types "
                  f"(up to {r.max_saving:.0%} vs the best one)[/]")


def print_certainty(result) -> None:
    """One line: the confidence the plan was sized at and what it costs over the median."""
    c = getattr(result, "certainty", None)
    if not c:
        return
    slow = "; ".join(f"{hw} compute x{f['compute']:.2f}, memory/links/overheads x{f['other']:.2f}"
                     for hw, f in c["slowdown"].items())

    def size(d: dict) -> str:
        bits = [f"{d['instances']} instances"] if "instances" in d else []
        bits += [f"${d['usd_per_h']:,.1f}/h"] if d.get("usd_per_h") is not None else []
        return ", ".join(bits)

    if c["confidence"] == 0.5:
        out.print("confidence 50% (the median of the error bands: the model's own plan; set confidence: 0.9 in "
                  "the scenario to size for the slow end of what published runs measured)")
        return
    line = f"confidence {c['confidence']:.0%}: sized with hardware at that quantile of the error bands ({slow})"
    if size(c["at_confidence"]):
        line += f"; P50: {size(c['at_p50'])}; at {c['confidence']:.0%}: {size(c['at_confidence'])}"
    out.print(line + f"; {c['summary']}")


def print_distserve(r) -> None:
    t = Table(title=f"{r.scenario}: {r.model} on {r.hardware}, goodput per GPU with {r.attainment:.0%} of requests "
                    f"within TTFT {si(r.ttft_s, 's')} and TPOT {si(r.tpot_s, 's')}")
    for col in ("placement", "layout", "GPUs", "req/s per GPU", "prefill req/s", "decode req/s", "KV handoff",
                "binding"):
        t.add_column(col)
    for b in r.best:
        def num(x):
            return f"{x:.3g}" if x == x else "-"

        t.add_row(b.placement, b.layout, str(b.gpus), num(b.goodput_per_gpu), num(b.prefill_goodput),
                  num(b.decode_goodput), si(b.kv_transfer_s, "s") if b.kv_transfer_s == b.kv_transfer_s else "-",
                  b.binding)
    out.print(t)
    out.print(f"[bold]{r.verdict}[/]")
