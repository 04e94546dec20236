"""One pool of identical instances over a demand curve: what the purchase MILP and the autoscaler
need to know about it (the horizon design builds one per hardware, or several for a fleet)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pool:
    name: str                   # unique within a plan: the hardware, or "<hardware> prompt|token"
    hardware: str
    label: str                  # layout of one instance, e.g. "h200 tp2 fp8"
    devices: int                # accelerators per instance
    need: np.ndarray            # (P,) instances needed in each period
    capacity: np.ndarray        # (P,) per-instance SLO-meeting req/s in each period
    power_w: np.ndarray         # (P,) per device at the period's load per instance
    batch_capacity: float       # per-instance req/s with no latency bound (stable); 0: no batch here
    weight_bytes: float         # the whole model in its weight format (what a new replica loads)
    load: np.ndarray            # (P,) requests/s this pool carries in each period
