"""Roofline time of a forward step.

Each compute operator takes ``kernel_latency + max(FLOPs / (peak x gemm_eff), bytes / (HBM bw x
mem_eff))`` on its device: Hockney's (r_inf, n_1/2) form, in which a kernel reaches the plateau
fraction ``gemm_eff`` only when its work dwarfs the fixed launch/ramp/tail time, so small GEMMs
(decode, TP-sharded projections) run far below peak. Both factors are fitted on a public GEMM
shape sweep (profile sources, ``tests/test_calibration.py``). Collectives take their alpha-beta
time on the link they use (``comm.py``). Compute and communication are not overlapped
(conservative: engines overlap part of it), and a fixed per-step engine overhead is added
(profile ``efficiency.step_overhead``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.perf.comm import collective_time
from planner.perf.ops import COMM_KINDS, DTypes, Op, OpKind, Step, layer_ops
from planner.perf.parallel import Layout


class Bound(str, Enum):
    compute = "compute"
    memory = "memory"
    comm = "comm"


@dataclass(frozen=True)
class OpTime:
    """One operator's time on its device, for all of its layers (seconds, arrays)."""

    op: Op
    compute_s: np.ndarray
    memory_s: np.ndarray
    comm_s: np.ndarray
    fixed_s: float = 0.0   # per-kernel latency (compute operators only)

    @property
    def time_s(self) -> np.ndarray:
        return self.op.count * (np.maximum(np.maximum(self.compute_s, self.memory_s), self.comm_s) + self.fixed_s)

    @property
    def bound(self) -> np.ndarray:
        return np.where(self.comm_s > 0, Bound.comm.value,
                        np.where(self.compute_s >= self.memory_s, Bound.compute.value, Bound.memory.value))


@dataclass(frozen=True)
class StepTime:
    """A whole forward step through all layers of the model (all pipeline stages in sequence)."""

    ops: list[OpTime]
    overhead_s: float

    @property
    def layers_s(self) -> np.ndarray:
        return sum(t.time_s for t in self.ops)

    @property
    def total_s(self) -> np.ndarray:
        return self.layers_s + self.overhead_s

    def time_by_bound(self) -> dict[Bound, np.ndarray]:
        """Seconds of the operators limited by each resource (numeric masks: this runs on every
        candidate and load point of a search, so no per-element strings)."""
        out = {b: 0.0 for b in Bound}
        for t in self.ops:
            ts = t.time_s
            comm = np.asarray(t.comm_s) > 0
            compute = ~comm & (np.asarray(t.compute_s) >= np.asarray(t.memory_s))
            out[Bound.comm] = out[Bound.comm] + np.where(comm, ts, 0.0)
            out[Bound.compute] = out[Bound.compute] + np.where(compute, ts, 0.0)
            out[Bound.memory] = out[Bound.memory] + np.where(comm | compute, 0.0, ts)
        return out

    @property
    def bound(self) -> np.ndarray:
        """The resource whose operators take the most time."""
        parts = self.time_by_bound()
        stacked = np.stack(np.broadcast_arrays(*(parts[b] for b in Bound)))
        return np.array([b.value for b in Bound], dtype=object)[np.argmax(stacked, axis=0)]


def operand_dtype(op: Op, dtypes: DTypes) -> DType:
    """Format an operator's matrix operands are in: GEMMs the weight format, attention FP8 only
    with an FP8 KV cache (FP8 FMHA kernels), otherwise BF16, whatever the weights (FP8/FP4 weights
    do not speed attention up). ``HardwareProfile.compute_dtype`` then says which tensor-core
    format the chip runs that in (W8A8, W4A4, or BF16 for weight-only formats)."""
    if op.kind is OpKind.attention:
        return DType.fp8 if dtypes.kv is DType.fp8 else DType.bf16
    return dtypes.weight


def op_time(hw: HardwareProfile, op: Op, dtypes: DTypes) -> OpTime:
    fmt = hw.compute_dtype(operand_dtype(op, dtypes))
    peak = hw.peak_flops_per_s(fmt) * hw.efficiency.gemm_plateau(fmt)
    bw = hw.memory.bandwidth.value * hw.efficiency.memory.value
    compute = np.asarray(op.flops, dtype=float) / peak
    memory = np.asarray(op.mem_bytes, dtype=float) / bw
    if op.kind in COMM_KINDS:
        return OpTime(op, compute, memory, collective_time(hw, op.kind.value, op.comm_bytes, op.group))
    return OpTime(op, compute, memory, np.zeros(()), hw.efficiency.kernel_latency.value)


def step_time(model: ModelSpec, hw: HardwareProfile, layout: Layout, step: Step, dtypes: DTypes) -> StepTime:
    """Time of one forward step of ``step.batch`` sequences through all layers."""
    ops = layer_ops(model, layout, step, dtypes)
    return StepTime([op_time(hw, op, dtypes) for op in ops], hw.efficiency.step_overhead.value)
