"""Rich rendering of ``planner validate``."""

from __future__ import annotations

from rich.table import Table

from planner.report import out


def print_validation(result: dict) -> None:
    t = Table(title="Predicted vs measured")
    for col in ("point", "role", "metric", "measured", "predicted", "error"):
        t.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
    for p in result["points"]:
        t.add_row(p["id"], p["role"], p["metric"], f"{p['measured']:.4g}", f"{p['predicted']:.4g}",
                  f"{100 * p['rel_error']:+.0f}%")
    out.print(t)
    if result.get("corpus"):
        c = Table(title="Corpus: points per vendor and per source (calibration / held out)")
        for col in ("by", "name", "calibration", "held out", "total"):
            c.add_column(col, justify="right" if col in ("calibration", "held out", "total") else "left")
        for by, groups in result["corpus"].items():
            for name, n in groups.items():
                c.add_row(by, name, str(n["calibration"]), str(n["held_out"]), str(n["calibration"] + n["held_out"]))
        out.print(c)
    for key, label in (("summary", "vendor"), ("summary_by_framework", "framework")):
        s = Table(title=f"Summary by {label}: absolute relative error")
        for col in ("points", label, "metric", "n", "median", "P90"):
            s.add_column(col)
        for role, groups in result[key].items():
            for group, kinds in groups.items():
                for kind, v in kinds.items():
                    s.add_row(role, group, kind, str(v["n"]), f"{100 * v['median_abs_rel_error']:.1f}%",
                              f"{100 * v['p90_abs_rel_error']:.1f}%")
        out.print(s)
    if result.get("microbenchmarks"):
        g = Table(title="GEMM shape sweeps replayed through the roofline (profile gemm + kernel_latency)")
        for col in ("hardware", "dtype", "shapes", "median", "P90", "harness-floor shapes (not scored)"):
            g.add_column(col)
        for m in result["microbenchmarks"]:
            fmt = "-".join(filter(None, (m["dtype"], m.get("label"))))    # a second source of a format: its label
            g.add_row(m["hardware"], fmt, str(m["shapes"]), f"{100 * m['median_abs_rel_error']:.1f}%",
                      f"{100 * m['p90_abs_rel_error']:.1f}%", str(m.get("floor_bound", 0)))
        out.print(g)
    for key, title in (("decode_attention", "Paged decode-attention sweeps replayed through the roofline "
                                             "(decode HBM fraction x ctx / (ctx + half length) + kernel latency)"),
                       ("linear_decode", "Gated DeltaNet decode-core sweeps replayed through the roofline "
                                         "(recurrent kernel's HBM fraction + its fixed time per call)"),
                       ("moe_mlp", "MoE expert-MLP sweeps replayed through the roofline (the experts operator: "
                                   "weights at the engine's chain fraction + kernels and chain fixed time)")):
        if result.get(key):
            d = Table(title=title)
            for col in ("hardware", "sweep", "calls", "median time error", "worst",
                        "harness-floor calls (not scored)"):
                d.add_column(col)
            for m in result[key]:
                sweep = m["file"] + (f" ({m['format']})" if "format" in m else "")   # a sweep of two formats
                d.add_row(m["hardware"], sweep, str(m["points"]), f"{100 * m['median_rel_error']:+.1f}%",
                          f"{100 * m['max_abs_rel_error']:.1f}%", str(m["floor_bound"]))
            out.print(d)
    if result.get("collectives"):
        c = Table(title="All-reduce sweeps (NCCL/RCCL, 1 KiB-8 GiB): alpha-beta fit and the profile's bus bandwidth")
        for col in ("hardware", "GPUs", "fitted busbw", "fitted latency", "fit median", "fit P90",
                    "measured plateau", "profile busbw"):
            c.add_column(col)
        for m in result["collectives"]:
            c.add_row(m["hardware"], str(m["devices"]), f"{m['fitted_busbw_gbs']:.0f} GB/s",
                      f"{m['fitted_latency_us']:.0f} us", f"{100 * m['median_abs_rel_error']:.1f}%",
                      f"{100 * m['p90_abs_rel_error']:.1f}%", f"{m['measured_plateau_gbs']:.0f} GB/s",
                      f"{m['profile_busbw_gbs']:.0f} GB/s")
        out.print(c)
