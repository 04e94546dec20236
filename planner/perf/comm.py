"""Collectives on a device's links, alpha-beta model.

Bandwidths are per device and per direction; the efficiency is the measured bus bandwidth over
that (``nccl-tests`` busbw). A group that fits in the scale-up domain uses the scale-up link,
otherwise the slowest hop, the scale-out NIC, bounds it.

* all-reduce of ``S`` bytes over ``n`` devices: ``2 (n-1)/n * S / B + alpha`` (the busbw
  convention of nccl-tests, so efficiencies calibrated on busbw plug in directly). ``alpha`` is
  the link's one-collective latency (one-shot / NVLS kernels of modern engines), or, where the
  link gives a ``ring_hop_latency`` (NCCL ring, as engines without custom all-reduce use),
  ``2 (n-1)`` hops of it: small all-reduces then cost more the larger the TP group;
  Where the profile's link holds a measured all-reduce sweep (``all_reduce_sweep``: nccl-tests
  busbw against message size inside the domain) and the engine does not ring, the time is
  ``min(one-shot, max(alpha-beta, measured))``: engines pick a one-shot kernel for small
  messages - every device reads its ``n-1`` peers' buffers, ``lat + (n-1) S / B`` - and the
  collective library above the crossover (vLLM's custom all-reduce stops at 256 KiB-8 MiB by
  world size, TensorRT-LLM's AUTO strategy likewise), where the measured curve holds: mid-size
  messages, the MBs of a TP decode step, reach a fraction of the asymptotic bus bandwidth (8x
  H100: 172 GB/s at 8 MiB vs 479 GB/s at 8 GiB). The curve is measured at its own group size
  and used as bus bandwidth for every group inside the domain (the busbw convention normalizes
  ``n`` at large sizes; at small ones the one-shot kernel is the faster choice anyway);
* all-to-all where each device sends ``S`` bytes spread over ``n`` peers: ``(n-1)/n * S / B + alpha``;
* point-to-point of ``S`` bytes: ``S / B + alpha``.

On a 2D torus (``topology: torus2d``: TPU ICI, Trainium NeuronLink) rings use every port, so
all-reduce keeps the formula above; an all-to-all is bounded by the bisection instead. ``n``
devices as a ``k x k`` torus (``k = sqrt(n)``) with ``B / 4`` per port and direction: half of the
``n S`` bytes cross the ``2k`` links of the cut, ``n S / 4`` each way, taking ``k S / (2 B)``,
i.e. ``k / 2`` times the switched time (from 4 x 4 = 16 devices on; smaller groups are not slowed).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from planner.catalog.hardware import HardwareProfile, sweep_columns
from planner.perf.ops import in_place, into

_SHAPE = {"all_reduce": 2.0, "all_to_all": 1.0, "p2p": None}


def scale_up_efficiency(hw: HardwareProfile, group) -> np.ndarray | float:
    """Fraction of the scale-up link a collective of ``group`` devices reaches: the profile's,
    or on a two-socket PCIe host its measured fraction for groups spanning both islands
    (``Link.island``: 8 x L40S, FlashInfer PR #4870's flat-ring copy rate)."""
    isl = hw.scale_up.island
    if isl is None:
        return hw.efficiency.scale_up.value
    return np.where(np.asarray(group) > isl.size.value, isl.efficiency.value, hw.efficiency.scale_up.value)


def link_of(hw: HardwareProfile, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(effective bytes/s, latency s) of the link a group of ``group`` devices communicates over."""
    inside = np.asarray(group) <= hw.domain_size
    up, out = hw.scale_up, hw.scale_out
    bw = np.where(inside, up.bandwidth_per_direction.value * scale_up_efficiency(hw, group),
                  out.bandwidth_per_direction.value * hw.efficiency.scale_out.value)
    lat = np.where(inside, up.latency.value, out.latency.value)
    return bw, lat


def all_to_all_latency(hw: HardwareProfile, group) -> np.ndarray:
    """Fixed time of one EP dispatch or combine: the scale-up link's ``all_to_all_latency`` where
    the profile measured it apart from the all-reduce's (Ascend UB: CloudMatrix384 Table 6), else
    the link latency; a group spanning domains pays the network latency on top, since its kernel
    still forwards every token over the scale-up link (DeepEP's internode kernels: EP16 dispatch
    118 us against 77 us at EP8 on H800, its README's low-latency table)."""
    up = hw.scale_up
    inside = (up.all_to_all_latency or up.latency).value
    return np.where(np.asarray(group) <= hw.domain_size, inside, inside + hw.scale_out.latency.value)


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
    payload = np.asarray(payload_bytes, dtype=float)
    moved = payload if kind == "p2p" else factor * payload      # 1.0 x payload = payload: not multiplied
    t = in_place(np.add, moved / bw, lat)
    sweep = hw.scale_up.all_reduce_sweep
    if kind == "all_reduce" and hop is None and sweep is not None:
        inside = group <= hw.domain_size
        if inside.any():
            _, one_shot, measured = _all_reduce_forms(sweep, payload, group, bw, lat, t, moved)
            best = into(np.minimum, one_shot, into(np.maximum, t, measured, measured), one_shot)
            # a group inside the domain everywhere (TP groups always are) takes ``best`` as it is
            t = best if inside.all() and np.shape(best) == np.broadcast_shapes(np.shape(best), np.shape(t),
                                                                              inside.shape) \
                else np.where(inside, best, t)
    return _where_sends(group > 1, t)


def _where_sends(sends: np.ndarray, t):
    """``np.where(sends, t, 0.0)`` for a fresh ``t``: ``t`` itself where every row sends and it
    has the result's shape."""
    if isinstance(t, np.ndarray) and t.dtype == np.float64 and sends.all() \
            and t.shape == np.broadcast_shapes(t.shape, sends.shape):
        return t
    return np.where(sends, t, 0.0)


def _all_reduce_forms(sweep, payload, group, bw, lat, alpha_beta=None, moved=None) -> tuple:
    """(alpha-beta, one-shot kernel, measured curve) times of an all-reduce inside the domain
    (``alpha_beta`` and ``moved``, its ``factor x payload``: where the caller has them already)."""
    factor = 2.0 * (group - 1) / np.maximum(group, 1)
    if moved is None:
        moved = factor * payload
    if alpha_beta is None:
        alpha_beta = moved / bw + lat
    one_shot = in_place(np.add, in_place(np.divide, (group - 1) * payload, bw), lat)
    return alpha_beta, one_shot, moved / measured_busbw(sweep.path, payload)


def all_reduce_form(hw: HardwareProfile, payload_bytes: float, group: float) -> str:
    """Which form ``collective_time`` takes for one all-reduce (for ``whatif --explain``):
    ``ring``, ``one-shot``, ``measured`` (the profile's sweep) or ``alpha-beta``."""
    if hw.scale_up.ring_hop_latency is not None and group <= hw.domain_size:
        return "ring"
    sweep = hw.scale_up.all_reduce_sweep
    if sweep is None or group > hw.domain_size:
        return "alpha-beta"
    bw, lat = (float(x) for x in link_of(hw, np.asarray(group, dtype=float)))
    alpha_beta, one_shot, measured = (float(x) for x in _all_reduce_forms(
        sweep, np.asarray(payload_bytes, dtype=float), float(group), bw, lat))
    if one_shot <= max(alpha_beta, measured):
        return "one-shot"
    return "measured" if measured > alpha_beta else "alpha-beta"


@lru_cache(maxsize=32)
def _busbw_table(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(log message size, bus bandwidth B/s) of an all-reduce sweep CSV (``size_bytes,busbw_gbs``)."""
    size, busbw = sweep_columns(path)
    order = np.argsort(size)
    return np.log(size[order]), busbw[order] * 1e9


def measured_busbw(path: Path, payload_bytes) -> np.ndarray:
    """Bus bandwidth (B/s) of an all-reduce of ``payload_bytes`` on the measured curve,
    interpolated in log size and held at the ends of the sweep."""
    log_size, busbw = _busbw_table(path)
    return np.interp(np.log(np.maximum(np.asarray(payload_bytes, dtype=float), 1.0)), log_size, busbw)



def ep_bulk_efficiency(hw: HardwareProfile, group) -> np.ndarray:
    """The scale-up link fraction an EP all-to-all of a prompt step reaches over ``group`` ranks on
    an engine with throughput kernels for them (``Efficiency.ep_bulk``, which the callers check is
    given; interpolated in log ranks, held at the measured ends)."""
    curve = hw.efficiency.ep_bulk
    ranks = sorted(curve)
    return np.interp(np.log2(np.maximum(np.asarray(group, dtype=float), 1.0)), np.log2(ranks),
                     [curve[r].value for r in ranks])


def ep_all_to_all_time(hw: HardwareProfile, intra_bytes, token_bytes, draws, group,
                       up_efficiency=None, ideal: bool = False) -> np.ndarray:
    """One EP dispatch or combine, DeepEP-style (hierarchical). ``intra_bytes`` = what a device
    sends (its tokens times their ``k`` expert copies), ``token_bytes`` = its tokens once,
    ``draws`` = domains a token may target (``k``, or the node limit of group-limited routing).

    Inside one scale-up domain it is an all-to-all on that link. Across ``N`` domains each token
    crosses the NIC once per remote domain it reaches - drawing ``m`` times from ``N`` domains
    reaches ``N (1 - (1 - 1/N)^m)`` of them, ``(N-1)/N`` of those remote - and is then forwarded
    to its experts over the scale-up link (DeepEP internode kernels: RDMA then NVLink). The two
    stages pipeline, so the slower one bounds the transfer; the fixed cost is the kernel's latency
    plus the network's (``all_to_all_latency``). A row with nothing to send (a layout
    without attention data parallelism, evaluated in the same array as one with it) costs
    nothing. ``token_bytes`` may be a function giving them, called only if a group spans domains.
    ``up_efficiency``: the scale-up link fraction the kernels reach (default the link's).
    ``ideal``: the same transfer at the links' nameplate rates and no fixed cost (the roofline
    ``whatif --explain`` shows)."""
    group = np.asarray(group, dtype=float)
    dom = float(hw.domain_size)
    up_eff = 1.0 if ideal else scale_up_efficiency(hw, group) if up_efficiency is None else up_efficiency
    up_bw = hw.scale_up.bandwidth_per_direction.value * up_eff
    out_bw = hw.scale_out.bandwidth_per_direction.value * (1.0 if ideal else hw.efficiency.scale_out.value)
    intra = np.asarray(intra_bytes, dtype=float)
    moved = in_place(np.divide, (group - 1) / np.maximum(group, 1) * intra, up_bw)
    fixed = 0.0 if ideal else all_to_all_latency(hw, group)
    t = in_place(np.add, moved, fixed)
    inside = group <= dom
    if not (inside.all() and np.shape(t) == np.broadcast_shapes(np.shape(t), inside.shape)):
        token = np.asarray(token_bytes() if callable(token_bytes) else token_bytes, dtype=float)
        nodes = np.maximum(np.ceil(group / dom), 1.0)
        reached = nodes * (1 - (1 - 1 / nodes) ** np.asarray(draws, dtype=float))
        t_nic = reached * (nodes - 1) / nodes * token / out_bw
        t_fwd = (dom - 1) / dom * intra / up_bw
        t = np.where(inside, t, np.maximum(t_nic, t_fwd) + fixed)
    sends = intra > 0
    if not (group > 1).all():
        sends = (group > 1) & sends
    return _where_sends(sends, t)     # no traffic, no collective (and no latency)
