"""Hardware profiles: one YAML file per accelerator or system, every figure with its source.

A profile file holds the vendor figures (dense peak FLOP/s per dtype, HBM, links, power, price)
and, separately, the achievable-efficiency factors with the microbenchmark each comes from, so a
user can see and override them. Values may be written with units (``3.35 TB/s``); they are stored
in SI. A profile may name a ``base`` profile and override only some figures (CloudMatrix384 is
``ascend-910c`` with a 384-NPU scale-up domain). Citation keys resolve against the profile's own
``sources:`` block and the shared ``_sources.yaml`` beside the profiles.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import math
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from planner.catalog import derate
from planner.catalog.dtypes import DType
from planner.checks import is_file, located
from planner.errors import InputError, unknown_name
from planner.frozen import Frozen
from planner.units import parse_quantity
from planner.yamlio import Lines, load_yaml, validation_error


class Figure(Frozen):
    """One sourced number. ``value`` is SI; subclasses fix the dimension parsed from text."""

    dimension: ClassVar[str] = "1"
    allow_zero: ClassVar[bool] = False  # every figure is finite and > 0 (>= 0 where a subclass allows it)
    minimum: ClassVar[float] = 0.0      # and at least this, where a smaller one is no device's
    value: float
    source: str = Field(min_length=1)
    note: str | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _parse(cls, v: object) -> float:
        return parse_quantity(v, cls.dimension)  # type: ignore[arg-type]

    @field_validator("value")
    @classmethod
    def _finite_positive(cls, v: float) -> float:
        if not math.isfinite(v) or v < 0 or (v == 0 and not cls.allow_zero):
            unit = "" if cls.dimension == "1" else f" {cls.dimension}"     # SI, as parsed from the text
            raise ValueError(f"must be a finite number {'>=' if cls.allow_zero else '>'} 0, got {v:g}{unit}")
        if 0 < v < cls.minimum:
            raise ValueError(f"must be at least {cls.minimum:g} {cls.dimension} (no device is slower; smaller "
                             f"values overflow the model's times), got {v:g}")
        return v


class FlopRate(Figure):
    dimension: ClassVar[str] = "flop/s"
    minimum: ClassVar[float] = 1e6


class Bytes(Figure):
    dimension: ClassVar[str] = "bytes"


class Bandwidth(Figure):
    dimension: ClassVar[str] = "bytes/s"
    minimum: ClassVar[float] = 1e6


class Seconds(Figure):
    dimension: ClassVar[str] = "s"
    allow_zero: ClassVar[bool] = True   # a latency may be negligible


class Watts(Figure):
    dimension: ClassVar[str] = "W"


class Count(Figure):
    @field_validator("value")
    @classmethod
    def _positive_int(cls, v: float) -> float:
        if v < 1 or v != int(v):
            raise ValueError(f"must be a positive integer, got {v}")
        return v


class Fraction(Figure):
    @field_validator("value")
    @classmethod
    def _unit_interval(cls, v: float) -> float:
        if not 0 < v <= 1:
            raise ValueError(f"an efficiency must be in (0, 1], got {v}")
        return v


class UsdPerHour(Figure):
    dimension: ClassVar[str] = "usd/h"
    date: str | None = None

    @field_validator("date", mode="before")
    @classmethod
    def _date_text(cls, v: object) -> object:
        return v.isoformat() if isinstance(v, _dt.date) else (str(v) if v is not None else v)


class Memory(Frozen):
    capacity: Bytes
    bandwidth: Bandwidth
    # device memory one collective-communication group's communicator takes on each rank, kept out of
    # the KV pool (Ascend HCCL: 2 x HCCL_BUFFSIZE, 400 MiB at the default; None: not modelled, e.g. NCCL's
    # few-MB-per-channel buffers)
    comm_buffer: Bytes | None = None
    # device memory already taken when an engine's process starts loading weights: the part of
    # ``capacity`` the driver keeps and the process's runtime context (CUDA / HIP / CANN and
    # PyTorch), capacity minus the free memory engines log at start-up; None: not measured
    startup_used: Bytes | None = None

    @model_validator(mode="after")
    def _startup_below_capacity(self) -> Memory:
        if self.startup_used is not None and self.startup_used.value >= self.capacity.value:
            raise ValueError(f"memory.startup_used ({self.startup_used.value / 2**30:.2f} GiB) must be below "
                             f"memory.capacity ({self.capacity.value / 2**30:.2f} GiB): it is the part of the "
                             f"device a process finds taken before it loads anything")
        return self


class HostMemory(Frozen):
    """Host memory a device reaches over a coherent chip-to-chip link (Grace LPDDR5X over
    NVLink-C2C): a KV-cache tier below HBM. Both figures are per device (its share of the host)."""

    capacity: Bytes
    bandwidth: Bandwidth                 # per direction, the lesser of the link and DRAM shares


def microbenchmarks_dir() -> Path:
    """The bundled microbenchmark sweeps (``validation/microbenchmarks``): in the installed wheel
    or the source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_data" / "validation" / "microbenchmarks",
                      here.parent / "validation" / "microbenchmarks"):
        if candidate.is_dir():
            return candidate
    raise InputError(f"bundled validation/microbenchmarks/ not found next to {here}")


def sweep_columns(path: Path) -> np.ndarray:
    """The numeric columns of a microbenchmark sweep CSV (``#`` comment lines and the header
    skipped), one row per column."""
    from planner.yamlio import read_text

    rows = [line for line in read_text(path, "sweep").splitlines() if line[:1].isdigit()]
    return np.loadtxt(rows, delimiter=",", ndmin=2).T if rows else np.zeros((0, 0))


class AllReduceSweep(Frozen):
    """A measured all-reduce curve of this link (nccl-tests ``all_reduce_perf`` busbw against
    message size, CSV ``size_bytes,busbw_gbs``): a file name in ``validation/microbenchmarks`` or
    a path. Mid-size all-reduces (the MBs of a TP decode step) reach far less than the link's
    large-message bus bandwidth (H100 NVLink: 172 GB/s at 8 MiB vs 479 GB/s at 8 GiB), which the
    alpha-beta form with a one-shot kernel's latency does not capture; ``comm.py`` uses it."""

    file: str
    source: str = Field(min_length=1)
    note: str | None = None

    @property
    def path(self) -> Path:
        p = Path(self.file)
        return p if p.is_absolute() else microbenchmarks_dir() / p

    @model_validator(mode="after")
    def _readable(self) -> AllReduceSweep:
        if not self.path.is_file():
            raise ValueError(f"all-reduce sweep file {self.file!r} not found (looked at {self.path})")
        expected = "rows 'size_bytes,busbw_gbs' of positive numbers (at least two sizes)"
        try:
            cols = sweep_columns(self.path)
        except ValueError as e:
            raise ValueError(f"all-reduce sweep {self.path}: {e}; expected {expected}") from None
        if cols.shape[0] != 2 or cols.shape[1] < 2 or not (np.isfinite(cols).all() and (cols > 0).all()):
            raise ValueError(f"all-reduce sweep {self.path}: expected {expected}")
        return self


class Island(Frozen):
    """Devices of a PCIe host that share one CPU socket's root complex (no NVLink, no PCIe switch
    between the sockets): a collective spanning islands crosses the inter-socket link, which all
    its flows share, and reaches a lower fraction of the link than one inside an island
    (``efficiency``, replacing ``Efficiency.scale_up`` for such groups)."""

    size: Count
    efficiency: Fraction


class Link(Frozen):
    """A network a device reaches peers over. Bandwidth is per device, per direction."""

    name: str | None = None
    bandwidth_per_direction: Bandwidth
    domain_size: Count | None = None
    latency: Seconds                     # of one collective (one-shot / NVLS all-reduce, one all-to-all)
    all_to_all_latency: Seconds | None = None   # an EP dispatch/combine's own, where measured apart
    ring_hop_latency: Seconds | None = None   # if set, all-reduce is a ring: 2 (n - 1) steps of this each
    all_reduce_sweep: AllReduceSweep | None = None   # measured busbw vs size inside the domain (comm.py)
    topology: Literal["switched", "torus2d"] = "switched"   # torus2d: 4 ports per device (TPU ICI, NeuronLink)
    island: Island | None = None           # PCIe hosts of two sockets: groups larger than one island


class Power(Frozen):
    """Device power (``tdp``, ``idle``) and, if known, ``platform``: each device's share of what its
    node draws beyond the accelerators at full load (host CPUs and DRAM, NICs, switches, fans,
    power conversion), i.e. (node power - devices x TDP) / devices. Ownership energy is priced
    on device power plus this share; the device power model itself ignores it."""

    tdp: Watts
    idle: Watts
    platform: Watts | None = None
    memory_bound_activity: Fraction = Fraction(
        value=0.49, source="splitwisesim_power",
        note="(token-phase 380 W - idle 75 W) / (TDP 700 W - 75 W) on H100; A100 gives 0.55")
    # Memory-bound kernels are limited by HBM at full clock, but the SMs must still issue the
    # loads: below a clock fraction of 1 / headroom the issue rate, not HBM, limits them.
    memory_clock_headroom: Figure = Figure(
        value=1.35, source="capping_memory_bound",
        note="decode unaffected down to f = 0.76 (50% power cap on H100), so >= 1.32")

    @model_validator(mode="after")
    def _idle_below_tdp(self) -> Power:
        if self.idle.value >= self.tdp.value:
            raise ValueError(f"idle power ({self.idle.value:g} W) must be below the TDP ({self.tdp.value:g} W)")
        return self


class Price(Frozen):
    rent: UsdPerHour | None = None
    purchase_usd: Figure | None = None


class Tokens(Figure):
    """A length in tokens."""

    @field_validator("value")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"must be a positive number of tokens, got {v}")
        return v


class AttentionKernels(Frozen):
    """Efficiency of the attention kernels, which are not GEMM-shaped.

    Prefill (FlashAttention-class) kernels reach a plateau fraction of the tensor-core peak only
    when every query block streams many keys: per (sequence, head, query block) a CTA pays a fixed
    prologue/epilogue, so the achieved rate follows Hockney's form in the keys a query attends
    to, ``prefill x L / (L + prefill_half_keys)``. Decode (paged) kernels are memory-bound: they
    read each sequence's K/V pages once, and per (sequence, KV head) a fixed setup and split-K
    reduction costs the same as streaming ``decode_half_ctx`` tokens, so the achieved HBM fraction
    is ``decode_memory x ctx / (ctx + decode_half_ctx)``, where ``decode_memory`` is the HBM
    fraction the device's production paged (GQA/MHA) decode kernel was measured to reach at long
    context (None: the profile's ``memory``, which absorbed-MLA reads always take)."""

    prefill: Fraction
    prefill_half_keys: Tokens
    decode_half_ctx: Tokens
    decode_memory: Fraction | None = None
    # compute plateau of the absorbed-MLA kernel of decode and MTP-verify steps (attention in the
    # 512+64-wide latent space: FlashMLA-class), where an engine measures it apart from its
    # prefill kernel; None: the prefill plateau
    mla_decode: Fraction | None = None


class RecurrentKernel(Frozen):
    """The linear-attention decode core as a device runs it: ``latency`` per call (the kernels it
    launches for q/k/v, gating, normalization and the update) plus its state and activations
    streamed at ``memory`` of the HBM bandwidth, both fitted to one batch sweep of the production
    kernel (``time = latency + bytes / (bandwidth x memory)``)."""

    memory: Fraction
    latency: Seconds


class BufferTiming(Frozen):
    """Where an engine's collective communicators' buffers (``Memory.comm_buffer``) come from.
    ``kv_pool``: they exist when the engine measures the memory its KV pool may take, so they shrink
    the pool (vLLM and vLLM-Ascend profile a forward pass first; the default where an entry says
    nothing); ``reserve``: they are created at the first collective, after the pool is sized
    (SGLang on Ascend: torch_npu creates HCCL communicators on demand, DeepEP-Ascend its window at
    the first dispatch), so they sit in the memory the policy keeps back and shrink the pool only
    by what that reserve cannot hold."""

    value: Literal["kv_pool", "reserve"]
    source: str
    note: str | None = None


class Flag(Frozen):
    """A sourced yes / no property of an engine."""

    value: bool
    source: str = Field(min_length=1)
    note: str | None = None


class StatePool(Frozen):
    """How an engine that keeps linear-attention (Gated DeltaNet / Mamba) recurrent states in a
    pool of their own splits its cache memory between that pool and the KV pool (SGLang's
    ``handle_max_mamba_cache``): the state pool gets ``ratio / (1 + ratio)`` of it
    (``--mamba-full-memory-ratio``), cut into whole per-request state slots, the KV pool what those
    slots leave; a running request holds ``slots_per_request`` slots (with the radix cache on, the
    state it decodes from plus the ones the prefix cache keeps), so the slots also cap the
    sequences that run at once. Engines without one (vLLM's hybrid allocator pages states and KV
    from one pool) take states out of the shared pool request by request."""

    ratio: Figure
    slots_per_request: Count
    source: str
    note: str | None = None


class StaticReserve(Frozen):
    """SGLang's default ``--mem-fraction-static`` (``server_args._handle_gpu_memory_settings``):
    ``(capacity - reserve) / capacity``, the reserve estimating the activations of its largest
    prefill chunk and its CUDA-graph buffers, in MiB: ``base + per_chunk_token x max(chunk,
    min_chunk_tokens) + per_graph_seq x cuda_graph_max_bs + per_eight_ranks x tp x pp / 8``, with
    attention data parallelism ``+ dp x cuda_graph_max_bs x dp_per_graph_seq`` (and ``x
    dp_large_graph_per_seq`` more above ``large_graph`` sequences), at least ``floor`` on devices of
    more than ``floor_above`` of memory, plus ``draft`` for an EAGLE / MTP draft and its graphs. The
    chunk and graph batch are the device's defaults (``HardwareProfile.engine_defaults``)."""

    base_mib: float = Field(ge=0)
    per_chunk_token_mib: float = Field(ge=0)
    min_chunk_tokens: int = Field(ge=0)
    per_graph_seq_mib: float = Field(ge=0)
    per_eight_ranks_mib: float = Field(ge=0)
    dp_per_graph_seq_mib: float = Field(0.0, ge=0)
    large_graph: int = Field(0, ge=0)
    dp_large_graph_per_seq_mib: float = Field(0.0, ge=0)
    floor_mib: float = Field(0.0, ge=0)
    floor_above_gib: float = Field(0.0, ge=0)
    draft_mib: float = Field(0.0, ge=0)
    source: str = Field(min_length=1)
    note: str | None = None


class MemoryPolicy(Frozen):
    """How the serving engine sizes its KV-cache pool (an engine property, set by a framework).

    ``total_fraction``: the engine may use ``fraction`` of the device's total memory for weights,
    activations and KV cache (vLLM ``gpu_memory_utilization``, SGLang ``mem_fraction_static``);
    ``free_fraction``: the KV cache gets ``fraction`` of the memory still free after weights and
    activations are loaded (TensorRT-LLM ``kv_cache_free_gpu_mem_fraction``). ``state_pool``: the
    engine splits that memory with a pool of recurrent states (``StatePool``); None: states share
    the KV pool. ``page_tokens``: the KV cache's allocation unit."""

    kind: Literal["total_fraction", "free_fraction"]
    fraction: Fraction
    comm_buffers: BufferTiming | None = None
    state_pool: StatePool | None = None
    # tokens per KV page (vLLM block_size, SGLang page_size, TensorRT-LLM tokens_per_block): a
    # sequence holds whole pages, on average half a page more than its tokens; None: one token
    page_tokens: Count | None = None
    # the engine picks its total fraction itself where the launch gives none (SGLang): ``fraction``
    # is then only what is said when the device's size is unknown
    static_reserve: StaticReserve | None = None
    # SGLang's pool (model_runner: rest = memory free after the weights load - memory free before
    # they load x (1 - mem_fraction_static)): its fraction is of the memory free when it starts,
    # not of capacity, and its activations live in the 1 - f it keeps back; vLLM takes its
    # fraction of total memory and counts its profiled activations against it (False)
    activations_in_reserve: Flag | None = None
    # the most tokens one KV pool (one attention replica's) holds where the launch caps it: the pool
    # is the smaller of this and what memory gives (SGLang --max-total-tokens, TensorRT-LLM
    # KvCacheConfig.max_tokens; vLLM --num-gpu-blocks-override x block size, but see
    # pool_tokens_exact); None: memory decides
    pool_tokens: Count | None = None
    # the engine allocates the cap as given instead of the smaller of it and what memory gives (vLLM
    # replaces its profiled block count with --num-gpu-blocks-override), so a cap above what memory
    # holds fails at start-up rather than being held to memory
    pool_tokens_exact: Flag | None = None
    # the engine refuses to start unless one attention replica's pool holds one request of its
    # maximum model length, which defaults to the model's context (vLLM: --max-model-len)
    start_needs_max_len: Flag | None = None

    def given(self, fraction: Fraction) -> MemoryPolicy:
        """This policy with the memory setting a launch gave (the engine's own rule then unused)."""
        return self.model_copy(update={"fraction": fraction, "static_reserve": None})

    def capped(self, tokens: Count) -> MemoryPolicy:
        """This policy with the KV-pool token cap a launch gave (``pool_tokens``)."""
        return self.model_copy(update={"pool_tokens": tokens})


def ep_ranks_checked(curve: dict[int, Fraction]) -> dict[int, Fraction]:
    """An ``ep_bulk`` curve's keys are EP group sizes: an all-to-all spans at least 2 ranks."""
    bad = [r for r in curve if r < 2]
    if bad:
        raise ValueError(f"EP ranks must be >= 2 (an all-to-all spans at least two), got {bad[0]}")
    return curve


#: the operators ``planner.perf.ops`` models, by name (a draft module's carry an ``mtp_`` prefix)
OPERATORS = frozenset({
    "embedding", "qkv_embed", "norms_residual", "lm_head",
    "q_proj", "qkv_proj", "q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "attention", "o_proj",
    "attn_all_reduce", "linear_in_proj", "linear_attention", "linear_out_proj",
    "ffn_up", "ffn_down", "ffn_all_reduce", "router", "ep_dispatch", "moe_permute", "experts", "ep_combine",
    "shared_expert_up", "shared_expert_down", "eh_proj", "fc"})


class OpKernels(Frozen):
    """Kernels an engine launches for a modelled operator where that is not one: each takes the
    profile's fixed kernel time (``Efficiency.kernel_latency``), which a decode step pays once per
    layer and kernel. More than one where the engine splits an operator (SGLang's NPU MoE: grouped
    GEMM, activation and quantization, grouped GEMM); 0 where it fuses the operator into a
    neighbour's kernel, which then carries its work and the operator pays no fixed time of its own
    (CloudMatrix-Infer's MLAProlog: the query and latent down- and up-projections in one kernel).
    Operators it does not name run one kernel each."""

    counts: dict[str, int] = Field(min_length=1)
    source: str = Field(min_length=1)
    note: str | None = None

    @field_validator("counts")
    @classmethod
    def _known(cls, counts: dict[str, int]) -> dict[str, int]:
        for name, n in counts.items():
            if name not in OPERATORS:
                raise ValueError(f"unknown operator {name!r}; one of: {', '.join(sorted(OPERATORS))}")
            if n < 0:
                raise ValueError(f"{name}: a kernel count is >= 0 (0: fused into a neighbour's kernel), got {n}")
        return counts

    def of(self, op_name: str) -> int:
        """Kernels of the operator named ``op_name``, a draft module's (``mtp_...``) and its
        draft-extend pass's (``mtp_extend_...``) as the model's own layer's (1 for any operator
        this does not name)."""
        return self.counts.get(op_name.removeprefix("mtp_").removeprefix("extend_"), 1)


class Efficiency(Frozen):
    """Achievable fractions of peak, each from a public microbenchmark (see its source)."""

    gemm: Fraction
    gemm_by_format: dict[DType, Fraction] = {}   # plateaus measured for other formats (e.g. fp8)
    memory: Fraction
    memory_by_format: dict[DType, Fraction] = {}   # weight streaming of GEMMs in a format (e.g. fp4), if slower
    scale_up: Fraction
    scale_out: Fraction
    kernel_latency: Seconds = Seconds(   # fixed time of every compute kernel (launch, ramp-up, tail)
        value=5.75e-6, source="kernel_latency_assumed", note="default: the H100 fit (xla_h100_gemm)")
    attention: AttentionKernels = AttentionKernels(
        prefill=Fraction(value=0.68, source="fa3_h100", note="default: the H100 FlashAttention-3 fit"),
        prefill_half_keys=Tokens(value=216, source="fa3_h100"),
        decode_half_ctx=Tokens(value=128, source="paged_decode"))
    step_overhead: Seconds
    sequence_overhead: Seconds = Seconds(value=0.0, source="engine_overhead",
                                         note="per running sequence per step; set by a framework")
    request_overhead: Seconds = Seconds(value=0.0, source="engine_overhead",
                                        note="per request, added to its TTFT; set by a framework")
    # host time to dispatch one modelled operator's kernels in a step the engine runs eagerly (its
    # graphs cover decode steps only, so every step that carries prompt tokens is launched op by op
    # from Python): such a step takes at least its operators' dispatch (``StepTime.floor_s``);
    # None: the host keeps ahead of the device (graphs, or launches far shorter than the kernels)
    eager_prefill_dispatch: Seconds | None = None
    # the most tokens a step with prompt tokens may carry and still replay a captured graph (vLLM's
    # piecewise graphs, up to its largest capture size); 0: every such step is launched eagerly
    # (--enforce-eager, or graphs captured for decode batches only)
    graph_max_tokens: int = Field(0, ge=0)
    moe_imbalance: Figure = Figure(value=1.0, source="engine_overhead",
                                   note="max/mean expert load from routing skew; set by a framework")
    op_kernels: OpKernels | None = None   # kernels per modelled operator; None: one each (set by a framework)
    grouped_gemm: Fraction = Fraction(value=0.93, source="deepgemm",
                                      note="MoE grouped GEMMs reach this fraction of the dense plateau")
    # the same for one operand format where the engine runs another MoE kernel family for it (e.g.
    # its NVFP4 MoE on Blackwell is not the DeepGEMM path its FP8 MoE takes on Hopper)
    grouped_by_format: dict[DType, Fraction] = {}
    # the whole MoE expert chain of one layer in a weight format, where the engine's chain was timed
    # as it calls it (quantization, grouped GEMMs, activation, unpermute: e.g. vLLM-Ascend's W8A8
    # dynamic path): the HBM fraction its expert weights stream at (in place of ``memory`` /
    # ``memory_by_format``) and the fixed device time the chain takes per layer beyond its kernels'
    # latency and that streaming (its per-token quantization and dequantization passes)
    grouped_memory_by_format: dict[DType, Fraction] = {}
    grouped_fixed_by_format: dict[DType, Seconds] = {}
    # MoE grouped GEMMs whose experts are in a weight-only format (INT4/FP4 weights the chip has no
    # matrix rate for, BF16 activations: W4A16) dequantize every weight tile on the vector/CUDA
    # cores in the kernel's main loop (vLLM's Marlin MoE): their compute plateau, as a fraction of
    # the BF16 peak, where one was measured; None: the BF16 grouped rate
    weight_only_grouped: Fraction | None = None
    # the same for dense GEMMs with weight-only weights (vLLM's Marlin on Ampere flattens far below
    # cuBLAS at prefill sizes; Hopper's Machete claims BF16 parity): None, the BF16 plateau
    weight_only_dense: Fraction | None = None
    # fraction of the BF16 peak (FLOPs as ops.py counts them) that the linear-attention core
    # (Gated DeltaNet / KDA chunk_gated_delta_rule) reaches: sequential chunks, small per-head
    # matmuls and triangular solves keep it far below the GEMM plateau
    linear_attention: Fraction = Fraction(
        value=0.0795, source="gdn_fla_h100",
        note="default: FLA's Triton kernel on H100 (the portable one engines ship)")
    # the recurrent delta-rule kernel of decode and draft-verify steps (one state read and write per
    # sequence and layer), as the device's production kernel was measured over a batch sweep; None:
    # one kernel latency and the profile's memory fraction
    linear_decode: RecurrentKernel | None = None
    # EP dispatch/combine of steps that carry prompt tokens, where the engine runs throughput
    # kernels for them (DeepEP normal mode): fraction of the scale-up link by EP ranks (dies),
    # interpolated in log ranks and held at the ends; empty: the link efficiency, as decode
    ep_bulk: dict[int, Fraction] = {}
    fp8_dispatch: bool = False       # EP dispatch sent in FP8 (DeepEP-class), combine in BF16
    overlap_moe_comm: bool = False   # two micro-batches hide the EP all-to-all behind compute
    draft_extend: bool = False       # one more draft pass per MTP step, over the verified tokens (SGLang)
    # the format the engine stores Gated DeltaNet recurrent states in (per sequence, per layer:
    # heads x dk x dv): SGLang --mamba-ssm-dtype (default float32), vLLM --mamba-ssm-cache-dtype
    # ('auto': the model's dtype); KDA states stay FP32 (perf.ops.recurrent_state_dtype)
    linear_state_dtype: DType = DType.fp32
    # the engine stores a checkpoint's declared state format instead where it declares one
    # (ModelSpec.state_dtype; vLLM copies Qwen3.5's mamba_ssm_dtype into its cache config)
    linear_state_from_checkpoint: bool = False
    moe_a2a: bool = False            # MoE tokens by all-to-all whenever ep > 1, TP attention too (perf.ops)
    shared_expert_ranks: bool = False   # decode: shared experts on EP ranks of their own, dispatched to (perf.ops)
    comm_compute_share: Fraction = Fraction(
        value=0.18, source="deepep_sms", note="compute units the EP all-to-all kernels occupy while overlapped")

    @field_validator("ep_bulk")
    @classmethod
    def _ep_ranks(cls, v: dict[int, Fraction]) -> dict[int, Fraction]:
        return ep_ranks_checked(v)

    def gemm_plateau(self, fmt: DType) -> float:
        """Achievable fraction of peak of large GEMMs in ``fmt`` (the format-specific
        measurement if the profile has one, else the general ``gemm``)."""
        return (self.gemm_by_format.get(fmt) or self.gemm).value

    def grouped_share(self, fmt: DType) -> Fraction:
        """Fraction of the dense plateau MoE grouped GEMMs in ``fmt`` reach (the format's own
        figure if the engine names one, else ``grouped_gemm``)."""
        return self.grouped_by_format.get(fmt) or self.grouped_gemm


class DeviceLimits(Frozen):
    """The scheduler limits an engine picks by device (a ``DeviceTier`` row of a framework's
    ``batch_defaults``, and the ``EngineDefaults`` of the device it matched); None: not set."""

    max_batched_tokens: int | None = Field(None, ge=16)
    max_num_seqs: int | None = Field(None, ge=1)
    graph_batch: int | None = Field(None, ge=1)       # largest decode batch captured in a graph, TP < 4
    graph_batch_tp4: int | None = Field(None, ge=1)   # the same at TP >= 4


class EngineDefaults(DeviceLimits):
    """Scheduler limits a serving engine sets itself on this device where its launch gives none,
    by the device's memory (set by a framework entry's ``batch_defaults``: vLLM's
    ``EngineArgs.get_batch_defaults``, SGLang's ``_handle_gpu_memory_settings``)."""

    # the sequence limit is each attention-DP replica's (SGLang sizes each DP worker's own), even
    # where a limit the launch gives counts the whole instance (``Engine.limits_scope``)
    seqs_per_replica: bool = False
    source: str = Field(min_length=1)


# the bundled profiles' vendors (a profile of another vendor takes any framework entry, vLLM's by default)
KNOWN_VENDORS = ("nvidia", "amd", "huawei", "intel", "google", "aws")


class HardwareProfile(Frozen):
    """One accelerator (per device figures) as deployed in a node or supernode."""

    name: str
    vendor: str
    description: str
    peak_flops: dict[DType, FlopRate]
    memory: Memory
    host_memory: HostMemory | None = None
    scale_up: Link
    scale_out: Link
    power: Power
    price: Price = Price()
    efficiency: Efficiency
    memory_policy: MemoryPolicy = MemoryPolicy(
        kind="total_fraction", fraction=Fraction(value=0.9, source="vllm_memory",
                                                 note="vLLM gpu_memory_utilization default"))
    framework: str | None = None   # the serving framework entry applied to this profile, if any
    engine_defaults: EngineDefaults | None = None   # that framework's scheduler defaults on this device
    dies: Count | None = None      # compute dies per package that software runs as separate ranks
    sources: dict[str, str] = {}
    base: str | None = None

    @field_validator("vendor")
    @classmethod
    def _vendor_name(cls, v: str) -> str:
        """Written as the bundled profiles write it (``nvidia``, ``amd``, ``huawei``): framework
        entries name the vendors they run on in that spelling (``Framework.vendors``)."""
        if not v.strip():
            raise ValueError("expected the device's vendor, e.g. nvidia, amd or huawei")
        v = v.strip().lower()
        close = difflib.get_close_matches(v, KNOWN_VENDORS, n=1, cutoff=0.7)
        if v not in KNOWN_VENDORS and close:      # a vendor of one's own is allowed; a typo of a known one not
            raise ValueError(f"did you mean {close[0]!r}? (the vendor picks the device's engines: "
                             f"{', '.join(KNOWN_VENDORS)}; another name is a vendor no engine entry covers)")
        return v

    @model_validator(mode="after")
    def _check(self) -> HardwareProfile:
        if DType.bf16 not in self.peak_flops:
            raise ValueError("peak_flops must give bf16")
        if self.scale_up.domain_size is None:
            raise ValueError("scale_up.domain_size is required")
        unknown = ("is not a known citation key: give the citation under sources: with a short key (sources: "
                   "{mine: 'my STREAM run, 2026-11'}) and name the key here")
        for path, fig in _figures(self):
            if fig.source not in self.sources:
                raise located(f"{path}.source", f"{fig.source!r} {unknown}")
        sweep = self.scale_up.all_reduce_sweep
        if sweep is not None and sweep.source not in self.sources:
            raise located("scale_up.all_reduce_sweep.source", f"{sweep.source!r} {unknown}")
        return self

    # -- derived quantities the perf engine uses (SI) ---------------------------------------
    @property
    def platform_w(self) -> float:
        """Each device's share of its node's power beyond the accelerators (0 if not recorded)."""
        return self.power.platform.value if self.power.platform else 0.0

    @property
    def domain_size(self) -> int:
        assert self.scale_up.domain_size is not None
        return int(self.scale_up.domain_size.value)

    @property
    def dies_per_device(self) -> int:
        """Ranks one package runs as (1 for a single-die device)."""
        return int(self.dies.value) if self.dies is not None else 1

    def per_die(self) -> HardwareProfile:
        """The profile of one die of a multi-die package (itself for a single die): engines run
        each die as its own rank (Ascend 910C: 2 dies, each its own device to HCCL and torch_npu),
        so a die has its share of the package's FLOPs, HBM capacity and bandwidth and link
        bandwidth, and a scale-up domain holds ``dies`` times as many ranks. Efficiencies,
        latencies and power stay as they are (power stays per package: callers count packages)."""
        d = self.dies_per_device
        if d == 1:
            return self
        return _die_views(self, d)

    def compute_dtype(self, weight_dtype: DType) -> DType:
        """Tensor-core format a GEMM runs in: the weight format if the chip has matrix units
        for it (W8A8, W4A4), else bf16 (weight-only quantization dequantizes to bf16)."""
        return weight_dtype if weight_dtype in self.peak_flops else DType.bf16

    def peak_flops_per_s(self, dtype: DType) -> float:
        return self.peak_flops[self.compute_dtype(dtype)].value

    @property
    def rent_usd_per_h(self) -> float:
        if self.price.rent is None:
            raise InputError(f"hardware {self.name!r} has no rental price; give price.rent in the profile")
        return self.price.rent.value


def _share(fig: Figure, d: float) -> Figure:
    return fig.model_copy(update={"value": fig.value / d, "note": f"1/{d:g} of the package's"})


_DIE_CACHE: dict[int, tuple[HardwareProfile, HardwareProfile]] = {}   # id -> (profile, its die)


def _die_views(hw: HardwareProfile, d: int) -> HardwareProfile:
    """``hw.per_die()`` (cached per profile object: a search asks for it once per step)."""
    cached = _DIE_CACHE.get(id(hw))
    if cached is not None and cached[0] is hw:      # the entry keeps hw alive, so its id is not reused
        return cached[1]
    up, out = hw.scale_up, hw.scale_out
    assert up.domain_size is not None
    view = hw.model_copy(update={
        "peak_flops": {k: _share(v, d) for k, v in hw.peak_flops.items()},
        # a communicator's buffer is per rank (die), not shared
        "memory": hw.memory.model_copy(update={"capacity": _share(hw.memory.capacity, d),
                                               "bandwidth": _share(hw.memory.bandwidth, d)}),
        "scale_up": up.model_copy(update={
            "bandwidth_per_direction": _share(up.bandwidth_per_direction, d),
            "domain_size": up.domain_size.model_copy(update={"value": up.domain_size.value * d})}),
        "scale_out": out.model_copy(update={"bandwidth_per_direction": _share(out.bandwidth_per_direction, d)}),
        "dies": None})
    if len(_DIE_CACHE) > 64:
        _DIE_CACHE.clear()
    _DIE_CACHE[id(hw)] = (hw, view)
    return view


def _figures(obj: BaseModel, prefix: str = "") -> list[tuple[str, Figure]]:
    out: list[tuple[str, Figure]] = []
    for name in type(obj).model_fields:
        value = getattr(obj, name)
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for key, v in items:
            path = f"{prefix}{name}" + (f".{key.value if isinstance(key, DType) else key}" if key else "")
            if isinstance(v, Figure):
                out.append((path, v))
            elif isinstance(v, BaseModel):
                out.extend(_figures(v, path + "."))
    return out


# ---------------------------------------------------------------------------------------------
PROFILES_DIR_ENV = "PLANNER_HARDWARE_DIR"


def bundled_profiles_dir() -> Path:
    """Where the bundled profiles live: inside the installed wheel, or the source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_data" / "hardware_profiles", here.parent / "hardware_profiles"):
        if candidate.is_dir():
            return candidate
    raise InputError(f"bundled hardware_profiles/ not found next to {here}")


_CACHE: dict[str, HardwareProfile] = {}
# profiles read from users' files in this process, by name: a plan names its device by the
# profile's name (Deployment.hardware), which later steps (notes, the simulator check, a horizon's
# curves) look up again; bundled names are looked up first
_USER: dict[str, HardwareProfile] = {}


def _is_profile_file(path: Path) -> bool:
    """Whether a file of the profiles' directory is a profile (not the shared citations, ``_*``,
    nor the price table)."""
    return not path.name.startswith("_") and path.name != "prices.yaml" and is_file(path)


def _raw_profiles(directory: Path) -> dict[str, tuple[Path, dict, Lines]]:
    raw = {}
    for path in sorted(directory.glob("*.y*ml")):
        if not _is_profile_file(path):
            continue
        data, lines = load_yaml(path)
        if not isinstance(data, dict) or "name" not in data:
            raise InputError(f"{path}:1: a hardware profile is a mapping with a 'name'")
        raw[str(data["name"])] = (path, data, lines)
    return raw


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _shared_sources(directory: Path) -> dict[str, str]:
    path = directory / "_sources.yaml"
    if not path.exists():
        return {}
    data, _ = load_yaml(path)
    return {str(k): str(v) for k, v in (data or {}).items()}


def _build(name: str, raw: dict[str, tuple[Path, dict, Lines]], shared: dict[str, str],
           cache: dict[str, HardwareProfile], chain: tuple[str, ...] = ()) -> HardwareProfile:
    """Validate profile ``name`` of ``raw`` (resolving its ``base``) and store it in ``cache``."""
    path, data, lines = raw[name]
    if data.get("base"):
        if data["base"] in (*chain, name):
            loop = " -> ".join((*chain, name, data["base"]))
            raise InputError(f"{path}:{lines.get(('base',), 1)} base: profiles form a loop ({loop})")
        if data["base"] not in raw and data["base"] not in _CACHE:
            raise unknown_name("base hardware", data["base"], sorted({*raw, *_CACHE}))
        base = _CACHE.get(data["base"]) or _build(data["base"], raw, shared, cache, (*chain, name))
        own = sorted(set(data) - {"name", "base", "description", "sources"})
        data = {"description": f"{base.name} with its own {', '.join(own) or 'name'} ({base.description})",
                **_merge(base.model_dump(mode="json", exclude={"name", "description", "base"}), data)}
    data = {**data, "sources": {**shared, **data.get("sources", {})}}
    try:
        profile = HardwareProfile.model_validate(data)
    except ValidationError as e:
        raise validation_error(path, e, lines, HardwareProfile) from None
    cache[name] = profile
    return profile


_ALL_LOADED: list[bool] = []


def _load_bundled() -> None:
    if _ALL_LOADED:
        return
    directory = bundled_profiles_dir()
    raw = _raw_profiles(directory)
    shared = _shared_sources(directory)
    for name in raw:
        if name not in _CACHE:
            _build(name, raw, shared, _CACHE)
    _ALL_LOADED.append(True)


def list_hardware() -> list[str]:
    """Names of the bundled hardware profiles."""
    _load_bundled()
    return sorted(_CACHE)


def is_bundled_hardware(name: str) -> bool:
    """Whether ``name`` is a bundled profile, without parsing the catalog: a bundled profile is the
    file of its name (``_load_one``), else the full scan decides."""
    key = str(name).lower()
    return key in _CACHE or _is_profile_file(bundled_profiles_dir() / f"{key}.yaml") or key in list_hardware()


def load_hardware_file(path: str | Path) -> HardwareProfile:
    """Load a user's profile file; it may name a bundled profile as ``base``."""
    _load_bundled()
    path = Path(path)
    data, lines = load_yaml(path)
    if not isinstance(data, dict) or "name" not in data:
        raise InputError(f"{path}:1: a hardware profile is a mapping with a 'name'")
    raw = {str(data["name"]): (path, data, lines)}
    shared = _shared_sources(bundled_profiles_dir())
    profile = _build(str(data["name"]), raw, shared, {})   # user files never enter the bundled catalog
    _USER[profile.name.lower()] = profile
    return profile


def hardware(name: str | HardwareProfile) -> HardwareProfile:
    """A hardware profile by catalog name (``h100-sxm``), by YAML path, or passed through; the
    name of a profile read from a user's file earlier in this run finds it too (``_USER``)."""
    if isinstance(name, HardwareProfile):
        return name
    if str(name).endswith((".yaml", ".yml")):
        return derate.active(load_hardware_file(name))
    key = str(name).lower()
    if key not in _CACHE:
        _load_one(key)
    if key not in _CACHE and key in _USER:         # a user's profile this run read from its file
        return derate.active(_USER[key])
    if key not in _CACHE:
        _load_bundled()
        raise unknown_name("hardware", str(name), sorted(_CACHE))
    return derate.active(_CACHE[key])     # at a confidence quantile inside derate.performance_at


def _load_one(key: str) -> None:
    """Load just ``<key>.yaml`` (and its base): keeps a single what-if from parsing every profile."""
    directory = bundled_profiles_dir()
    raw: dict[str, tuple[Path, dict, Lines]] = {}
    name = key
    while name and name not in _CACHE and name not in raw:
        path = directory / f"{name}.yaml"
        if not is_file(path):
            return
        data, lines = load_yaml(path)
        if not isinstance(data, dict) or data.get("name") != name:
            return                      # file name and profile name differ: the full scan handles it
        raw[name] = (path, data, lines)
        name = data.get("base")
    if key in raw:
        _build(key, raw, _shared_sources(directory), _CACHE)
