"""``estimate``: TTFT, TPOT and throughput of one instance serving one batch, no queueing.

The batch's prompts are prefilled together (TTFT = that step's time), then decoded together for
``output_len`` tokens. The decode step time is affine in the context length while the bound does
not change, so its mean over the output is taken with Simpson's rule at the first, middle and
last context length (closed form across tokens, no per-token loop).

With multi-token prediction (``Speculation``: ``k`` draft tokens per step, each accepted with
probability ``p`` given its predecessors were), a decode step runs the ``k`` draft steps of the MTP
module and verifies ``1 + k`` tokens per sequence in one pass of the main model; it yields
``(1 - p^(k+1)) / (1 - p)`` tokens per sequence on average, and TPOT is the step time over that.

With pipeline parallelism (pp > 1): prefill streams the prompts as ``batch`` micro-batches,
``TTFT = (batch + pp - 1) / pp x t(one prompt, all layers)``; decode keeps ``pp`` micro-batches
of ``batch / pp`` sequences in flight, so one token of every sequence takes ``t(batch / pp, all
layers)`` plus ``pp`` activation hand-offs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import PrivateAttr

from planner.catalog.bands import Banded, band_fields
from planner.catalog.draft import DraftSpec
from planner.catalog.draft import draft as get_draft
from planner.catalog.dtypes import DType
from planner.catalog.frameworks import as_run
from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.catalog.model_catalog import model as get_model
from planner.checks import check_context
from planner.errors import InputError
from planner.frozen import Frozen
from planner.perf.comm import collective_time
from planner.perf.measured import batch_phase_times, table_for
from planner.perf.memory import (
    MemoryUse,
    engine_fraction,
    exact_pool_problem,
    memory_use,
    picks_own_fraction,
    pool_tokens,
    room_tokens,
)
from planner.perf.ops import DTypes, Step, engine_state_dtype, layer_ops, mtp_draft_ops, scalar_zero, states_format
from planner.perf.parallel import Layout, check_layout, die_layout_problems, dp_ranks, on_dies
from planner.perf.regime import dominant_bound
from planner.perf.roofline import StepTime, build_step, explain_op, step_time
from planner.perf.speculation import NO_SPECULATION, Speculation

_SIMPSON = ((0.0, 1 / 6), (0.5, 4 / 6), (1.0, 1 / 6))


def _first(a) -> float:
    """The scalar of a one-candidate array."""
    return float(np.ravel(a)[0])


@dataclass(frozen=True)
class PhaseTimes:
    """Vectorized result of ``evaluate`` (arrays over candidates)."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    prefill: StepTime
    decode: StepTime          # at the middle context length
    memory: MemoryUse
    output_len: np.ndarray

    @property
    def e2e_s(self) -> np.ndarray:
        return self.ttft_s + (self.output_len - 1) * self.tpot_s


def resolve_dtypes(model: ModelSpec, weight_dtype: str | DType | None, kv_dtype: str | DType | None) -> DTypes:
    try:
        w = DType(weight_dtype) if weight_dtype is not None else DType.bf16
        kv = DType(kv_dtype) if kv_dtype is not None else (DType.bf16 if w.bytes < 2 else w)
    except ValueError as e:
        raise InputError(f"unknown dtype: {e}; known: {', '.join(d.value for d in DType)}") from None
    if kv.bytes < 1:
        raise InputError(f"kv_dtype {kv.value} is not supported (use bf16, fp16, fp8 or int8)")
    return DTypes(weight=w, kv=kv)


def _pipeline_p2p(hw: HardwareProfile, model: ModelSpec, lay: Layout, tokens, dtypes: DTypes) -> np.ndarray:
    payload = np.asarray(tokens, dtype=float) / lay.attention_dp * model.hidden_size * dtypes.act.bytes
    return np.where(lay.pp > 1, collective_time(hw, "p2p", payload, lay.devices), 0.0)


def evaluate(model: ModelSpec, hw: HardwareProfile, lay: Layout, batch, input_len, output_len,
             dtypes: DTypes, spec: Speculation = NO_SPECULATION) -> PhaseTimes:
    """TTFT, TPOT and memory for arrays of candidates (no validation; see ``estimate``). On a
    multi-die package the steps are timed on one die of the layout over dies (``on_dies``), and
    the memory is the package's (its dies together)."""
    batch, input_len, output_len = (np.asarray(x, dtype=float) for x in (batch, input_len, output_len))
    dies = hw.dies_per_device
    hw, lay = on_dies(hw, lay)
    pp = lay.pp
    # prefill: all prompts in one step (pp == 1) or streamed one prompt per micro-batch
    mb = np.where(pp > 1, 1.0, batch)
    pre = step_time(model, hw, lay, Step.of(mb, input_len, 0.0, prompt=True), dtypes)
    fill = np.where(pp > 1, (batch + pp - 1) / pp, 1.0)
    ttft = (pre.layers_s * fill + pre.overhead_s + (pp - 1) * _pipeline_p2p(hw, model, lay, input_len, dtypes)
            + hw.efficiency.request_overhead.value)
    # decode: Simpson over the context length, pp micro-batches of batch/pp sequences
    dec_b, k = batch / pp, spec.draft_tokens
    tpot, mid = 0.0, None
    for frac, w in _SIMPSON:
        ctx = input_len + frac * np.maximum(output_len - 1, 0)
        st = build_step(hw, _decode_ops(model, hw, lay, dtypes, spec, dec_b, ctx), dtypes, lay, dec_b)
        tpot = tpot + w * st.total_s
        mid = st if frac == 0.5 else mid
    tpot = (tpot + pp * _pipeline_p2p(hw, model, lay, dec_b * (1 + k), dtypes)) / spec.tokens_per_step
    ops = layer_ops(model, lay, Step.of(batch, 1.0, input_len), dtypes)
    mem = memory_use(model, hw, lay, ops, dtypes, batch, input_len + output_len, spec).of_package(dies)
    if table_for(hw.name) is not None:
        ttft, tpot = _measured(model, hw, lay, dtypes, spec, batch, input_len, output_len, ttft, tpot)
    return PhaseTimes(ttft, tpot, pre, mid, mem, output_len)


def _decode_ops(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, spec: Speculation, n,
                ctx) -> list:
    """Operators of one decode step of ``n`` sequences at context ``ctx``: the target verifying
    ``1 + k`` tokens of each and the ``k`` draft passes, as ``hw``'s engine runs them (its MoE
    all-to-all backend and shared-expert placement, its draft-extend pass)."""
    eff, k = hw.efficiency, spec.draft_tokens
    return (layer_ops(model, lay, Step.of(n, 1.0 + k, ctx), dtypes, eff.moe_a2a, eff.shared_expert_ranks,
                      engine_state_dtype(model, eff))
            + mtp_draft_ops(model, lay, Step.of(n, 1.0, ctx), dtypes, passes=k, extend=eff.draft_extend,
                            draft=spec.draft, a2a=eff.moe_a2a, shared_ranks=eff.shared_expert_ranks))


def _measured(model, hw, lay, dtypes, spec, batch, input_len, output_len, ttft, tpot):
    """TTFT and TPOT from the measured step-time table in use for ``hw`` (``perf.measured``)."""
    table, k = table_for(hw.name), spec.draft_tokens

    def roof_pre(b, t):
        return step_time(model, hw, lay, Step.of(b, t, 0.0, prompt=True), dtypes).total_s

    def roof_dec(n, ctx):
        return build_step(hw, _decode_ops(model, hw, lay, dtypes, spec, n, ctx), dtypes, lay, n).total_s

    match = (lay.pp == 1) & ((lay.tp == table.tp) if table.tp else True)
    return batch_phase_times(table, match, batch, input_len, output_len, 1.0 + k, spec.tokens_per_step,
                             roof_dec, roof_pre, ttft, tpot, _SIMPSON)


class PhaseEstimate(Frozen):
    time_s: float
    bound: str
    flops_per_device: float
    bytes_per_device: float
    comm_s: float


class MemoryEstimate(Frozen):
    """Bytes per device."""

    capacity_bytes: float
    reserved_bytes: float
    weights_bytes: float
    kv_cache_bytes: float
    workspace_bytes: float
    used_bytes: float
    max_batch: int
    comm_buffer_bytes: float = 0.0     # collective communicators' buffers (Ascend HCCL)
    comm_buffers_in_reserve: bool = False   # created after the KV pool is sized: held in the engine's reserve
    state_pool_bytes: float = 0.0      # recurrent-state slots an engine pools apart (SGLang's mamba pool)
    state_slot_cap: int | None = None  # sequences (whole instance) those slots admit; None: no such pool
    startup_bytes: float = 0.0         # taken before the engine loads: driver share and runtime context
    memory_fraction: float = 0.0       # the engine's memory setting in effect (memory.engine_fraction)
    fraction_auto: bool = False        # the engine picked it itself for this device and layout (SGLang)
    fraction_of: str = ""              # what it is a fraction of: "total" memory, or what weights leave ("free")
    kv_pool_tokens: int | None = None  # the launch's cap on each KV pool's tokens; None: memory alone sizes it
    pool_tokens: int = 0               # tokens one attention replica's KV pool holds (memory's, or the cap)


class Estimate(Banded):
    """One instance, one batch, no queueing (``planner.estimate``)."""

    model: str
    hardware: str
    framework: str = ""
    tp: int
    pp: int
    ep: int
    accelerators: int
    batch: int
    input_len: int
    output_len: int
    weight_dtype: str
    kv_dtype: str
    mtp_tokens: int = 0
    mtp_acceptance: float = 0.0
    draft: str | None = None          # the EAGLE-3 draft model (catalog name or config.json); None: MTP module
    state_dtype: str | None = None    # linear-attention recurrent state format (None: the model has none)
    cp: int = 1                       # prefill context-parallel over cp instances (ring attention)
    ttft_s: float
    tpot_s: float
    e2e_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    fits: bool
    memory: MemoryEstimate
    prefill: PhaseEstimate
    decode: PhaseEstimate
    usd_per_h: float | None
    usd_per_million_output_tokens: float | None
    infeasible_reason: str | None = None
    # the model, hardware (with its framework applied) and draft the estimate was made with, so the
    # breakdown re-evaluates them even where they came from local files the names do not resolve to
    _inputs: tuple[ModelSpec, HardwareProfile, DraftSpec | None] | None = PrivateAttr(default=None)
    suggestions: list[str] = []
    notes: list[str] = []             # what the engine does with this deployment beyond the numbers


def _start_note(m: ModelSpec, hw: HardwareProfile, pool: int) -> list[str]:
    """Where the engine refuses to start because one replica's KV pool cannot hold a request of
    its default maximum length, the model's context (``MemoryPolicy.start_needs_max_len``: vLLM),
    say so and what launch setting serves anyway."""
    rule = hw.memory_policy.start_needs_max_len if hw.memory_policy is not None else None
    if rule is None or not rule.value or m.max_context is None or m.max_context <= pool or pool <= 0:
        return []          # (no pool at all: the answer says what does not fit)
    return [f"{hw.framework or 'the engine'} starts only if one attention replica's KV pool holds a request of its "
            f"maximum model length, by default the model's context ({m.max_context:,} tokens); this pool holds "
            f"{pool:,}: launch with --max-model-len {pool} or less (or give the pool more memory)"]


def _phase(st: StepTime, time_s: float, steps_per_device: float = 1.0) -> PhaseEstimate:
    """The phase of step ``st`` taking ``time_s``: its bound (the operators' or, where the engine's
    host time exceeds each of theirs, ``overhead``: ``regime.dominant_bound``), and FLOPs and bytes
    per device over ``steps_per_device`` of its steps (a pipeline's prefill step is one prompt
    through every layer; each device runs ``batch / pp`` of them)."""
    flops = sum(float(np.ravel(t.op.count * np.asarray(t.op.flops))[0]) for t in st.ops)
    nbytes = sum(float(np.ravel(t.op.count * np.asarray(t.op.mem_bytes))[0]) for t in st.ops)
    comm = sum(float(np.ravel(t.time_s)[0]) for t in st.ops if t.op.kind.value.startswith("all_"))
    return PhaseEstimate(time_s=time_s, bound=str(np.ravel(dominant_bound(st))[0]),
                         flops_per_device=flops * steps_per_device, bytes_per_device=nbytes * steps_per_device,
                         comm_s=comm)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def estimate(model: str | ModelSpec, hardware: str | HardwareProfile, *, tp: int = 1, pp: int = 1,
             ep: int = 1, batch: int = 1, input_len: int, output_len: int,
             weight_dtype: str | DType = "bf16", kv_dtype: str | DType | None = None,
             mtp_tokens: int = 0, mtp_acceptance: float = 0.0, framework: str | None = None,
             cp: int = 1, draft: str | DraftSpec | None = None, state_dtype: str | DType | None = None,
             memory_fraction: float | None = None, kv_pool_tokens: int | None = None) -> Estimate:
    """Roofline estimate of one instance serving one batch (see module docstring); ``mtp_tokens``
    draft tokens per decode step, each accepted with probability ``mtp_acceptance``; ``framework``
    names the serving engine whose efficiencies apply (default vLLM for the device's vendor,
    ``frameworks.default_framework``, unless ``hardware`` is a profile a framework was already
    applied to); ``cp`` splits the prefill over that many instances of the layout (context parallelism, ring attention:
    ``perf.context_parallel``), which the accelerator count and price include; TPOT and memory
    stay one instance's (the decode runs on one of them); ``draft`` the EAGLE-3 draft model that
    proposes the draft tokens (a ``catalog.draft`` name or an EAGLE-3 ``config.json``; default the
    model's own MTP module); ``state_dtype`` the format linear-attention recurrent states are kept
    in (SGLang ``--mamba-ssm-dtype``, vLLM ``--mamba-ssm-cache-dtype``; default the engine's);
    ``memory_fraction`` the engine's memory setting as given on its command line
    (``frameworks.with_memory_fraction``; default the framework entry's); ``kv_pool_tokens`` the
    cap its launch puts on each KV pool's tokens (``frameworks.with_kv_pool_tokens``)."""
    m, hw = get_model(model), as_run(hardware, framework, state_dtype, memory_fraction, kv_pool_tokens)
    tp, pp, ep, batch, cp = (_positive_int(n, v) for n, v in (("tp", tp), ("pp", pp), ("ep", ep), ("batch", batch),
                                                               ("cp", cp)))
    input_len, output_len = _positive_int("input_len", input_len), _positive_int("output_len", output_len)
    check_context(m, input_len + output_len)
    dtypes = resolve_dtypes(m, weight_dtype, kv_dtype)
    lay = Layout.of(tp, ep, pp)
    check_layout(m, lay, hw)
    if draft is not None and not mtp_tokens:
        raise InputError("a draft model without draft tokens would be ignored; give the draft tokens per decode "
                         "step (--mtp-tokens) and their acceptance (--mtp-acceptance)")
    spec = Speculation(mtp_tokens, mtp_acceptance, draft=get_draft(draft))
    if spec.draft is not None:
        spec.draft.check_target(m)
    r = evaluate(m, hw, lay, batch, input_len, output_len, dtypes, spec)
    f = _first
    ttft, tpot = f(r.ttft_s), f(r.tpot_s)
    prefill = _phase(r.prefill, ttft, batch / pp if pp > 1 else 1.0)
    if cp > 1:
        ttft, prefill = _cp_ttft(m, hw, lay, dtypes, batch, input_len, cp)
    e2e = ttft + (output_len - 1) * tpot
    devices = int(np.ravel(lay.devices)[0]) * cp
    mem = r.memory
    fits = bool(np.ravel(mem.fits)[0])
    usd = devices * hw.price.rent.value if hw.price.rent else None
    out_tps = batch * output_len / e2e
    reason, suggestions = (None, []) if fits else _why_not(m, hw, lay, mem, dtypes, batch, input_len, output_len,
                                                           spec)
    bounds = phase_bounds(r.prefill, r.decode, ttft, (output_len - 1) * tpot)
    e = Estimate(
        model=m.name, hardware=hw.name, framework=hw.framework or "", tp=tp, pp=pp, ep=ep, accelerators=devices,
        batch=batch,
        input_len=input_len, output_len=output_len, weight_dtype=dtypes.weight.value, kv_dtype=dtypes.kv.value,
        mtp_tokens=spec.draft_tokens, mtp_acceptance=spec.acceptance,
        state_dtype=getattr(states_format(m, hw.efficiency), "value", None),
        draft=None if draft is None else (draft.name if isinstance(draft, DraftSpec) else str(draft)),
        cp=cp, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, output_tokens_per_s=out_tps,
        total_tokens_per_s=batch * (input_len + output_len) / e2e, fits=fits,
        memory=MemoryEstimate(
            capacity_bytes=f(mem.capacity), reserved_bytes=f(mem.reserved), weights_bytes=f(mem.weights),
            kv_cache_bytes=f(mem.kv_cache), workspace_bytes=f(mem.workspace), used_bytes=f(mem.used),
            max_batch=int(f(mem.max_batch)), comm_buffer_bytes=f(mem.comm_buffers),
            comm_buffers_in_reserve=getattr(hw.memory_policy.comm_buffers, "value", None) == "reserve",
            state_pool_bytes=f(mem.state_pool), startup_bytes=f(mem.startup),
            state_slot_cap=int(f(mem.seq_cap)) if np.isfinite(f(mem.seq_cap)) else None,
            memory_fraction=float(np.ravel(engine_fraction(*on_dies(hw, lay), spec))[0]),
            kv_pool_tokens=int(pool_tokens(hw)) if np.isfinite(pool_tokens(hw)) else None,
            pool_tokens=int(f(mem.pool_tokens)),
            fraction_auto=picks_own_fraction(hw),
            fraction_of="total" if hw.memory_policy.kind == "total_fraction" else "free"),
        prefill=prefill, decode=_phase(r.decode, tpot),
        usd_per_h=usd, usd_per_million_output_tokens=(usd / 3600 / out_tps * 1e6) if usd and out_tps > 0 else None,
        infeasible_reason=reason, suggestions=suggestions, notes=_start_note(m, hw, int(f(mem.pool_tokens))),
        regime_bounds=bounds,
        **band_fields(hw.vendor, hw.framework, bounds, ttft, tpot, out_tps),
    )
    e._inputs = (m, hw, spec.draft)
    return e


def _cp_ttft(m: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, batch: int, input_len: int,
             cp: int) -> tuple[float, PhaseEstimate]:
    """TTFT of ``batch`` prompts prefilled over ``cp`` context-parallel ranks (one step on each),
    and the prefill phase of one rank (its comm time includes the ring's exposed part)."""
    from planner.perf.context_parallel import cp_prefill

    c = cp_prefill(m, hw, lay, dtypes, input_len, cp, batch)
    ttft = _first(c.time_s + (lay.pp - 1) * _pipeline_p2p(hw, m, lay, batch * input_len / cp, dtypes)
                  + hw.efficiency.request_overhead.value)
    phase = _phase(c.step, ttft)
    return ttft, phase.model_copy(update={"comm_s": phase.comm_s + _first(c.exposed_ring_s)})


def phase_bounds(prefill: StepTime, decode: StepTime, prefill_s: float, decode_s: float) -> dict[str, str]:
    """Error-band bound of each phase of one candidate; ``serving`` takes the bound of whichever
    phase takes more of a request's time (``prefill_s`` vs ``decode_s``)."""
    out = {"prefill": str(np.ravel(dominant_bound(prefill))[0]), "decode": str(np.ravel(dominant_bound(decode))[0])}
    out["serving"] = out["prefill"] if prefill_s >= decode_s else out["decode"]
    return out


def _why_not(m: ModelSpec, hw: HardwareProfile, lay: Layout, mem: MemoryUse, dtypes: DTypes,
             batch: int, input_len: int, output_len: int,
             spec: Speculation = NO_SPECULATION) -> tuple[str, list[str]]:
    """Say how much memory is missing and which nearby deployments would fit."""
    def f(a) -> float:
        return _first(a) / 2**30

    need, cap = f(mem.used), f(mem.capacity)
    reason = (f"needs {need:.1f} GiB per device (weights {f(mem.weights):.1f} GiB, KV cache {f(mem.kv_cache):.1f} GiB, "
              f"workspace {f(mem.workspace):.1f} GiB, "
              + (f"communicator buffers {f(mem.comm_buffers):.1f} GiB, " if f(mem.comm_buffers) else "")
              + (f"recurrent-state slots {f(mem.state_pool):.1f} GiB, " if f(mem.state_pool) else "")
              + (f"runtime at start-up {f(mem.startup):.1f} GiB, " if f(mem.startup) else "")
              + f"{hw.framework or 'engine'} reserve {f(mem.reserved):.1f} GiB) "
              f"but {hw.name} has {cap:.1f} GiB")
    exact = exact_pool_problem(hw, _first(mem.kv_free), _first(mem.kv_per_token))
    if need <= cap and exact:
        return exact, [f"--kv-pool-tokens {room_tokens(_first(mem.kv_free), _first(mem.kv_per_token))}"]
    limit = pool_tokens(hw)
    over_cap = _first(mem.kv_cache) > _first(mem.kv_pool) * (1 + 1e-12)
    if need <= cap and over_cap:
        per_replica = -(-batch // dp_ranks(hw, lay)) * (input_len + output_len)
        reason = (f"the launch caps each KV pool at {limit:,.0f} tokens (--kv-pool-tokens) but "
                  + ("one sequence puts " if batch == 1 else f"the batch of {batch:,} puts ")
                  + f"{per_replica:,} tokens in an attention replica's; memory would hold them")
        return reason, [f"--kv-pool-tokens {per_replica}"]
    if need <= cap and np.isfinite(_first(mem.seq_cap)):
        reason = (f"the {hw.framework or 'engine'} recurrent-state pool holds {int(_first(mem.seq_cap))} requests' "
                  f"states ({f(mem.state_pool):.1f} GiB per device in whole slots, its share of the cache memory) "
                  f"but the batch has {batch} sequences")
    tp0, ep0, pp0 = (int(np.ravel(x)[0]) for x in (lay.tp, lay.ep, lay.pp))
    narrower = _narrower_weights(hw, dtypes.weight)
    # fewest devices first; on as many devices, tensor before pipeline parallelism (it also cuts the
    # step time), the weights' format before a narrower one
    options = sorted({(tp, ep0, pp, w) for tp in (tp0, 2 * tp0, 4 * tp0, 8 * tp0) for pp in (pp0, 2 * pp0, 4 * pp0)
                      for w in (dtypes.weight, narrower) if w is not None},
                     key=lambda o: (o[0] * o[2], o[2], o[3] != dtypes.weight))
    seen, tips, smaller = set(), [], (0, "")     # smaller: the most sequences a nearby layout holds
    fitting_layouts = set()
    for tp, ep, pp, w in options:
        if (tp, ep, pp, w) in seen or (tp, ep, pp, w) == (tp0, ep0, pp0, dtypes.weight) \
                or (tp, ep, pp) in fitting_layouts:      # fits already in the weights' own format
            continue
        seen.add((tp, ep, pp, w))
        cand = Layout.of(tp, ep, pp)
        if die_layout_problems(m, hw, cand)[()] or max(tp, ep) > hw.domain_size:
            continue
        dt = DTypes(weight=w, kv=dtypes.kv)
        rank_hw, ranks = on_dies(hw, cand)
        ops = layer_ops(m, ranks, Step.of(batch, 1.0, input_len), dt)
        use = memory_use(m, rank_hw, ranks, ops, dt, batch, input_len + output_len, spec)
        flags = (f"--tp {tp}" + (f" --ep {ep}" if ep > 1 else "") + (f" --pp {pp}" if pp > 1 else "")
                 + (f" --weight-dtype {w.value}" if w != dtypes.weight else ""))
        if bool(np.ravel(use.fits)[0]):
            tips.append(flags)
            fitting_layouts.add((tp, ep, pp))
        elif int(np.ravel(use.max_batch)[0]) > smaller[0]:
            smaller = (int(np.ravel(use.max_batch)[0]), flags)
        if len(tips) >= 3:
            break
    mb = int(np.ravel(mem.max_batch)[0])
    if mb >= 1:
        tips.append(f"--batch {mb} (the largest batch that fits this layout)")
    elif not tips and smaller[0] >= 1:      # no nearby layout holds the batch: the one holding the most
        tips.append(f"{smaller[1]} --batch {smaller[0]} (no nearby layout holds {batch} sequences of "
                    f"{input_len + output_len:,} tokens; this one holds the most)")
    return reason, tips


def _narrower_weights(hw: HardwareProfile, weight: DType) -> DType | None:
    """The next narrower weight format to suggest: from 16 bits the 8-bit one the device's matrix
    units run (FP8 where it has an FP8 peak, else INT8: A100, Ascend), from 8 bits 4-bit INT4
    (AWQ / GPTQ / W4A8 checkpoints); None below."""
    if weight.bytes >= 2:
        native = {hw.compute_dtype(w) for w in (DType.fp8, DType.int8)}
        return DType.int8 if DType.int8 in native and DType.fp8 not in native else DType.fp8
    return DType.int4 if weight.bytes >= 1 else None


def estimate_inputs(e: Estimate) -> tuple[ModelSpec, HardwareProfile, DraftSpec | None]:
    """The model, hardware (its framework applied) and draft ``e`` was made with: those ``estimate``
    resolved, local files included; for an Estimate rebuilt from its JSON, its names looked up."""
    if e._inputs is not None:
        return e._inputs
    hw = as_run(e.hardware, e.framework or None, e.state_dtype, e.memory.memory_fraction or None,
                e.memory.kv_pool_tokens)
    return get_model(e.model), hw, get_draft(e.draft)


def operator_breakdown(e: Estimate) -> list[dict]:
    """Per-operator rows (phase, op, layers, time, FLOPs, bytes, bound) behind an ``Estimate``:
    the prefill step and the decode step at the middle context length, per device (with MTP, the
    verifying pass of the main model plus the ``mtp_*`` draft passes; TPOT is that step over the
    tokens it yields)."""
    m, hw, drafted = estimate_inputs(e)
    dtypes = resolve_dtypes(m, e.weight_dtype, e.kv_dtype)
    lay = Layout.of(e.tp, e.ep, e.pp)
    r = evaluate(m, hw, lay, e.batch, e.input_len, e.output_len, dtypes,
                 Speculation(e.mtp_tokens, e.mtp_acceptance, draft=drafted))
    rows = []
    eff, rank_hw = hw.efficiency, hw.per_die()    # the steps are one rank's (one die of a package)
    for phase, st in (("prefill", r.prefill), ("decode", r.decode)):
        for t in st.ops:
            f = _first
            ideal, how, source = explain_op(rank_hw, t, dtypes)
            rows.append(dict(phase=phase, op=t.op.name, kind=t.op.kind.value, layers=t.op.count,
                             time_s=f(t.time_s), roofline_s=f(t.op.count * ideal), efficiency=how, source=source,
                             flops=f(t.op.count * np.asarray(t.op.flops)),
                             bytes=f(t.op.count * np.asarray(t.op.mem_bytes)),
                             comm_bytes=f(t.op.count * np.asarray(t.op.comm_bytes)), bound=str(np.ravel(t.bound)[0])))
        if not scalar_zero(st.floor_s):
            # an eagerly launched step: the host's dispatch beyond the device's time, if it is behind
            wait = _first(st.host_wait_s)
            n_ops = _first(np.asarray(st.floor_s) / eff.eager_prefill_dispatch.value)
            rows.append(dict(phase=phase, op="eager_dispatch", kind="overhead", layers=1, time_s=wait, roofline_s=0.0,
                             efficiency=f"host launches {n_ops:.0f} operators at "
                                        f"{eff.eager_prefill_dispatch.value * 1e3:g} ms each: "
                                        f"{_first(st.floor_s) * 1e3:.0f} ms against the device's "
                                        f"{_first(st.device_s) * 1e3:.0f} ms ({hw.framework or 'profile'})",
                             source=eff.eager_prefill_dispatch.source, flops=0.0, bytes=0.0, comm_bytes=0.0,
                             bound="overhead"))
        how = (f"{eff.step_overhead.value * 1e3:g} ms per step + {eff.sequence_overhead.value * 1e6:g} us per "
               f"sequence ({hw.framework or 'profile'})")
        rows.append(dict(phase=phase, op="step_overhead", kind="overhead", layers=1, time_s=_first(st.overhead_s),
                         roofline_s=0.0, efficiency=how, source=eff.sequence_overhead.source if phase == "decode"
                         else eff.step_overhead.source, flops=0.0, bytes=0.0, comm_bytes=0.0, bound="overhead"))
    rows.append(dict(phase="prefill", op="request_overhead", kind="overhead", layers=1,
                     time_s=eff.request_overhead.value, roofline_s=0.0, efficiency="per request, in TTFT",
                     source=eff.request_overhead.source, flops=0.0, bytes=0.0, comm_bytes=0.0, bound="overhead"))
    return rows
