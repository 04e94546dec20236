"""Roofline time of a forward step.

Each compute operator takes ``kernel_latency + max(FLOPs / (peak x gemm_eff), bytes / (HBM bw x
mem_eff))`` on its device (a GEMM: the 2-norm of the two, ``ridge_overlap``): Hockney's
(r_inf, n_1/2) form, in which a kernel reaches the plateau
fraction ``gemm_eff`` only when its work dwarfs the fixed launch/ramp/tail time, so small GEMMs
(decode, TP-sharded projections) run far below peak. Both factors are fitted on a public GEMM
shape sweep (profile sources, ``tests/test_calibration.py``). An operator the engine launches as
several kernels pays the fixed time once per kernel, one it fuses into a neighbour's kernel none
(``Efficiency.op_kernels``: on SGLang's Ascend backend an MoE layer's router and expert MLP and a
dense layer's norms, QKV projection with its RoPE kernel and gate/up projection with its activation;
the MLA prolog and the MoE permute on CloudMatrix-Infer). Collectives take their alpha-beta
time on the link they use (``comm.py``). Compute and communication are not overlapped
(conservative: engines overlap part of it), and a fixed per-step engine overhead is added
(profile ``efficiency.step_overhead``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.hardware import Fraction, HardwareProfile, Seconds
from planner.catalog.model import ModelSpec
from planner.perf.comm import (
    all_reduce_form,
    all_to_all_latency,
    collective_time,
    ep_all_to_all_time,
    ep_bulk_efficiency,
    link_of,
    measured_busbw,
    scale_up_efficiency,
)
from planner.perf.ops import (
    COMM_KINDS,
    OP_ARRAY_FIELDS,
    DTypes,
    Op,
    OpKind,
    Per,
    Step,
    add_nonneg,
    engine_state_dtype,
    in_place,
    layer_ops,
    scalar_zero,
    scaled,
)
from planner.perf.parallel import Layout, on_dies


class Bound(str, Enum):
    compute = "compute"
    memory = "memory"
    comm = "comm"


# Kernels near the ridge point overlap their tensor-core work and their HBM streaming imperfectly
# (pipeline fill and drain, stages too few to hide both): a GEMM whose compute and memory times
# are close takes longer than their maximum: their p-norm, p = 2. Two sweep families fix p.
# (1) Seven public M-sweeps of LLM-shaped GEMMs whose weights exceed the last-level cache, bundled
# as validation/microbenchmarks/gemm-ridge-sweeps.csv (MI355X CK int8 / FP8 at Llama-70B shapes;
# B200 CUTLASS FP8 and cuBLAS BF16; H100 CUTLASS FP8 and cuBLAS BF16), each sweep's compute and
# streaming rates its own, so only the shape of the transition is fitted (microbench.ridge_fit):
# RMS log error over its 22 rows within 4x of the ridge 0.124 at p = 2, 0.108 at the best p = 1.65,
# 0.175 at p = 3 (the cube-norm held until session 21) and 0.256 for the bare maximum. (2) OpenXLA's
# 124 H100 BF16 shapes, all within 4x of the ridge, with the kernel latency refitted for each p
# (xla_h100_gemm): 0.099 at p = 2 (5.75 us), 0.107 at 1.75, 0.091 at 3. Weighting the two families
# equally the optimum is p = 1.75; p = 2 scores within 2.5% of it and is an exact hypot. DeepGEMM's
# grouped FP8 GEMMs overlap better (H800, 4 x 256 tokens at N 4,096, K 7,168: 932 TFLOP/s measured,
# 7% above this form).
RIDGE_P = 2


def ridge_overlap(compute_s, memory_s) -> np.ndarray:
    """``(compute^p + memory^p)^(1/p)`` for ``RIDGE_P`` = 2: ``hypot``, exact and without overflow.
    The maximum where one term dominates (+5% at a 3x ratio, +2% at 5x), sqrt(2) = 1.41x it where
    they are equal; NaN stays NaN and zeros zero."""
    return np.hypot(np.asarray(compute_s, dtype=float), np.asarray(memory_s, dtype=float))


@dataclass(frozen=True)
class OpTime:
    """One operator's time on its device, for all of its layers (seconds, arrays)."""

    op: Op
    compute_s: np.ndarray
    memory_s: np.ndarray
    comm_s: np.ndarray
    fixed_s: np.ndarray | float = 0.0   # per-kernel latency (compute operators with work only)
    hw: HardwareProfile | None = None   # collectives: the profile whose link latency ``alpha_s`` is

    def renamed(self, op: Op) -> OpTime:
        """These times for another operator with the same inputs (its time computed once)."""
        t = OpTime(op, self.compute_s, self.memory_s, self.comm_s, self.fixed_s, self.hw)
        t.__dict__["time_s"] = self.time_s       # the cached property's slot: the same array, not recomputed
        return t

    @cached_property
    def alpha_s(self) -> np.ndarray | float:
        """Collectives: the latency part of ``comm_s`` (zero where nothing is sent); computed only
        where it is used (overlapped all-to-alls)."""
        op = self.op
        if self.hw is None or op.kind not in COMM_KINDS:
            return 0.0
        sends = (np.asarray(op.group) > 1) & (np.asarray(op.comm_bytes) > 0)
        lat = all_to_all_latency(self.hw, op.group) if op.kind is OpKind.all_to_all else link_of(self.hw, op.group)[1]
        return np.where(sends, lat, 0.0)

    @cached_property
    def time_s(self) -> np.ndarray:
        """``count x (max(compute, memory, comm) + fixed)``, computed once (a step reads it for its
        time and for its power) on fresh arrays in place; ``max(x, 0) = x`` for the non-negative
        times of an operator without communication, so that maximum is skipped. A GEMM's compute
        and memory times combine as ``ridge_overlap`` says, not as a bare maximum."""
        t = ridge_overlap(self.compute_s, self.memory_s) if self.op.kind is OpKind.gemm else \
            np.maximum(self.compute_s, self.memory_s)
        if not _zero(self.comm_s):
            t = in_place(np.maximum, t, self.comm_s)
        if not _zero(self.fixed_s):
            t = in_place(np.add, t, self.fixed_s)
        return t if self.op.count == 1 and isinstance(t, np.ndarray) else in_place(np.multiply, t, self.op.count)

    @property
    def bound(self) -> np.ndarray:
        return np.where(self.comm_s > 0, Bound.comm.value,
                        np.where(self.compute_s >= self.memory_s, Bound.compute.value, Bound.memory.value))


@dataclass(frozen=True)
class StepTime:
    """A whole forward step through all layers of the model (all pipeline stages in sequence).
    ``overhead_s`` is the engine's host time of the step (fixed + per running sequence). With
    ``overlap`` (two micro-batches, DeepSeek/SGLang two-batch overlap, CloudMatrix microbatch
    pipelining) the EP all-to-alls of one micro-batch run under the other's compute, and the
    communication kernels take a share ``s`` of the compute units (DeepEP: 24 of 132 SMs). Steps
    with prompt tokens run the throughput kernels, which spin on their SMs until the other ranks'
    data arrives, so they hold them through the whole overlapped window and compute runs on the
    rest: ``max(compute / (1 - s), all-to-all)`` (DeepSeek's H800 prefill trace: DeepEP resident
    ~94% of each micro-batch's compute, expert GEMMs at 84% / 74% of DeepGEMM's full-chip rate,
    108 / 132 = 82%). Decode steps' low-latency kernels only hold SMs while they move data:
    ``max(compute + s x all-to-all, all-to-all)``. Every kernel and every collective now runs
    twice on half the tokens, so their fixed latencies count twice. That is why overlap pays in
    prefill (bandwidth-bound dispatch, +23-31% on CloudMatrix384) and little in decode
    (latency-bound, +6-9%: cm384_paper). A step (or a candidate row) without an EP all-to-all is
    not split: there is nothing to hide.

    ``floor_s`` is the host's time to launch the step's kernels where the engine runs it eagerly
    (``eager_floor_s``): the device cannot end a step before its last kernel is launched, so the
    layers take ``max(device, floor)``, the device idling in the gaps while the host is behind."""

    ops: list[OpTime]
    overhead_s: np.ndarray | float
    overlap: bool = False
    comm_share: float = 0.0    # compute units the overlapped all-to-all kernels take from compute
    floor_s: np.ndarray | float = 0.0   # host dispatch of an eagerly launched step (0: none)

    @cached_property
    def layers_s(self) -> np.ndarray:
        """The operators' time, or the host's dispatch of them where that is longer."""
        if scalar_zero(self.floor_s):
            return self.device_s
        return np.maximum(self.device_s, self.floor_s)

    @property
    def host_wait_s(self) -> np.ndarray | float:
        """The part of ``layers_s`` the device waits for the host's launches (0 without a floor)."""
        if scalar_zero(self.floor_s):
            return 0.0
        return np.maximum(np.asarray(self.floor_s) - self.device_s, 0.0)

    @cached_property
    def device_s(self) -> np.ndarray:
        """The operators' time on the device (the two micro-batches overlapped where they run)."""
        a2as = [t for t in self.ops if t.op.kind is OpKind.all_to_all] if self.overlap else []
        if not a2as:                # nothing to hide: the engine runs the step as one batch
            return _total(t.time_s for t in self.ops)
        a2a = sum((t.time_s + t.op.count * t.alpha_s for t in a2as), 0.0)
        rest = sum((t.time_s + t.op.count * (t.fixed_s + t.alpha_s)
                    for t in self.ops if t.op.kind is not OpKind.all_to_all), 0.0)
        share = self.comm_share
        transient = rest + share * a2a           # kernels that hold their compute units only while moving data
        bulk = [t.op.bulk for t in a2as if not scalar_zero(t.op.bulk)]
        if bulk and share:                        # prompt steps' spinning kernels: resident throughout
            resident = (np.asarray(bulk[0]) > 0) & (np.asarray(a2a) > 0)     # (a row without EP sends nothing)
            transient = np.where(resident, rest / (1.0 - share), transient)
        overlapped = np.maximum(transient, a2a)
        # a row whose layout sends no all-to-all (experts not spread, attention not data-parallel)
        # is not split in two: the micro-batches exist to hide the EP exchange (SGLang's
        # two-batch overlap runs with its DeepEP all-to-all backend)
        sends = np.asarray(a2a) > 0
        if np.all(sends):
            return overlapped
        return np.where(sends, overlapped, _total(t.time_s for t in self.ops))

    @cached_property
    def total_s(self) -> np.ndarray:
        return self.layers_s + self.overhead_s

    def time_by_bound(self) -> dict[Bound, np.ndarray]:
        """Seconds of the operators limited by each resource (numeric masks: this runs on every
        candidate and load point of a search, so no per-element strings). Each part is the sum,
        in operator order, of the times of the operators it holds, accumulated in place (adding
        an operator's time only where it is of that bound: elsewhere the sum gains an exact 0)."""
        shape = np.broadcast_shapes(*(np.shape(x) for t in self.ops for x in (t.time_s, t.comm_s, t.compute_s,
                                                                                 t.memory_s)))
        out = {b: np.zeros(shape) for b in Bound}
        for t in self.ops:
            ts = t.time_s
            comm = np.asarray(t.comm_s) > 0
            compute = np.asarray(t.compute_s) >= np.asarray(t.memory_s)
            if comm.any():
                np.add(out[Bound.comm], ts, out=out[Bound.comm], where=comm)
                compute = ~comm & compute
                np.add(out[Bound.memory], ts, out=out[Bound.memory], where=~(comm | compute))
            else:
                np.add(out[Bound.memory], ts, out=out[Bound.memory], where=~compute)
            np.add(out[Bound.compute], ts, out=out[Bound.compute], where=compute)
        return {b: v if v.ndim else v[()] for b, v in out.items()}

    @property
    def bound(self) -> np.ndarray:
        """The resource whose operators take the most time."""
        parts = self.time_by_bound()
        stacked = np.stack(np.broadcast_arrays(*(parts[b] for b in Bound)))
        return np.array([b.value for b in Bound], dtype=object)[np.argmax(stacked, axis=0)]


_zero = scalar_zero          # an operator without that part


def _total(parts) -> np.ndarray:
    """``sum(parts)`` (left to right, as Python's ``sum`` adds them), accumulated in place."""
    acc = 0
    for x in parts:
        acc = in_place(np.add, acc, x) if isinstance(acc, np.ndarray) and acc.ndim else acc + x
    return acc


def operand_dtype(op: Op, dtypes: DTypes) -> DType:
    """Format an operator's matrix operands are in: GEMMs the weight format, attention FP8 only
    with an FP8 KV cache (FP8 FMHA kernels), otherwise BF16, whatever the weights (FP8/FP4 weights
    do not speed attention up). ``HardwareProfile.compute_dtype`` then says which tensor-core
    format the chip runs that in (W8A8, W4A4, or BF16 for weight-only formats). A GEMM whose
    weights the checkpoint keeps in BF16 (``Op.weight_dtype``: a quantized model's LM head) runs in BF16."""
    if op.kind is OpKind.attention:
        return DType.fp8 if dtypes.kv is DType.fp8 else DType.bf16
    return op.weight_dtype or dtypes.weight


def attention_plateau(att, op: Op):
    """Compute plateau of an attention operator's kernel: the absorbed-MLA (decode) kernel's where
    the engine measured one apart and the operator attends in the latent space, else the prefill
    (FlashAttention-class) kernel's."""
    if att.mla_decode is None or not np.any(op.absorbed):
        return att.prefill.value
    return np.where(op.absorbed, att.mla_decode.value, att.prefill.value)


def op_time(hw: HardwareProfile, op: Op, dtypes: DTypes) -> OpTime:
    """Roofline time of one operator with the efficiencies that apply to its kind (see
    ``efficiency_of`` for which figure each one takes). Exact shortcuts only: a load factor of 1
    is not multiplied in, and where every row reads weights the kernel latency is one number."""
    eff, rec = hw.efficiency, recurrent_kernel(hw.efficiency, op)
    fmt = hw.compute_dtype(operand_dtype(op, dtypes))
    flops = np.asarray(op.flops, dtype=float)
    weight = np.asarray(op.weight_bytes, dtype=float)
    moved = add_nonneg(np.asarray(op.act_bytes, dtype=float), np.asarray(op.kv_bytes, dtype=float))
    peak, bw = hw.peak_flops_per_s(fmt), hw.memory.bandwidth.value
    if op.kind in COMM_KINDS:
        return OpTime(op, flops / (peak * eff.gemm_plateau(fmt)), (weight + moved) / (bw * eff.memory.value),
                      _comm_time(hw, op, dtypes), hw=hw)
    if op.kind is OpKind.attention and np.any(np.asarray(op.keys) > 0):
        keys = np.maximum(np.asarray(op.keys, dtype=float), 1.0)
        att = eff.attention
        compute = flops / (peak * attention_plateau(att, op) * keys / (keys + att.prefill_half_keys.value))
        memory = (weight + moved) / (bw * decode_stream(eff, op) * keys / (keys + att.decode_half_ctx.value))
    else:
        load = np.asarray(op.imbalance, dtype=float) * np.where(np.asarray(op.group) > 1, eff.moe_imbalance.value, 1.0)
        grouped = eff.grouped_share(fmt).value if op.grouped else 1.0
        stream = (weight_streaming(eff, op, dtypes) or eff.memory).value
        # a linear-attention core runs at its own kernel's measured fraction of the BF16 peak
        # (whatever the KV format); weight-only GEMMs at their kernel's plateau where it is lower
        if op.linear:
            denom = hw.peak_flops_per_s(DType.bf16) * eff.linear_attention.value
        elif (cap := _weight_only_cap(hw, op, dtypes, fmt)) is not None:
            denom = peak * cap.value
        else:
            denom = peak * eff.gemm_plateau(fmt) * grouped
        compute = flops / denom if _ones(load, flops.shape) else in_place(np.divide, flops * load, denom)  # x * 1 = x
        per_byte = bw * (rec.memory.value if rec else eff.memory.value)
        streamed = moved / per_byte if _ones(load, moved.shape) else in_place(np.divide, moved * load, per_byte)
        memory = in_place(np.add, streamed, weight / (bw * stream))   # addition commutes exactly
    latency = rec.latency.value if rec else eff.kernel_latency.value * kernels_of(eff, op)
    if not rec and (chain := chain_fixed(eff, op, dtypes)) is not None:
        latency += chain.value
    if weight.size and bool(np.all(weight > 0)):
        fixed = latency                      # every row is busy (a row with NaN work times NaN either way)
    else:                                    # busy: (flops > 0) | (weight + moved > 0), without the zero terms
        nbytes = moved if _zero(weight) else weight + moved
        fixed = latency if _never_idle(flops, nbytes) else latency * _busy(flops, nbytes)
    return OpTime(op, compute, memory, np.zeros(()), fixed)


def kernels_of(eff, op: Op) -> int:
    """Kernels the engine launches for ``op`` (``Efficiency.op_kernels`` where it states them; one
    otherwise): each pays the fixed kernel time, and an operator fused into another's kernel (0)
    none."""
    return eff.op_kernels.of(op.name) if eff.op_kernels else 1


def recurrent_kernel(eff, op: Op):
    """The device's measured recurrent delta-rule kernel (``Efficiency.linear_decode``) where ``op``
    is a linear-attention core in a decode or verify step, else None."""
    return eff.linear_decode if op.recurrent else None


def decode_memory(eff, absorbed: bool = False) -> Fraction:
    """The HBM fraction a decode step's attention streams its K/V pages at: the device's measured
    paged (GQA/MHA) decode kernel where the profile states one, else the profile's streaming
    fraction; an absorbed-MLA read (the latent cache, its own kernel) streams at the profile's
    fraction (what ``explain_op`` names; ``decode_stream`` is the same per operator row)."""
    return eff.memory if absorbed else eff.attention.decode_memory or eff.memory


def decode_stream(eff, op: Op):
    """``decode_memory`` of every row of attention operator ``op`` (a number where they agree)."""
    paged = decode_memory(eff).value
    if eff.attention.decode_memory is None or not np.any(op.absorbed):
        return paged
    return np.where(op.absorbed, eff.memory.value, paged)


def weight_streaming(eff, op: Op, dtypes: DTypes) -> Fraction | None:
    """The HBM fraction a GEMM streams its weights at where their format has one of its own: the
    engine's timed MoE expert chain for a grouped GEMM (``Efficiency.grouped_memory_by_format``),
    else the format's (``Efficiency.memory_by_format``: B200 NVFP4 0.44), else None (the profile's
    ``memory``): what ``op_time`` applies and ``explain_op`` names."""
    if op.kind is not OpKind.gemm:
        return None
    fmt = op.weight_dtype or dtypes.weight
    return (op.grouped and eff.grouped_memory_by_format.get(fmt)) or eff.memory_by_format.get(fmt)


def chain_fixed(eff, op: Op, dtypes: DTypes) -> Seconds | None:
    """The fixed time per layer of the engine's MoE expert chain in the experts' weight format
    beyond its kernels' latency (``Efficiency.grouped_fixed_by_format``: vLLM-Ascend's W8A8 dynamic
    chain), for a grouped GEMM; else None."""
    return eff.grouped_fixed_by_format.get(op.weight_dtype or dtypes.weight) if op.grouped else None


def _weight_only_cap(hw: HardwareProfile, op: Op, dtypes: DTypes, fmt: DType) -> Fraction | None:
    """The weight-only plateau that holds GEMM ``op`` back below its ``fmt`` plateau (grouped
    share included), if its weights are a format the chip has no matrix rate for
    (``Efficiency.weight_only_grouped`` for MoE experts, else the dense one: a grouped kernel of
    the family is no faster; ``weight_only_dense`` for the others); else None."""
    if op.kind is not OpKind.gemm:
        return None
    eff = hw.efficiency
    cap = (eff.weight_only_grouped or eff.weight_only_dense) if op.grouped else eff.weight_only_dense
    weight = op.weight_dtype or dtypes.weight
    if cap is None or weight.bytes >= DType.bf16.bytes or hw.compute_dtype(weight) is not DType.bf16:
        return None
    return cap if cap.value < eff.gemm_plateau(fmt) * (eff.grouped_share(fmt).value if op.grouped else 1.0) else None


def _never_idle(flops: np.ndarray, nbytes: np.ndarray) -> bool:
    """Whether no element has both no work and no bytes, so the kernel latency is one number. A NaN
    counts as busy here: its time is NaN whatever is added, and NaN plus the latency is that NaN."""
    idle = np.asarray(nbytes) <= 0
    if not _zero(flops):
        idle = idle & (np.asarray(flops) <= 0)
    return not idle.any()


def _busy(flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """``(flops > 0) | (nbytes > 0)``; a scalar zero side is left out."""
    if _zero(flops):
        return nbytes > 0
    if _zero(nbytes):
        return flops > 0
    return (flops > 0) | (nbytes > 0)


def _ones(load: np.ndarray, shape: tuple) -> bool:
    """Whether ``load`` is 1 everywhere and no larger than ``shape`` (so ``x * load`` is ``x``);
    only small arrays are looked at."""
    return np.broadcast_shapes(load.shape, shape) == shape and (load.size == 1 or load.size * 8 <= int(
        np.prod(shape))) and bool(np.all(load == 1.0))


def _explain_op(hw: HardwareProfile, t: OpTime, dtypes: DTypes) -> tuple[np.ndarray, str, str]:
    """(time at nameplate peaks, the efficiency applied in words, its source) of one timed
    operator: what ``whatif --explain`` shows so a user sees why a number is what it is."""
    op, eff = t.op, hw.efficiency
    fmt = hw.compute_dtype(operand_dtype(op, dtypes))
    ideal = np.maximum(np.asarray(op.flops, float) / hw.peak_flops_per_s(fmt),
                       np.asarray(op.mem_bytes, float) / hw.memory.bandwidth.value)
    bound = np.ravel(t.bound)[0]
    if op.kind in COMM_KINDS:
        g = np.asarray(op.group, float)
        if op.kind is OpKind.all_to_all:    # the EP transfer itself (hierarchical across domains)
            ideal = _comm_time(hw, op, dtypes, ideal=True)
        else:                               # the ring's bytes at the link's nameplate rate
            bw = link_of(hw, op.group)[0] / np.where(np.asarray(op.group) <= hw.domain_size,
                                                     scale_up_efficiency(hw, op.group), hw.efficiency.scale_out.value)
            shape = 2.0 if op.kind is OpKind.all_reduce else 1.0
            ideal = shape * (g - 1) / np.maximum(g, 1) * np.asarray(op.comm_bytes, float) / bw
        link = "scale-up" if np.ravel(np.asarray(op.group) <= hw.domain_size)[0] else "scale-out"
        extra = (", FP8 dispatch" if eff.fp8_dispatch and op.name.endswith("dispatch") else "")
        fig = eff.scale_up if link == "scale-up" else eff.scale_out
        if op.kind is OpKind.all_to_all and eff.ep_bulk and float(np.ravel(np.asarray(op.bulk))[0]) > 0:
            f = float(np.ravel(ep_bulk_efficiency(hw, op.group))[0])
            return ideal, f"prompt-step kernels: scale-up link x {f:.2f} + latency" + extra, \
                next(iter(eff.ep_bulk.values())).source
        if op.kind is OpKind.all_reduce:
            size, group = float(np.ravel(op.comm_bytes)[0]), float(np.ravel(g)[0])
            form = all_reduce_form(hw, size, group)
            sweep = hw.scale_up.all_reduce_sweep
            if form == "measured" and sweep is not None:
                busbw = float(np.ravel(measured_busbw(sweep.path, size))[0])
                return ideal, f"measured all-reduce curve: {busbw / 1e9:.0f} GB/s busbw at {size / 1e6:.1f} MB", \
                    sweep.source
            if form == "ring":
                hop = hw.scale_up.ring_hop_latency
                return ideal, f"ring: 2 (n-1) hops x {hop.value * 1e6:.1f} us + {link} link x {fig.value:.2f}", \
                    f"{fig.source}; hop: {hop.source}"
            if form == "one-shot":
                return ideal, f"one-shot kernel: (n-1) x {size / 1e6:.2f} MB over the {link} link x " \
                              f"{fig.value:.2f} + latency", fig.source
        lat = (hw.scale_up if link == "scale-up" else hw.scale_out).latency
        if op.kind is not OpKind.all_reduce:
            return ideal, f"{link} link x {fig.value:.2f} + latency" + extra, fig.source
        return ideal, f"{link} link x {fig.value:.2f} + {lat.value * 1e6:.0f} us" + extra, \
            f"{fig.source}; latency: {lat.source}"
    if op.kind is OpKind.attention and np.any(np.asarray(op.keys) > 0):
        att, keys = eff.attention, float(np.ravel(np.maximum(op.keys, 1))[0])
        if bound == "compute":
            latent = att.mla_decode is not None and bool(np.ravel(op.absorbed)[0])   # as attention_plateau
            kernel = att.mla_decode if latent else att.prefill
            f = kernel.value * keys / (keys + att.prefill_half_keys.value)
            name = "absorbed-MLA kernel" if latent else "FlashAttention"
            return ideal, f"{name} {f:.0%} of peak at {keys:,.0f} keys/query", kernel.source
        stream = decode_memory(eff, bool(np.ravel(op.absorbed)[0]))
        f = stream.value * keys / (keys + att.decode_half_ctx.value)
        return ideal, f"paged decode {f:.0%} of HBM at {keys:,.0f} tokens", \
            stream.source if stream is att.decode_memory else att.decode_half_ctx.source
    skew = _expert_load_text(eff, op)
    kernels = kernels_of(eff, op)
    if kernels == 0:
        fixed = f"no kernel of its own (fused){skew}"
    else:
        fixed = f"{kernels} x " if kernels > 1 else ""
        fixed += f"{eff.kernel_latency.value * 1e6:.1f} us/kernel{skew}"
    if (chain := chain_fixed(eff, op, dtypes)) is not None:
        fixed += f" + {chain.value * 1e6:.0f} us {(op.weight_dtype or dtypes.weight).value} expert chain"
    if bound == "memory" and (rec := recurrent_kernel(eff, op)):
        return ideal, f"recurrent delta-rule kernel {rec.memory.value:.0%} of HBM + {rec.latency.value * 1e6:.1f} us", \
            rec.memory.source
    if bound == "compute" and op.linear:
        return ideal, f"chunked linear attention {eff.linear_attention.value:.1%} of peak + {fixed}", \
            eff.linear_attention.source
    if bound == "compute":
        plateau = eff.gemm_by_format.get(fmt) or eff.gemm
        cap = _weight_only_cap(hw, op, dtypes, fmt)
        if cap is not None:
            return ideal, f"weight-only {'grouped ' if op.grouped else ''}GEMM {cap.value:.2f} of peak + {fixed}", \
                cap.source
        if op.grouped:      # the MoE kernel's share of the dense plateau (Efficiency.grouped_share)
            share = eff.grouped_share(fmt)
            return ideal, f"GEMM plateau {plateau.value:.2f} x grouped {share.value:.2f} + {fixed}", \
                f"{plateau.source}; grouped: {share.source}"
        return ideal, f"GEMM plateau {plateau.value:.2f} + {fixed}", plateau.source
    by_format = weight_streaming(eff, op, dtypes)
    if by_format is not None and float(np.ravel(np.asarray(op.weight_bytes, float))[0]) > 0:  # as op_time streams them
        return ideal, f"{(op.weight_dtype or dtypes.weight).value} weights at HBM x {by_format.value:.2f}, " \
                      f"activations x {eff.memory.value:.2f} + {fixed}", f"{by_format.source}; {eff.memory.source}"
    return ideal, f"HBM x {eff.memory.value:.2f} + {fixed}", eff.memory.source


def explain_op(hw: HardwareProfile, t: OpTime, dtypes: DTypes) -> tuple[np.ndarray, str, str]:
    """(ideal time, the efficiency applied, its source) of one operator's time ``t``; where the
    engine launches other than one kernel for it (``Efficiency.op_kernels``), the count's source
    too, and for an expert-parallel operator the source of the engine's routing skew."""
    ideal, applied, source = _explain_op(hw, t, dtypes)
    eff, op = hw.efficiency, t.op
    if kernels_of(eff, op) != 1:
        source = f"{source}; kernels: {eff.op_kernels.source}"
    if (chain := chain_fixed(eff, op, dtypes)) is not None and chain.source not in source:
        source = f"{source}; expert chain: {chain.source}"
    # the operators the routing skew multiplies (op_time: those over an expert-parallel group;
    # _comm_time: the all-to-alls), not the all-reduces of a TP group
    if op.kind is not OpKind.all_reduce and np.any(np.asarray(op.group) > 1):
        if op.kind is OpKind.all_to_all:     # the compute operators' text already gives the load
            applied += _expert_load_text(eff, op)
        skew = eff.moe_imbalance
        if skew.value != 1.0:
            said = f"calibrated ({skew.note})" if skew.source == "calibrated" and skew.note else skew.source
            source = f"{source}; expert load: {said}"
    return ideal, applied, source


def _expert_load_text(eff, op: Op) -> str:
    """", expert load xN" for an operator whose load factor (its maximum over the ranks of its group
    x the engine's routing skew where that group spans ranks, as op_time and _comm_time apply them)
    is above 1, else nothing."""
    skew = eff.moe_imbalance.value if np.any(np.asarray(op.group) > 1) else 1.0
    load = float(np.ravel(np.asarray(op.imbalance, dtype=float))[0]) * skew
    return f", expert load x{load:.2f}" if load > 1.0001 else ""


def _comm_time(hw: HardwareProfile, op: Op, dtypes: DTypes, ideal: bool = False) -> np.ndarray:
    """A collective on its link. EP all-to-all is as slow as its most loaded device; dispatch
    travels in FP8 (1 byte + one FP32 scale per 128 values) when the engine does so (DeepEP),
    combine in the activation format. ``ideal`` (all-to-all): its bytes, evenly loaded, at the
    links' nameplate rates without latency."""
    if op.kind is OpKind.all_to_all:
        skew = 1.0 if ideal else hw.efficiency.moe_imbalance.value
        load = np.ones(()) if ideal else np.asarray(op.imbalance, dtype=float)
        load = load if skew == 1.0 else load * skew                  # x * 1 = x: not multiplied
        fmt = (1 + 4 / 128) / dtypes.act.bytes if (hw.efficiency.fp8_dispatch and op.name.endswith("dispatch")) else 1.0
        scale = load if fmt == 1.0 else load * fmt
        # a prompt step's transfer on the engine's throughput kernels, where it has them
        up = None if not hw.efficiency.ep_bulk or _zero(op.bulk) else \
            np.where(np.asarray(op.bulk) > 0, ep_bulk_efficiency(hw, op.group), scale_up_efficiency(hw, op.group))
        # the tokens-once bytes matter only to groups that span domains: computed only for those
        return ep_all_to_all_time(hw, np.asarray(op.comm_bytes) * scale, lambda: np.asarray(op.remote_bytes) * scale,
                                  op.draws, op.group, up, ideal)
    return collective_time(hw, op.kind.value, op.comm_bytes, op.group)


def step_overhead_s(hw: HardwareProfile, layout: Layout, batch) -> np.ndarray:
    """Host time of one engine step: a fixed part and a part per running sequence its scheduler
    handles (each attention-DP rank has its own scheduler)."""
    eff = hw.efficiency
    # ``sequence x batch / dp`` as one chain: a power-of-two dp folds into the factor exactly
    return eff.step_overhead.value + scaled(np.asarray(batch, dtype=float), eff.sequence_overhead.value,
                                            Per(layout.attention_dp))


def eager_step(hw: HardwareProfile, prompt_tokens, step_tokens) -> np.ndarray | bool:
    """Per row: the step is launched eagerly, operator by operator, by an engine whose host cost
    of doing so is known (``Efficiency.eager_prefill_dispatch``): it carries prompt tokens and
    more tokens in all than the largest graph the engine replays for such steps
    (``Efficiency.graph_max_tokens``; 0: none). Decode-only steps replay the engine's graphs."""
    eff = hw.efficiency
    if eff.eager_prefill_dispatch is None:
        return False
    prompt = np.asarray(prompt_tokens, dtype=float) > 0
    if eff.graph_max_tokens == 0:
        return prompt
    return prompt & (np.asarray(step_tokens, dtype=float) > eff.graph_max_tokens)


def eager_floor_s(hw: HardwareProfile, ops: list[Op], eager) -> np.ndarray | float:
    """Host time to launch ``ops`` one by one, in the rows of ``eager`` (a bool or a per-row mask,
    ``eager_step``): ``Efficiency.eager_prefill_dispatch`` per modelled operator and layer, in the
    rows where it runs (a collective where it spans devices and carries a payload, any other operator
    where it has work or bytes, as its kernel latency in ``op_time``: a block of candidates lists
    the operators of all of them, and a row is launched only its own). 0 elsewhere."""
    dispatch = hw.efficiency.eager_prefill_dispatch
    if dispatch is None or not np.any(eager):
        return 0.0
    launched = 0
    for op in ops:
        runs = (np.asarray(op.group) > 1) & _busy(op.comm_bytes, op.remote_bytes) if op.kind in COMM_KINDS \
            else _busy(op.flops, op.mem_bytes)
        launched = launched + op.count * runs
    return np.where(eager, launched * dispatch.value, 0.0)


def build_step(hw: HardwareProfile, ops: list[Op], dtypes: DTypes, layout: Layout, batch,
               eager=False) -> StepTime:
    """Time every operator and add the engine's step overhead for ``batch`` running sequences;
    ``eager`` (a bool or a per-row mask, ``eager_step``): the engine launches the step operator
    by operator, and it takes at least the host's time to do so (``eager_floor_s``).
    Operators that differ only in name (a layer's two all-reduces of one payload array, an EP
    dispatch and combine sent in one format) are timed once: the same inputs, the same times."""
    times, memo = [], {}
    for op in ops:
        key = _inputs_of(hw, op)
        t = memo.get(key)
        if t is None:
            memo[key] = t = op_time(hw, op, dtypes)
        elif t.op is not op:
            t = t.renamed(op)
        times.append(t)
    return StepTime(times, step_overhead_s(hw, layout, batch), hw.efficiency.overlap_moe_comm,
                    hw.efficiency.comm_compute_share.value, eager_floor_s(hw, ops, eager))


def _inputs_of(hw: HardwareProfile, op: Op) -> tuple:
    """What ``op_time`` reads of an operator (arrays by identity: the caller's list holds them
    all, so an id is not reused while the key is in use; ``params`` is not read, and only makes
    the key finer). The name counts only where it chooses the dispatch format."""
    fmt = hw.efficiency.fp8_dispatch and op.kind is OpKind.all_to_all and op.name.endswith("dispatch")
    return (op.kind, op.count, op.grouped, op.linear, op.recurrent, op.draws, fmt,
            *(id(getattr(op, f)) for f in OP_ARRAY_FIELDS))


def step_time(model: ModelSpec, hw: HardwareProfile, layout: Layout, step: Step, dtypes: DTypes) -> StepTime:
    """Time of one forward step of ``step.batch`` sequences through all layers (on one die of a
    multi-die package: ``on_dies``)."""
    hw, layout = on_dies(hw, layout)
    eff = hw.efficiency
    return build_step(hw, layer_ops(model, layout, step, dtypes, eff.moe_a2a, eff.shared_expert_ranks,
                                    engine_state_dtype(model, eff)), dtypes, layout,
                      step.batch, step.prompt and eager_step(hw, step.batch * step.q_len, step.batch * step.q_len))
