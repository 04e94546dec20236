"""Figure of a horizon plan: demand vs capacity over the first week, and the monthly cost stack."""

from __future__ import annotations

import numpy as np


def plot_horizon(plt, r):
    """Left: the first 168 h - instances needed, reserved in use, on-demand and spot on top.
    Right: monthly dollars by purchase option and energy."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    p = {k: np.asarray(v) for k, v in r.periods.items()}
    week = p["start_h"] < p["start_h"][0] + 168
    t = p["start_h"][week]
    res, od, sp = p["reserved_used"][week], p["on_demand"][week], p["spot"][week]
    a.stackplot(t, res, od, sp, step="post", labels=["reserved", "on-demand", "spot"], alpha=0.7)
    a.step(t, p["need"][week], where="post", color="k", linewidth=1.2, label="needed for the SLO")
    if p["batch_instances"].any():
        a.step(t, (p["need"] + p["batch_instances"])[week], where="post", color="tab:red", linewidth=0.8,
               label="+ batch work")
    a2 = a.twinx()
    a2.plot(t, p["rate"][week], color="grey", linestyle=":", linewidth=0.8)
    a2.set_ylabel("req/s (dotted)")
    a.set_xlabel("hour")
    a.set_ylabel(f"instances ({r.deployment})")
    a.legend(fontsize=7, loc="upper left")
    daily = len(r.monthly) == 1            # a horizon within a month: one bar per day
    if daily:
        day = ((p["start_h"] - p["start_h"][0]) // 24).astype(int)
        x = np.unique(day) + 1
        rows = {k: np.bincount(day, weights=p[k]) for k in ("usd_reserved", "usd_on_demand", "usd_spot", "usd_energy")}
    else:
        x = np.array([m["month"] for m in r.monthly])
        rows = {k: np.array([m[k] for m in r.monthly]) for k in ("usd_reserved", "usd_on_demand", "usd_spot",
                                                                  "usd_energy")}
    bottom = np.zeros(len(x))
    for key, label in (("usd_reserved", "reserved"), ("usd_on_demand", "on-demand"), ("usd_spot", "spot"),
                       ("usd_energy", "energy")):
        v = rows[key] / 1e3
        b.bar(x, v, bottom=bottom, label=label)
        bottom += v
    b.set_xlabel("day" if daily else "month")
    b.set_ylabel("k$")
    b.legend(fontsize=7)
    fig.suptitle(f"{r.scenario}: {r.hardware}, reserved {r.reserved}", fontsize=9)
    return fig
