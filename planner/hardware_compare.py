"""Accelerators side by side: the profile figures, their price, and roofline ratios per dollar.

Per dollar means per dollar of accelerator time at the chosen price: ``FLOP/s x 3600 / ($/h)``
is the FLOPs one dollar buys at peak, ``HBM bytes/s x 3600 / ($/h)`` the bytes it can stream,
and with a model, ``output tokens/s x 3600 / ($/h)`` the tokens it serves (the continuous-
batching steady state of one instance, at the best layout inside one scale-up domain, per
device). The ridge point ``FLOP/s / (bytes/s)`` is where a kernel turns compute-bound.
"""

from __future__ import annotations

from planner.catalog.dtypes import DType
from planner.catalog.hardware import HardwareProfile, hardware
from planner.catalog.prices import price_table
from planner.errors import InputError, PlannerError
from planner.perf.cost import CostModel, PriceQuote
from planner.units import HOUR_S

# Instance sizes tried for --model (devices per instance, up to the scale-up domain)
DEVICES = (1, 2, 4, 8, 16, 32, 64)


def price_range(hw: HardwareProfile) -> tuple[float, float] | None:
    """Lowest and highest listed $/accelerator-hour (the price table and the profile default)."""
    rates = [hw.price.rent.value] if hw.price.rent else []
    listed = price_table().rent_range(hw.name)
    rates += list(listed) if listed else []
    return (min(rates), max(rates)) if rates else None


def _quote(hw: HardwareProfile, cost: CostModel) -> tuple[PriceQuote | None, str | None]:
    try:
        return cost.quote(hw, hw.power.tdp.value), None
    except InputError as e:
        return None, str(e)


def best_serving(model: str, hw: HardwareProfile, input_len: int, output_len: int, weight_dtype: str,
                 framework: str | None = None) -> dict | None:
    """The layout inside one scale-up domain with the most output tokens/s per device (MoE:
    TP=EP over the instance, or attention data-parallel with EP), on ``framework`` (default: the
    device vendor's default engine; named in ``framework`` of the answer), or None if none fits."""
    from planner.catalog.model_catalog import model as get_model
    from planner.serving.closed_loop import throughput

    m = get_model(model)
    best = None
    for d in (d for d in DEVICES if d <= hw.domain_size):
        layouts = [(d, d), (1, d)] if m.moe is not None else [(d, 1)]
        for tp, ep in layouts:
            try:
                s = throughput(m, hw, tp=tp, ep=ep, input_len=input_len, output_len=output_len,
                               weight_dtype=weight_dtype, framework=framework)
            except PlannerError:
                continue
            per_dev = s.output_tokens_per_s / s.accelerators
            if best is None or per_dev > best["output_tokens_per_s_per_device"]:
                best = {"layout": f"tp{tp}" + (f" ep{ep}" if ep > 1 else ""), "accelerators": s.accelerators,
                        "weights": weight_label(hw, weight_dtype),
                        "output_tokens_per_s_per_device": per_dev, "tpot_s": s.tpot_s, "framework": s.framework}
    return best


def weight_label(hw: HardwareProfile, weight_dtype: str) -> str:
    """``fp8 weights``, and ``(weight-only)`` where the device has no matrix units of that format
    (FP8 on an A100 or a 910B: dequantized to BF16 in the GEMM)."""
    w = DType(weight_dtype)
    native = hw.compute_dtype(w) == w or w.bytes >= 2
    return f"{w.value} weights" + ("" if native else " (weight-only)")


def compare(names: list[str], cost: CostModel, model: str | None = None, input_len: int = 2000,
            output_len: int = 500, weight_dtype: str = "fp8",
            framework: str | dict[str, str] | None = None) -> list[dict]:
    """One row of figures and per-dollar ratios per hardware name (SI units, $ per hour); the
    serving figures on ``framework`` (one engine for every device, or a mapping by vendor or
    device name: ``frameworks.framework_for``; default: each vendor's)."""
    from planner.catalog.frameworks import checked_choice, framework_for, vendor_mismatch
    from planner.catalog.frameworks import framework as get_framework
    from planner.checks import split_located

    try:
        framework = checked_choice(framework)
    except ValueError as e:
        where, text = split_located(str(e))
        raise InputError(f"framework: {'.'.join(where) + ': ' if where else ''}{text}") from None

    if len(names) < 2:
        raise InputError("hardware compare needs at least two profiles")
    devices = [hardware(name) for name in names]
    if isinstance(framework, dict):
        unknown = sorted(set(framework) - {d.name for d in devices} - {d.vendor for d in devices})
        if unknown:
            raise InputError(f"framework: {', '.join(unknown)} names none of the compared profiles nor their "
                             f"vendors ({', '.join(sorted({d.name for d in devices} | {d.vendor for d in devices}))})")
    for hw in devices:
        if (named := framework_for(framework, hw)) is not None and (why := vendor_mismatch(get_framework(named), hw)):
            raise InputError(f"framework: {why}")
    rows = []
    for hw in devices:
        q, why = _quote(hw, cost)
        flops = hw.peak_flops[DType.bf16].value
        low = {d.value: hw.peak_flops[d].value for d in (DType.fp8, DType.fp4) if d in hw.peak_flops}
        r = {"name": hw.name, "vendor": hw.vendor, "bf16_flops": flops, "fp8_flops": low.get("fp8"),
             "fp4_flops": low.get("fp4"), "hbm_bytes": hw.memory.capacity.value,
             "hbm_bytes_per_s": hw.memory.bandwidth.value,
             "host_memory_bytes": hw.host_memory.capacity.value if hw.host_memory else None,
             "host_memory_bytes_per_s": hw.host_memory.bandwidth.value if hw.host_memory else None,
             "scale_up_bytes_per_s": hw.scale_up.bandwidth_per_direction.value, "domain": hw.domain_size,
             "scale_out_bytes_per_s": hw.scale_out.bandwidth_per_direction.value, "tdp_w": hw.power.tdp.value,
             "platform_w": hw.power.platform.value if hw.power.platform else None,
             "ridge_flop_per_byte": flops / hw.memory.bandwidth.value,
             "usd_per_h": q.usd_per_h if q else None, "price": q.text() if q else why}
        usd_s = q.usd_per_h / HOUR_S if q else None
        r["bf16_flop_per_usd"] = flops / usd_s if usd_s else None
        r["hbm_bytes_per_usd"] = hw.memory.bandwidth.value / usd_s if usd_s else None
        if model is not None:
            s = best_serving(model, hw, input_len, output_len, weight_dtype, framework_for(framework, hw))
            r["serving"] = s
            r["output_tokens_per_usd"] = s["output_tokens_per_s_per_device"] / usd_s if (s and usd_s) else None
        rows.append(r)
    return rows
