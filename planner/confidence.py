"""Plans sized at a chosen confidence: the price of certainty.

A scenario's ``confidence: c`` (default 0.5) runs its design with every hardware profile derated
to the ``c`` quantile of the model's error bands relative to their median
(``catalog/derate.py``: at 0.5 the plan is the model's own), and again at the median, so the plan
shows what the extra certainty costs: instances and $/h at P50 and at ``c`` (colocated, fleet),
or the design's headline numbers at both (max rate, tokens/s per GPU, extra servers, gains).
"""

from __future__ import annotations

from collections.abc import Callable

from planner.catalog.derate import performance_at

MEDIAN = 0.5


def _framework(scn) -> str | dict[str, str] | None:
    """The serving framework the scenario names, if any (its band regime; a mapping: by device)."""
    for holder in (scn.engine, scn.design):
        name = getattr(holder, "framework", None)
        if name is not None:
            return name
    return None


def _size(result) -> dict:
    """Instances and $/h where the design sizes a deployment, else {}."""
    if result.design == "colocated":
        return {"instances": result.best.instances, "accelerators": result.best.accelerators,
                "usd_per_h": result.best.usd_per_h}
    if result.design == "fleet":
        return {"instances": sum(result.instances.values()), "usd_per_h": result.usd_per_h}
    return {}


def price_of_certainty(confidence: float, at_median: dict, at_c: dict) -> str:
    """``+2 instances (+8 accelerators), +$7.9/h for 90%`` from two size/headline dicts (designs
    without instance counts: the headline numbers that moved)."""
    parts = []
    if "instances" in at_c:
        d = at_c["instances"] - at_median["instances"]
        text = f"{d:+d} instance{'s' if abs(d) != 1 else ''}"
        if "accelerators" in at_c:
            text += f" ({at_c['accelerators'] - at_median['accelerators']:+d} accelerators)"
        parts.append(text)
        if at_c.get("usd_per_h") is not None and at_median.get("usd_per_h") is not None:
            d = at_c["usd_per_h"] - at_median["usd_per_h"]
            parts.append(f"{'+' if d >= 0 else '-'}${abs(d):,.1f}/h")
    else:        # fixed-budget designs: what the budget buys moves instead
        changed = [k for k, v in at_c.items() if isinstance(v, (int, float)) and at_median.get(k) != v]
        parts = [f"{k} {at_median[k]:.4g} -> {at_c[k]:.4g}" for k in changed[:3]] or ["no change"]
    return ", ".join(parts) + f" for {confidence:.0%}"


def sized_at(scn, run: Callable, headline: Callable):
    """``run(scn)`` at the scenario's confidence, with the P50 comparison in ``certainty``."""
    fw, c = _framework(scn), scn.confidence
    with performance_at(c, fw) as q:
        result = run(scn)
    if abs(c - MEDIAN) < 1e-12:
        median, qm = result, q
    else:
        with performance_at(MEDIAN, fw) as qm:
            median = run(scn)
    head_c, head_m = headline(result) | _size(result), headline(median) | _size(median)
    certainty = {"confidence": c, "framework": fw,
                 "slowdown": q.factors, "slowdown_p50": qm.factors,
                 "at_p50": _numbers(head_m), "at_confidence": _numbers(head_c),
                 "summary": price_of_certainty(c, head_m, head_c)}
    return result.model_copy(update={"certainty": certainty})


def _numbers(head: dict) -> dict:
    return {k: v for k, v in head.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
