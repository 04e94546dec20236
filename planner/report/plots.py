"""Plots for `planner plan --plot FILE` (matplotlib, optional extra, imported lazily)."""

from __future__ import annotations

from planner.errors import InputError


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plots need matplotlib: pip install 'planner[plot]'") from None
    return plt


def plot_result(result, path: str) -> None:
    """Draw the figure that fits the result's design into ``path`` (PNG, PDF or SVG)."""
    plt = _pyplot()
    if result.design == "horizon":
        from planner.report.horizon_plot import plot_horizon

        fig = plot_horizon(plt, result)
    elif result.design == "polca":
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        s = result.power_series
        a.plot(s["hour"], [p / 1e3 for p in s["row_power_w"]], label="row power (hourly max)")
        a.axhline(result.budget_w / 1e3, color="k", linestyle="--", label="budget")
        a.set_xlabel("hour")
        a.set_ylabel("kW")
        a.legend()
        x = [lv.oversubscription * 100 for lv in result.levels]
        b.plot(x, [lv.hp_p50_impact * 100 for lv in result.levels], marker="o", label="HP P50 latency impact %")
        b.plot(x, [lv.lp_throughput_loss * 100 for lv in result.levels], marker="s", label="LP throughput loss %")
        b.plot(x, [lv.capped_time_fraction * 100 for lv in result.levels], marker="^", label="time capped %")
        b.set_xlabel("extra servers %")
        b.legend()
    elif result.design == "slo-search":
        fig, a = plt.subplots(figsize=(7, 4))
        for mode, marker in (("aggregated", "o"), ("disaggregated", "s")):
            pts = [c for c in result.pareto if c.mode == mode]
            a.plot([c.tokens_per_s_per_user for c in pts], [c.tokens_per_s_per_gpu for c in pts], marker,
                   label=f"{mode} (Pareto)")
        a.set_xlabel("output tokens/s per user (1 / TPOT)")
        a.set_ylabel("output tokens/s per GPU")
        a.legend()
    elif result.design == "prfaas":
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        for label, sweep in (("hybrid " + result.model, result.bandwidth_sweep),
                             *((("dense " + result.counterfactual["model"], result.counterfactual["bandwidth_sweep"]),)
                               if result.counterfactual else ())):
            bw = [p["bandwidth_gbps"] for p in sweep]
            a.plot(bw, [p["throughput_gain"] for p in sweep], marker="o", label=label)
            b.plot(bw, [p["p90_ttft_s"] for p in sweep], marker="o", label=label)
        a.axhline(1.0, color="k", linestyle="--", linewidth=0.8)
        for ax, ylabel in ((a, "throughput vs homogeneous PD"), (b, "P90 TTFT (s)")):
            ax.set_xscale("log")
            ax.set_xlabel("inter-datacenter link (Gb/s)")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
    elif result.design == "fleet":
        fig = _plot_fleet(plt, result)
    elif result.design == "splitwise":
        fig, a = plt.subplots(figsize=(7, 4))
        for row in result.rows:
            a.scatter(row.usd_per_h, row.max_rate, label=row.name)
        if result.pareto:
            a.plot([p["usd_per_h"] for p in result.pareto], [p["req_per_s"] for p in result.pareto], "k.", ms=3,
                   label="searched Pareto front")
        a.set_xlabel("$/h")
        a.set_ylabel("requests/s meeting the SLOs")
        a.legend(fontsize=7)
    else:
        fig, a = plt.subplots(figsize=(7, 4))
        ds = [result.best, *result.alternatives]
        a.scatter([d.usd_per_million_output_tokens for d in ds], [d.tpot_s["p90"] * 1e3 for d in ds])
        for d in ds:
            a.annotate(f"{d.hardware} tp{d.tp} {d.weight_dtype}", (d.usd_per_million_output_tokens,
                                                                    d.tpot_s["p90"] * 1e3), fontsize=7)
        a.set_xlabel("$ per million output tokens")
        a.set_ylabel("TPOT P90 (ms)")
    fig.tight_layout()
    from planner.outputs import atomic_path

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp)
    finally:
        plt.close(fig)


def _plot_fleet(plt, result):
    """Instances per hardware (left) and the share of each length bucket each hardware serves."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(result.instances)
    a.bar(names, [result.instances[h] for h in names])
    a.set_ylabel("instances")
    a.set_title(f"fleet: ${result.usd_per_h:,.0f}/h")
    buckets = [f"{k + 1}" for k in range(len(result.buckets))]
    bottom = [0.0] * len(buckets)
    for h, shares in result.routing.items():
        b.bar(buckets, [s * 100 for s in shares], bottom=bottom, label=h)
        bottom = [x + s * 100 for x, s in zip(bottom, shares, strict=True)]
    b.set_xlabel("request-length bucket (shortest first)")
    b.set_ylabel("% of the bucket's requests")
    b.legend(fontsize=7)
    return fig
