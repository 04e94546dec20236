"""Which resource a step spends most of its time on, overhead included: the ``bound`` of an
error-band regime (``catalog/bands.py``). ``StepTime.bound`` compares only the operators'
compute, memory and communication time; a step whose fixed engine overhead (scheduling, launch)
exceeds each of those is *overhead*-bound, the regime in which roofline factors matter least."""

from __future__ import annotations

import numpy as np

from planner.perf.roofline import Bound, StepTime

BOUNDS = ("compute", "memory", "comm", "overhead")


def dominant_bound(st: StepTime) -> np.ndarray:
    """Per candidate: ``compute``, ``memory``, ``comm`` or ``overhead``, whichever takes the most
    seconds of the step (operators summed by their own bound, plus the step overhead and any wait
    for an eagerly launching host)."""
    parts = st.time_by_bound()
    times = [parts[Bound(b)] for b in BOUNDS[:3]] + [np.asarray(st.overhead_s) + st.host_wait_s]
    stacked = np.stack(np.broadcast_arrays(*(np.asarray(t, dtype=float) for t in times)))
    return np.array(BOUNDS, dtype=object)[np.argmax(stacked, axis=0)]
