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
from planner.perf.roofline import Bound, StepTime


def step_power_w(hw: HardwareProfile, st: StepTime) -> np.ndarray:
    """Average power of one device over the step (W, arrays)."""
    parts = st.time_by_bound()
    a_mem = hw.power.memory_bound_activity.value
    busy = parts[Bound.compute] + a_mem * (parts[Bound.memory] + parts[Bound.comm])
    activity = busy / st.total_s
    idle, tdp = hw.power.idle.value, hw.power.tdp.value
    return idle + (tdp - idle) * np.clip(activity, 0.0, 1.0)
