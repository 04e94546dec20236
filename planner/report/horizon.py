"""Rich rendering of a horizon plan (``planner plan`` with ``design: {type: horizon}``)."""

from __future__ import annotations

from rich.table import Table

from planner.report import out


def _bought(reserved: dict[str, int]) -> str:
    return ", ".join(f"{n} x {k}" for k, n in reserved.items() if n)


def print_horizon(r) -> None:
    t = Table(title=f"{r.scenario}: {r.model} over {r.hours:,.0f} h (peak {r.peak_rate:.3g} req/s), "
                    "cheapest purchase mix per hardware")
    for col in ("hardware", "instance", "req/s per inst.", "peak inst.", "reserved", "$ reserved", "$ on-demand",
                "$ spot", "$ energy", "$ total"):
        t.add_column(col)
    for c in sorted(r.candidates, key=lambda x: x["usd_total"]):
        t.add_row(c["hardware"], c["deployment"], f"{c['capacity_per_instance']:.3g}", str(c["peak_instances"]),
                  _bought(c["reserved"]) or "-", f"{c['usd_reserved']:,.0f}",
                  f"{c['usd_on_demand']:,.0f}", f"{c['usd_spot']:,.0f}", f"{c['usd_energy']:,.0f}",
                  f"{c['usd_total']:,.0f}")
    out.print(t)
    m = Table(title=f"Month by month ({r.deployment}, {r.devices_per_instance} GPUs per instance)")
    for col in ("month", "peak req/s", "peak inst.", "$ reserved", "$ on-demand", "$ spot", "$ energy", "$ total"):
        m.add_column(col)
    for row in r.monthly:
        m.add_row(str(row["month"]), f"{row['peak_rate']:.3g}", str(row["peak_need"]), f"{row['usd_reserved']:,.0f}",
                  f"{row['usd_on_demand']:,.0f}", f"{row['usd_spot']:,.0f}", f"{row['usd_energy']:,.0f}",
                  f"{row['usd_total']:,.0f}")
    out.print(m)
    tot, cmp_ = r.totals, r.comparisons
    out.print(f"[bold]{r.hardware}: reserve {_bought(r.reserved) or 'nothing'}; "
              f"${tot['total']:,.0f} over the horizon vs ${cmp_['follow_demand_on_demand']:,.0f} all on-demand "
              f"following demand and ${cmp_['static_peak_on_demand']:,.0f} for a static peak-sized fleet[/]")
    if r.committed_beyond_horizon_usd > 0:
        out.print(f"commitments run past the horizon: ${r.committed_beyond_horizon_usd:,.0f} more to pay after it")
    if r.batch:
        b = r.batch
        out.print(f"batch: {b['requests_per_day']:,.0f} requests/day = {b['instance_hours']:,.0f} instance-hours, "
                  f"{b['on_reserved_share']:.0%} of it on reserved capacity the SLO traffic left idle")
    for name, a in [("", r.autoscale)] * bool(r.autoscale) + list(r.autoscale_pools.items()):
        _print_autoscale(name, a)
    for n in r.notes:
        out.print(f"[yellow]note:[/] {n}")


def _print_autoscale(name: str, a: dict) -> None:
    """One replay's summary; ``name`` is the pool of a multi-pool plan (empty for one pool)."""
    floor = "none (even the peak need as a floor misses some hour)" if a["safe_floor"] is None \
        else f"{a['safe_floor']} instances"
    who = f" {name}" if name else ""
    out.print(f"autoscaling{who} (scale-up delay {a['scale_up_delay_s']:.0f} s incl. loading "
              f"{a['weight_bytes'] / 1e9:.0f} GB of weights; {a['step_s']:.0f} s steps; within-hour CV "
              f"{a['within_hour_cv']:.2f}): {a['hours_meeting_target']} of {a['periods']} hours meet the "
              f"target with the reserved floor of {a['floor_used']}, worst hour "
              f"{a['min_hourly_attainment']:.1%}; {a['gpu_hours_over_provisioned']:,.0f} of "
              f"{a['gpu_hours_paid']:,.0f} paid GPU-hours over-provisioned; safe floor: {floor}")
    u = a.get("safe_target_utilization")
    out.print("highest target utilisation keeping every hour on target with the reserved floor: "
              + (f"{u:.0%}" if u else "none"))
