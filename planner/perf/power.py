"""Device power during a forward step.

A device draws ``idle`` when it waits and close to ``TDP`` while compute-bound (prefill phases run
at TDP: Splitwise Sec. 3, POLCA). Memory-bound work (decode) draws much less and barely depends
on batch size; the profile's ``power.memory_bound_activity`` is that level as a fraction of the
idle-to-TDP range (0.49 from SplitwiseSim's H100 token-phase power, 380 W). Communication-bound
time is counted like memory-bound time; the per-step engine overhead as idle.

    P = idle + (TDP - idle) x (t_compute + a_mem x (t_memory + t_comm)) / t_step
"""

from __future__ import annotations

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.errors import InputError
from planner.perf.roofline import Bound, StepTime


def step_power_w(hw: HardwareProfile, st: StepTime) -> np.ndarray:
    """Average power of one device over the step (W, arrays)."""
    parts = st.time_by_bound()
    a_mem = hw.power.memory_bound_activity.value
    busy = parts[Bound.compute] + a_mem * (parts[Bound.memory] + parts[Bound.comm])
    activity = busy / st.total_s
    idle, tdp = hw.power.idle.value, hw.power.tdp.value
    return idle + (tdp - idle) * np.clip(activity, 0.0, 1.0)


def capped_clock_fraction(hw: HardwareProfile, cap_w: float) -> float:
    """Clock fraction a power cap allows while compute-bound.

    Dynamic power scales ~ f V^2 and V ~ f in the DVFS range, so busy power above idle scales
    ~ f^3: ``cap = idle + (TDP - idle) f^3``. Check: an H100 capped at 50% (350 W, idle 75 W) runs
    compute-bound work at f = 0.76, i.e. 1.31x slower - SplitwiseSim's profiled capped H100 runs
    prefill exactly 1.3x slower and decode unchanged (shared/reference/papers.md 1.10).
    """
    idle, tdp = hw.power.idle.value, hw.power.tdp.value
    if cap_w >= tdp:
        return 1.0
    if cap_w <= idle:
        raise InputError(f"a power cap of {cap_w:.0f} W is at or below {hw.name}'s idle power ({idle:.0f} W)")
    return float(((cap_w - idle) / (tdp - idle)) ** (1 / 3))


def memory_clock_factor(hw: HardwareProfile, clock_fraction: float) -> float:
    """Fraction of its full-clock bandwidth a memory-bound kernel keeps at ``clock_fraction``:
    HBM does not slow with the SM clock, but the SMs must still issue the loads, and below
    ``1 / power.memory_clock_headroom`` of the clock the issue rate binds (decode then slows in
    proportion to the clock)."""
    return float(min(1.0, hw.power.memory_clock_headroom.value * clock_fraction))


def apply_power_cap(hw: HardwareProfile, cap_fraction: float) -> HardwareProfile:
    """The profile under a power cap of ``cap_fraction`` x TDP: compute peaks scaled by the
    capped clock, memory-bound kernels by ``memory_clock_factor`` (unchanged for moderate caps:
    memory-bound decode barely slows), links unchanged, TDP = the cap."""
    if not 0 < cap_fraction <= 1:
        raise InputError(f"power cap fraction must be in (0, 1], got {cap_fraction}")
    if cap_fraction == 1:
        return hw
    cap_w = cap_fraction * hw.power.tdp.value
    f = capped_clock_fraction(hw, cap_w)
    note = f"capped at {cap_fraction:.0%} TDP: clock x {f:.3f}"
    peaks = {k: v.model_copy(update={"value": v.value * f, "note": note}) for k, v in hw.peak_flops.items()}
    power = hw.power.model_copy(update={"tdp": hw.power.tdp.model_copy(update={"value": cap_w, "note": note})})
    mem = hw.efficiency.memory
    eff = hw.efficiency.model_copy(update={"memory": mem.model_copy(update={
        "value": mem.value * memory_clock_factor(hw, f), "note": f"{note}: issue-rate bound below f = "
        f"{1 / hw.power.memory_clock_headroom.value:.2f}"})})
    return hw.model_copy(update={"name": f"{hw.name}@{cap_fraction:.0%}", "peak_flops": peaks, "power": power,
                                 "efficiency": eff})


def apply_clock(hw: HardwareProfile, clock_fraction: float) -> HardwareProfile:
    """The profile with its core clock locked at ``clock_fraction`` of maximum: compute peaks scale
    with the clock, HBM and links do not; busy power above idle scales with the cube of the clock
    (``capped_clock_fraction``'s law, inverted), so capping never raises power nor speeds anything."""
    if not 0 < clock_fraction <= 1:
        raise InputError(f"clock fraction must be in (0, 1], got {clock_fraction}")
    if clock_fraction == 1:
        return hw
    idle, tdp = hw.power.idle.value, hw.power.tdp.value
    cap_w = idle + (tdp - idle) * clock_fraction**3
    return apply_power_cap(hw, cap_w / tdp)
