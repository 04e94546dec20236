"""Collectives on a device's links, alpha-beta model.

Bandwidths are per device and per direction; the efficiency is the measured bus bandwidth over
that (``nccl-tests`` busbw). A group that fits in the scale-up domain uses the scale-up link,
otherwise the slowest hop, the scale-out NIC, bounds it.

* all-reduce of ``S`` bytes over ``n`` devices: ``2 (n-1)/n * S / B + alpha`` (the busbw
  convention of nccl-tests, so efficiencies calibrated on busbw plug in directly). ``alpha`` is
  the link's one-collective latency (one-shot / NVLS kernels of modern engines), or, where the
  link gives a ``ring_hop_latency`` (NCCL ring, as engines without custom all-reduce use),
  ``2 (n-1)`` hops of it: small all-reduces then cost more the larger the TP group;
* all-to-all where each device sends ``S`` bytes spread over ``n`` peers: ``(n-1)/n * S / B + alpha``;
* point-to-point of ``S`` bytes: ``S / B + alpha``.

On a 2D torus (``topology: torus2d``: TPU ICI, Trainium NeuronLink) rings use every port, so
all-reduce keeps the formula above; an all-to-all is bounded by the bisection instead. ``n``
devices as a ``k x k`` torus (``k = sqrt(n)``) with ``B / 4`` per port and direction: half of the
``n S`` bytes cross the ``2k`` links of the cut, ``n S / 4`` each way, taking ``k S / (2 B)``,
i.e. ``k / 2`` times the switched time (from 4 x 4 = 16 devices on; smaller groups are not slowed).
"""

from __future__ import annotations

import numpy as np

from planner.catalog.hardware import HardwareProfile

_SHAPE = {"all_reduce": 2.0, "all_to_all": 1.0, "p2p": None}


def link_of(hw: HardwareProfile, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(effective bytes/s, latency s) of the link a group of ``group`` devices communicates over."""
    inside = np.asarray(group) <= hw.domain_size
    up, out = hw.scale_up, hw.scale_out
    bw = np.where(inside, up.bandwidth_per_direction.value * hw.efficiency.scale_up.value,
                  out.bandwidth_per_direction.value * hw.efficiency.scale_out.value)
    lat = np.where(inside, up.latency.value, out.latency.value)
    return bw, lat


def collective_time(hw: HardwareProfile, kind: str, payload_bytes, group) -> np.ndarray:
    """Seconds of one collective; zero where the group is a single device."""
    group = np.asarray(group, dtype=float)
    bw, lat = link_of(hw, group)
    hop = hw.scale_up.ring_hop_latency
    if kind == "all_reduce" and hop is not None:
        lat = np.where(group <= hw.domain_size, 2.0 * (group - 1) * hop.value, lat)
    factor = 1.0 if kind == "p2p" else _SHAPE[kind] * (group - 1) / np.maximum(group, 1)
    if kind == "all_to_all" and hw.scale_up.topology == "torus2d":
        factor = factor * np.where(group <= hw.domain_size, np.maximum(np.sqrt(group) / 2, 1.0), 1.0)
    t = factor * np.asarray(payload_bytes, dtype=float) / bw + lat
    return np.where(group > 1, t, 0.0)



def ep_all_to_all_time(hw: HardwareProfile, intra_bytes, token_bytes, draws, group) -> np.ndarray:
    """One EP dispatch or combine, DeepEP-style (hierarchical). ``intra_bytes`` = what a device
    sends (its tokens times their ``k`` expert copies), ``token_bytes`` = its tokens once,
    ``draws`` = domains a token may target (``k``, or the node limit of group-limited routing).

    Inside one scale-up domain it is an all-to-all on that link. Across ``N`` domains each token
    crosses the NIC once per remote domain it reaches - drawing ``m`` times from ``N`` domains
    reaches ``N (1 - (1 - 1/N)^m)`` of them, ``(N-1)/N`` of those remote - and is then forwarded
    to its experts over the scale-up link (DeepEP internode kernels: RDMA then NVLink). The two
    stages pipeline, so the slower one bounds the time. A row with nothing to send (a layout
    without attention data parallelism, evaluated in the same array as one with it) costs
    nothing."""
    group = np.asarray(group, dtype=float)
    dom = float(hw.domain_size)
    up_bw = hw.scale_up.bandwidth_per_direction.value * hw.efficiency.scale_up.value
    out_bw = hw.scale_out.bandwidth_per_direction.value * hw.efficiency.scale_out.value
    intra = np.asarray(intra_bytes, dtype=float)
    t_in = (group - 1) / np.maximum(group, 1) * intra / up_bw + hw.scale_up.latency.value
    nodes = np.maximum(np.ceil(group / dom), 1.0)
    reached = nodes * (1 - (1 - 1 / nodes) ** np.asarray(draws, dtype=float))
    t_nic = reached * (nodes - 1) / nodes * np.asarray(token_bytes, dtype=float) / out_bw + hw.scale_out.latency.value
    t_fwd = (dom - 1) / dom * intra / up_bw
    t = np.where(group <= dom, t_in, np.maximum(t_nic, t_fwd))
    return np.where((group > 1) & (intra > 0), t, 0.0)     # no traffic, no collective (and no latency)
