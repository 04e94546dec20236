"""``planner sessions``: a session workload's prefix cache on its planned deployment - hit rate
per tier (analytic and simulated), what it saves, and the capacity-vs-hit-rate curve."""

from __future__ import annotations

from planner.report import out


def print_sessions(result, curve) -> None:
    from rich.table import Table

    c, b = result.cache, result.best
    out.print(f"[bold]{result.scenario}[/]: {b.instances} x {b.hardware} tp={b.tp} ({b.weight_dtype}), "
              f"${b.usd_per_h:,.0f}/h, {result.rate:g} turns/s, mean prompt {c.mean_prompt_tokens:,.0f} tokens")
    t = Table(title="Prefix cache of one instance (LRU, tiers demote to the next)")
    for col in ("tier", "GB / accelerator", "tokens / instance", "hit rate (Che)", "hit rate (LRU replay)",
                "load s / 1K tokens"):
        t.add_column(col, justify="right")
    for tier in c.tiers:
        sim = "-" if tier.simulated_hit_rate is None else f"{tier.simulated_hit_rate:.1%}"
        t.add_row(tier.tier, f"{tier.gb_per_accelerator:,.1f}", f"{tier.capacity_tokens_per_instance:,.0f}",
                  f"{tier.hit_rate:.1%}", sim, f"{tier.load_s_per_token * 1e3:.4f}")
    sim = "-" if c.simulated_hit_rate is None else f"{c.simulated_hit_rate:.1%}"
    t.add_row("all", "", "", f"{c.hit_rate:.1%}", sim, "")
    out.print(t)
    out.print(f"upper bound (unbounded cache) {c.upper_bound:.1%}; an idle session's KV survives "
              f"{c.characteristic_time_s:,.0f} s; {c.sessions_per_s_per_instance:.3g} sessions/s per instance")
    out.print(f"prefill saved: {c.prefill_tokens_saved_per_s:,.0f} tokens/s; loading hits from slower tiers adds "
              f"{c.mean_load_s * 1e3:.1f} ms per turn on average (before overlap: TTFT counts it loaded layer "
              "by layer under the prefill)")
    if c.target_hit is not None:
        out.print(f"a {c.target_hit:.0%} hit rate needs {c.capacity_for_target_gb_per_accelerator:,.1f} GB of cache "
                  "per accelerator (all tiers)")
    t = Table(title="Capacity vs hit rate (one instance)")
    for col in ("GB / accelerator", "Che", "LRU replay"):
        t.add_column(col, justify="right")
    for g, a, s in list(zip(curve.gb_per_accelerator, curve.analytic_hit_rate, curve.simulated_hit_rate,
                            strict=True))[::3]:
        t.add_row(f"{g:,.2f}", f"{a:.1%}", f"{s:.1%}")
    out.print(t)


def plot_curve(result, curve, path: str) -> None:
    from planner.report.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(curve.gb_per_accelerator, [100 * x for x in curve.analytic_hit_rate], label="analytic (Che)")
    ax.plot(curve.gb_per_accelerator, [100 * x for x in curve.simulated_hit_rate], "o", ms=4,
            label="block-level LRU replay")
    ax.axhline(100 * curve.upper_bound, ls="--", c="gray", label="session-model bound")
    ax.axvline(curve.plan_gb_per_accelerator, ls=":", c="k", label="planned tiers")
    ax.set_xscale("log")
    ax.set_xlabel("KV cache per accelerator (GB, all tiers)")
    ax.set_ylabel("prefix hit rate (% of prompt tokens)")
    b = result.best
    ax.set_title(f"{result.scenario}: {b.hardware} tp={b.tp}, {curve.sessions_per_s_per_instance:.3g} sessions/s "
                 "per instance", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    from planner.outputs import atomic_path

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
