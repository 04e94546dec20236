"""Device memory: weights, KV cache (and linear-attention state), workspace, framework reserve.

Per device of an instance with layout (tp, ep, pp): GEMM weights in the weight dtype (the modules
a quantized checkpoint keeps unquantized, at least its LM head, in BF16), norms and the embedding
in the activation dtype; the KV cache of the sequences its attention replica
serves, for its stage's layers. GQA K/V heads are split over TP (replicated when tp > KV heads);
MLA's latent cache is replicated on every TP rank (so MLA prefers attention DP: ``ep > tp``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.perf.ops import (
    DTypes,
    Op,
    OpKind,
    Step,
    engine_state_dtype,
    layer_ops,
    mtp_draft_ops,
    recurrent_state_dtype,
)
from planner.perf.parallel import Layout, on_dies

if TYPE_CHECKING:
    from planner.perf.speculation import Speculation

# Tokens a prefill step processes at once (vLLM V1 default max_num_batched_tokens = 8192 for
# online serving on large GPUs); sizes the activation workspace.
PREFILL_CHUNK_TOKENS = 8192


def _kv_elements_per_token_layer(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    if model.mla is not None:
        return np.full(tp.shape, float(model.kv_elements_per_token_layer))
    return 2.0 * np.maximum(model.num_kv_heads / tp, 1) * model.head_dim


def kv_bytes_per_token_device(model: ModelSpec, layout: Layout, kv_dtype: DType,
                              hw: HardwareProfile | None = None) -> np.ndarray:
    """KV-cache bytes one token adds on one device (its stage's full-attention layers; windowed
    layers are bounded per sequence, see ``state_bytes_per_sequence_device``). With ``hw`` a
    multi-die package: the bytes on the dies of the package that hold the token (``_on_package``)."""
    if hw is not None and hw.dies_per_device > 1:
        return _on_package(kv_bytes_per_token_device, model, layout, kv_dtype, hw)
    per_layer = _kv_elements_per_token_layer(model, layout.tp)
    return model.num_attention_layers * per_layer * kv_dtype.bytes / layout.pp


def _on_package(per_rank, model: ModelSpec, layout: Layout, kv_dtype: DType, hw: HardwareProfile) -> np.ndarray:
    """A per-sequence quantity of a package from its ranks': a sequence's KV lives on the dies of
    its attention replica, ``tp over dies / tp`` of them per package (all dies of a TP group's
    packages; one die under attention data parallelism), each holding the per-rank share (GQA
    heads replicated once the dies outnumber them)."""
    _, ranks = on_dies(hw, layout)
    return per_rank(model, ranks, kv_dtype) * (ranks.tp / layout.tp)


def state_bytes_per_sequence_device(model: ModelSpec, layout: Layout, kv_dtype: DType,
                                    hw: HardwareProfile | None = None,
                                    state_dtype: DType | None = None) -> np.ndarray:
    """Per-sequence memory that does not grow with the context, on one device: linear-attention
    state (in ``state_dtype``; None: ``hw``'s engine format, FP32 without ``hw``), and the KV of
    windowed layers, reserved for their whole window (``window.size`` tokens: exact once a
    sequence is longer than the window, as engines that free out-of-window blocks hold it; it
    overstates shorter ones by the part of the window they do not fill)."""
    if state_dtype is None and hw is not None:
        state_dtype = engine_state_dtype(model, hw.efficiency)
    if hw is not None and hw.dies_per_device > 1:
        def per_rank(m: ModelSpec, lay: Layout, kv: DType) -> np.ndarray:
            return state_bytes_per_sequence_device(m, lay, kv, state_dtype=state_dtype)
        return _on_package(per_rank, model, layout, kv_dtype, hw)
    out = np.zeros(layout.tp.shape)
    la, win = model.linear_attention, model.window
    if la is not None:
        state = recurrent_state_dtype(la.kind, state_dtype)
        per_layer = la.recurrent_elements * state.bytes + la.conv_elements * kv_dtype.bytes
        out = out + len(la.layers) * per_layer / layout.tp / layout.pp
    if win is not None:
        per_layer = _kv_elements_per_token_layer(model, layout.tp)
        out = out + model.num_local_layers * win.size * per_layer * kv_dtype.bytes / layout.pp
    return out


def weight_bytes_device(ops: list[Op], layout: Layout, dtypes: DTypes) -> np.ndarray:
    """Weights stored on the most loaded device: its stage's layers plus embedding and/or head."""
    layers, ends = 0.0, []
    for op in ops:
        size = op.params * ((op.weight_dtype or dtypes.weight).bytes if op.kind is OpKind.gemm else dtypes.act.bytes)
        if op.name in ("embedding", "lm_head"):
            ends.append(np.asarray(size, dtype=float))
        else:
            layers = layers + op.count * size
    embed, head = ends
    return layers / layout.pp + np.where(layout.pp > 1, np.maximum(embed, head), embed + head)


def workspace_bytes(model: ModelSpec, layout: Layout, dtypes: DTypes):
    """Activation workspace of one device for a prefill chunk of ``PREFILL_CHUNK_TOKENS`` tokens."""
    width = max(model.intermediate_size, model.hidden_size) / layout.tp
    return PREFILL_CHUNK_TOKENS * (4 * model.hidden_size + 2 * width) * dtypes.act.bytes


def page_waste_bytes(hw: HardwareProfile, per_token) -> np.ndarray | float:
    """KV bytes a sequence holds beyond its tokens because the engine allocates whole pages of
    ``MemoryPolicy.page_tokens`` (vLLM 16 on CUDA, 128 on Ascend): the last page is on average half
    empty, ``(page - 1) / 2`` tokens' worth over a sequence's life (its length is spread over the
    page's positions as it grows); 0 for one-token pages."""
    pol = hw.memory_policy
    page = pol.page_tokens.value if pol is not None and pol.page_tokens is not None else 1.0
    return np.asarray(per_token, dtype=float) * (page - 1) / 2


def startup_bytes(hw: HardwareProfile) -> float:
    """Device memory taken before an engine loads anything (``Memory.startup_used``: the driver's
    share and the runtime context), which every engine's KV pool is sized without: vLLM and SGLang
    read free memory after it exists, TensorRT-LLM's free fraction is of what it leaves; 0 where
    the profile has not measured it."""
    used = hw.memory.startup_used
    return 0.0 if used is None else used.value


def comm_buffer_bytes(hw: HardwareProfile, layout: Layout) -> np.ndarray:
    """Communicator buffers on one rank: one per parallel group that runs collectives on it (the
    tensor-parallel all-reduce group, the expert-parallel group, the pipeline's), each of the
    profile's ``memory.comm_buffer`` (Ascend: HCCL holds 2 x HCCL_BUFFSIZE per communicator for
    itself, CANN's HCCL_BUFFSIZE page); engines allocate them beside the weights, before they size
    their KV pool. ``layout`` is a rank's (``on_dies``)."""
    buf = hw.memory.comm_buffer
    if buf is None:
        return np.zeros(np.shape(layout.tp))
    groups = (np.asarray(layout.tp) > 1).astype(float) + (np.asarray(layout.ep) > 1) + (np.asarray(layout.pp) > 1)
    return groups * buf.value


def picks_own_fraction(hw: HardwareProfile) -> bool:
    """The engine sizes its memory setting itself on this device (``MemoryPolicy.static_reserve``,
    from the chunk its ``engine_defaults`` give): SGLang without ``--mem-fraction-static``."""
    d = hw.engine_defaults
    return hw.memory_policy.static_reserve is not None and d is not None and d.max_batched_tokens is not None


def engine_fraction(hw: HardwareProfile, layout: Layout | None = None,
                    spec: Speculation | None = None) -> np.ndarray | float:
    """The memory setting the engine runs with (``MemoryPolicy.fraction``), or, for an engine that
    picks it itself (``MemoryPolicy.static_reserve``: SGLang without ``--mem-fraction-static``),
    the one it picks for this device, layout (one rank's) and draft: ``(capacity - reserve) /
    capacity``, rounded to 3 places as SGLang does."""
    pol = hw.memory_policy
    if not picks_own_fraction(hw):
        return pol.fraction.value
    rule, d = pol.static_reserve, hw.engine_defaults
    lay = layout or Layout.of()
    tp, pp, dp = (np.asarray(x, dtype=float) for x in (lay.stage_devices, lay.pp, lay.attention_dp))
    graph = np.where(tp >= 4, d.graph_batch_tp4 or d.graph_batch or 0, d.graph_batch or 0)
    mib = (rule.base_mib + rule.per_chunk_token_mib * max(d.max_batched_tokens, rule.min_chunk_tokens)
           + rule.per_graph_seq_mib * graph + rule.per_eight_ranks_mib * tp * pp / 8
           + np.where(dp > 1, graph * dp * (rule.dp_per_graph_seq_mib
                                            + np.where(graph > rule.large_graph, rule.dp_large_graph_per_seq_mib, 0)),
                      0.0))
    cap_mib = hw.memory.capacity.value / hw.dies_per_device / 2**20      # one die's: the device it sees
    if cap_mib > rule.floor_above_gib * 1024:
        mib = np.maximum(mib, rule.floor_mib)
    if spec is not None and spec.draft_tokens:
        mib = mib + rule.draft_mib
    return np.clip(np.round((cap_mib - mib) / cap_mib, 3), 0.0, 1.0)


def reserved_bytes(hw: HardwareProfile, weights, workspace, layout: Layout | None = None,
                   spec: Speculation | None = None, activations=0.0) -> np.ndarray:
    """Device memory the engine keeps out of its KV pool beyond weights and workspace, by its
    policy (``HardwareProfile.memory_policy``): ``(1 - f) x total`` for vLLM-style engines
    (``f``: ``engine_fraction``); for SGLang (``activations_in_reserve``) ``(1 - f)`` of the
    memory free at start-up, less the ``activations`` (part of ``workspace``) that live in it;
    ``(1 - f) x (total - weights - workspace)`` for TensorRT-LLM's free fraction."""
    cap, pol = hw.memory.capacity.value, hw.memory_policy
    if pol.kind == "free_fraction":
        f = pol.fraction.value
        return (1 - f) * np.maximum(cap - np.asarray(weights) - np.asarray(workspace), 0.0)
    keep = 1 - engine_fraction(hw, layout, spec)
    if pol.activations_in_reserve is not None and pol.activations_in_reserve.value:
        return np.maximum(keep * (cap - startup_bytes(hw)) - activations, 0.0) + 0 * np.asarray(weights, dtype=float)
    return keep * cap + 0 * np.asarray(weights, dtype=float)


def reserve_beside_buffers(hw: HardwareProfile, weights, workspace, comm, layout: Layout | None = None,
                           spec: Speculation | None = None, activations=0.0) -> np.ndarray:
    """The engine's reserve (``reserved_bytes``) beside the communicator buffers ``comm``: all of
    it where the buffers exist before the engine sizes its KV pool (``MemoryPolicy.comm_buffers``
    kv_pool: they are then part of the memory the policy sizes around), else the part of it the
    buffers leave free (reserve: created later, they live in it; the pool gives up only what the
    reserve cannot hold)."""
    timing = hw.memory_policy.comm_buffers
    if timing is not None and timing.value == "reserve":
        return np.maximum(reserved_bytes(hw, weights, workspace, layout, spec, activations) - comm, 0.0)
    return reserved_bytes(hw, weights, np.asarray(workspace) + comm, layout, spec, activations)


def draft_weight_bytes_device(model: ModelSpec, layout: Layout, dtypes: DTypes, spec: Speculation | None) -> float:
    """Weights a speculative-decoding draft adds on one device (0 without drafts): the target's
    MTP module (its block and ``eh_proj``; embedding and LM head are the target's) or an EAGLE-3
    draft (its layer, ``fc`` and its own head; the embedding is the target's), each GEMM in its
    own format (``perf.ops.mtp_draft_ops``). Held on the last pipeline stage, with the head."""
    if spec is None or not spec.draft_tokens:
        return 0.0
    shared = ("mtp_embedding",) if spec.draft is not None else ("mtp_embedding", "mtp_lm_head")
    total = 0.0
    for op in mtp_draft_ops(model, layout, Step.of(1, 1, 0), dtypes, passes=1, draft=spec.draft):
        if op.name not in shared:
            fmt = (op.weight_dtype or dtypes.weight) if op.kind is OpKind.gemm else dtypes.act
            total = total + op.params * fmt.bytes
    return total


def state_pool_split(hw: HardwareProfile, free_bytes, state_bytes) -> tuple[np.ndarray, np.ndarray]:
    """(bytes left to the KV pool, most sequences the state slots hold) of cache memory
    ``free_bytes`` where each request's recurrent state takes ``state_bytes`` (the same units: one
    device's, or an instance's summed the same way), by the engine's ``MemoryPolicy.state_pool``:
    SGLang gives the state pool ``r / (1 + r)`` of the memory in whole slots of one state each and
    admits ``slots // slots_per_request`` requests; the KV pool keeps the rest. Without a split (or
    without states) all of it is the KV pool's and only the batch limit caps the sequences (inf)."""
    free = np.asarray(free_bytes, dtype=float)
    state = np.asarray(state_bytes, dtype=float)
    pol = hw.memory_policy.state_pool if hw.memory_policy is not None else None
    if pol is None or not np.any(state > 0):
        return free, np.full(np.broadcast_shapes(free.shape, state.shape), np.inf)
    r = pol.ratio.value
    slots = np.floor(np.maximum(free, 0.0) * r / (1 + r) / np.where(state > 0, state, 1.0))
    kv = np.where(state > 0, free - slots * state, free)
    return kv, np.where(state > 0, np.floor(slots / pol.slots_per_request.value), np.inf)


def pool_tokens(hw: HardwareProfile) -> float:
    """The most tokens one KV pool holds by the engine's launch (``MemoryPolicy.pool_tokens``),
    whatever memory would give; inf where the launch sets no cap."""
    pol = hw.memory_policy
    return float(pol.pool_tokens.value) if pol is not None and pol.pool_tokens is not None else np.inf


def pool_allocated_tokens(hw: HardwareProfile) -> float:
    """Tokens of KV pool the engine allocates at start-up whatever memory holds: the launch's cap
    where the engine takes it as given (``MemoryPolicy.pool_tokens_exact``: vLLM's
    ``--num-gpu-blocks-override``), else 0 (the pool is then the smaller of the cap and memory)."""
    pol = hw.memory_policy
    exact = pol is not None and pol.pool_tokens_exact is not None and pol.pool_tokens_exact.value
    return pool_tokens(hw) if exact and pol.pool_tokens is not None else 0.0


def room_tokens(room_bytes: float, per_token: float) -> int:
    """Whole tokens of ``per_token`` bytes that ``room_bytes`` of a device hold (0 if none)."""
    return int(max(room_bytes, 0.0) // per_token) if per_token > 0 else 0


def exact_pool_problem(hw: HardwareProfile, room_bytes: float, per_token: float) -> str | None:
    """Why an engine that allocates the launch's KV-pool cap as given (``pool_allocated_tokens``)
    cannot start where one pool's share of a device has ``room_bytes`` for KV of ``per_token``
    bytes a token (the cap that would serve: ``room_tokens``), or None where it can."""
    tokens, room = pool_allocated_tokens(hw), max(room_bytes, 0.0)
    if tokens * per_token <= room * (1 + 1e-12):
        return None
    return (f"{hw.framework or 'the engine'} allocates the KV pool the launch caps as given "
            f"(--num-gpu-blocks-override replaces the count it profiles): {tokens:,.0f} tokens need "
            f"{tokens * per_token / 2**30:.2f} GiB per device where the memory left after weights and the engine's "
            f"reserve holds {room_tokens(room, per_token):,} tokens ({room / 2**30:.2f} GiB), so it runs out of "
            "memory at start-up")


def exact_pool_refusal(hw: HardwareProfile, room_bytes: float, per_token: float) -> str | None:
    """``exact_pool_problem`` with the cap that would serve (``room_tokens``), as a refusal says
    it, or None where the engine starts."""
    problem = exact_pool_problem(hw, room_bytes, per_token)
    return problem and f"{problem}; cap it at --kv-pool-tokens {room_tokens(room_bytes, per_token)} or fewer"


def pools_per_device(hw: HardwareProfile, layout: Layout) -> np.ndarray:
    """Attention replicas' KV pools one device holds a share of: 1, or a multi-die package's dies
    where each runs its own attention replica (``on_dies``: attention DP per die)."""
    return on_dies(hw, layout)[1].attention_dp / np.asarray(layout.attention_dp, dtype=float)


def _capped_bytes(tokens, per_token) -> np.ndarray:
    """Bytes ``tokens`` tokens of ``per_token`` bytes take; inf where there is no cap (inf tokens)."""
    tokens = np.asarray(tokens, dtype=float)
    finite = np.isfinite(tokens)
    return np.where(finite, np.where(finite, tokens, 0.0) * np.asarray(per_token, dtype=float), np.inf)


def cache_split(hw: HardwareProfile, free_bytes, state_bytes, per_token,
                pools=1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes the KV pool gets, most sequences the engine admits, bytes a sequence holds there
    beside its tokens) of cache memory ``free_bytes``: ``state_pool_split``'s pool and cap, and per
    sequence its part-filled last page (``page_waste_bytes``) plus its recurrent state where that
    stays in the KV pool (no state pool of its own). ``free_bytes`` spans ``pools`` KV pools
    (attention replicas) of ``per_token`` bytes a token: a launch's token cap (``pool_tokens``)
    holds each to that many tokens; an engine that allocates the cap as given
    (``pool_allocated_tokens``) fails to start where it exceeds that memory, and its pool is then
    0. The one place every evaluator sizes pools from."""
    kv, cap = state_pool_split(hw, free_bytes, state_bytes)
    pools = np.asarray(pools, dtype=float)
    kv = np.minimum(kv, _capped_bytes(pool_tokens(hw) * pools, per_token))
    allocated = pool_allocated_tokens(hw) * pools * np.asarray(per_token, dtype=float)
    kv = np.where(allocated > np.maximum(kv, 0) * (1 + 1e-12), 0.0, kv)
    beside = page_waste_bytes(hw, per_token) + np.where(np.isfinite(cap), 0.0, np.asarray(state_bytes, dtype=float))
    return kv, cap, beside


def free_kv_bytes_device(model: ModelSpec, hw: HardwareProfile, layout: Layout, dtypes: DTypes,
                         spec: Speculation | None = None) -> np.ndarray:
    """Device memory left for the KV cache: capacity minus weights (with ``spec``'s draft's),
    workspace and the engine's reserve (may be negative: the model does not fit)."""
    dies = hw.dies_per_device
    hw, layout = on_dies(hw, layout)                       # one rank's, times the package's ranks
    weights = (weight_bytes_device(_stored_ops(model, layout), layout, dtypes)
               + draft_weight_bytes_device(model, layout, dtypes, spec))
    act = workspace_bytes(model, layout, dtypes)
    work = act + startup_bytes(hw)
    comm = comm_buffer_bytes(hw, layout)
    return dies * (hw.memory.capacity.value - weights - work - comm
                   - reserve_beside_buffers(hw, weights, work, comm, layout, spec, act))


def _stored_ops(model: ModelSpec, layout: Layout) -> list[Op]:
    """The operators whose ``params`` (and names, kinds, counts) ``weight_bytes_device`` reads: they
    depend on the model and layout only, not on the formats, so a search that meets the same
    layouts again (another dtype or hardware) reuses them (``_STORED``, which holds the model so
    its id is not reused)."""
    degrees = [np.asarray(x) for x in (layout.tp, layout.ep, layout.pp)]     # shapes as given (0-d too)
    key = (id(model), *((x.shape, x.dtype.str, np.ascontiguousarray(x).tobytes()) for x in degrees))
    held = _STORED.get(key)
    if held is not None and held[0] is model:
        return held[1]
    ops = layer_ops(model, layout, Step.of(1, 1, 0), DTypes())
    if len(_STORED) >= 64:
        _STORED.clear()
    _STORED[key] = (model, ops)
    return ops


_STORED: dict[tuple, tuple[ModelSpec, list[Op]]] = {}


@dataclass(frozen=True)
class MemoryUse:
    """Bytes per device (arrays)."""

    capacity: np.ndarray
    reserved: np.ndarray
    weights: np.ndarray
    workspace: np.ndarray
    kv_cache: np.ndarray
    kv_per_sequence: np.ndarray   # bytes one more sequence of the instance adds to a device
    comm_buffers: np.ndarray      # collective communicators' own buffers (``comm_buffer_bytes``)
    state_pool: np.ndarray | float = 0.0   # recurrent-state slots of an engine that pools them apart
    seq_cap: np.ndarray | float = np.inf   # sequences (whole instance) those slots admit
    startup: np.ndarray | float = 0.0      # taken before the engine loads (``startup_bytes``)
    kv_pool: np.ndarray | float = np.inf   # most KV bytes the launch's token cap lets the pool hold
    kv_per_token: np.ndarray | float = 0.0  # bytes one token of an attention replica's pool takes on a device
    kv_pool_allocated: np.ndarray | float = 0.0  # bytes of pool the launch makes the engine allocate whatever
    #                                              memory holds (``pool_allocated_tokens``: vLLM's block override)

    def of_package(self, dies: int) -> MemoryUse:
        """A package's memory from one of its ``dies`` ranks' (identical dies hold equal shares;
        the largest batch is unchanged)."""
        if dies == 1:
            return self
        return MemoryUse(*(getattr(self, f.name) * (1 if f.name == "seq_cap" else dies) for f in fields(self)))

    @property
    def used(self) -> np.ndarray:
        return (self.startup + self.reserved + self.weights + self.workspace + self.comm_buffers + self.state_pool
                + self.kv_cache)

    @property
    def fits(self) -> np.ndarray:
        """The batch's memory fits, and (where the engine pools states apart) its sequences have
        state slots: ``kv_cache / kv_per_sequence`` is the batch."""
        ok = ((self.used <= self.capacity) & (self.kv_cache <= self.kv_pool * (1 + 1e-12))
              & (self.kv_pool_allocated <= np.maximum(self.kv_free, 0) * (1 + 1e-12)))
        if np.all(np.isinf(self.seq_cap)):
            return ok
        return ok & (self.kv_cache <= self.seq_cap * self.kv_per_sequence * (1 + 1e-12))

    @property
    def max_batch(self) -> np.ndarray:
        """Largest number of sequences (whole instance) whose KV fits beside weights and workspace
        (and the engine's state slots and its launch's KV token cap, which cap it too)."""
        return np.minimum(np.floor(self._kv_room / self.kv_per_sequence), self.seq_cap)

    @property
    def pool_tokens(self) -> np.ndarray:
        """Tokens one attention replica's KV pool holds: what the cache memory leaves beside the
        state slots, or the launch's cap where that is smaller (0 where a token takes no KV)."""
        per = np.asarray(self.kv_per_token, dtype=float)
        return np.floor(self._kv_room / np.where(per > 0, per, np.inf))

    @property
    def kv_free(self) -> np.ndarray:
        """Bytes the KV pool could take on a device: what everything else leaves."""
        return (self.capacity - self.startup - self.reserved - self.weights - self.workspace - self.comm_buffers
                - self.state_pool)

    @property
    def _kv_room(self) -> np.ndarray:
        """Bytes the KV pool may take on a device: what the rest leaves, held to the launch's cap."""
        return np.maximum(np.minimum(self.kv_free, self.kv_pool), 0)


def memory_use(model: ModelSpec, hw: HardwareProfile, layout: Layout, ops: list[Op], dtypes: DTypes,
               batch, context_len, spec: Speculation | None = None) -> MemoryUse:
    """Memory of one device serving ``batch`` sequences (whole instance) of ``context_len`` tokens
    (weights with ``spec``'s draft's)."""
    batch = np.asarray(batch, dtype=float)
    dp = layout.attention_dp
    per_token = kv_bytes_per_token_device(model, layout, dtypes.kv)
    state = state_bytes_per_sequence_device(model, layout, dtypes.kv,
                                            state_dtype=engine_state_dtype(model, hw.efficiency))
    cap = np.full(np.broadcast_shapes(np.shape(per_token), np.shape(context_len), np.shape(state)),
                  hw.memory.capacity.value)
    workspace = workspace_bytes(model, layout, dtypes) + 0 * cap
    comm = comm_buffer_bytes(hw, layout) + 0 * cap
    weights = (weight_bytes_device(ops, layout, dtypes) + draft_weight_bytes_device(model, layout, dtypes, spec)
               + 0 * cap)
    startup = startup_bytes(hw) + 0 * cap
    reserved = reserve_beside_buffers(hw, weights, workspace + startup, comm, layout, spec, workspace) + 0 * cap
    # an engine with a state pool (SGLang) carves whole state slots out of the cache memory first:
    # a sequence then adds only its KV (and part-filled page), and the slots cap the batch
    free = cap - startup - reserved - weights - workspace - comm
    kv_left, per_device_cap = state_pool_split(hw, free, state)
    beside = cache_split(hw, free, state, per_token)[2]
    per_seq_dev = per_token * np.asarray(context_len, dtype=float) + beside
    return MemoryUse(
        capacity=cap,
        reserved=reserved,
        weights=weights,
        workspace=workspace,
        kv_cache=batch / dp * per_seq_dev,
        kv_per_sequence=per_seq_dev / dp,
        comm_buffers=comm,
        state_pool=free - kv_left,
        seq_cap=per_device_cap * dp,
        startup=startup,
        kv_pool=_capped_bytes(pool_tokens(hw), per_token) + 0 * cap,   # one pool's share on each device
        kv_per_token=per_token + 0 * cap,
        kv_pool_allocated=pool_allocated_tokens(hw) * per_token + 0 * cap,
    )


def kv_cache_bytes_per_token(model: ModelSpec, kv_dtype: DType | str = DType.bf16) -> int:
    """KV-cache bytes one token adds across all layers of one sequence (no parallelism):
    GQA ``layers x 2 x kv_heads x head_dim x bytes``; MLA ``layers x (kv_lora + rope) x bytes``.
    Linear-attention and windowed layers add nothing per token at long context (their state is
    bounded per sequence: ``state_bytes_per_sequence_device``)."""
    per = kv_bytes_per_token_device(model, Layout.of(), DType(kv_dtype))
    return int(round(float(per)))

