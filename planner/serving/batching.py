"""Continuous batching: the time and power of one engine iteration.

Iteration-level scheduling (Orca; vLLM, SGLang, TensorRT-LLM): every iteration runs one decode
token for each running sequence and, with chunked prefill, up to ``max_batched_tokens - decodes``
prompt tokens (Sarathi-Serve). Without chunked prefill, prompts run in their own iterations and
stall the decodes. The iteration's operators are the decode step's and the prefill chunk's,
merged (``perf.ops.merge_ops``): one weight read serves both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.checks import FrameworkChoice, located
from planner.frozen import Frozen
from planner.perf.comm import collective_time
from planner.perf.measured import step_time as measured_step_time
from planner.perf.measured import table_for
from planner.perf.ops import DTypes, Per, Step, engine_state_dtype, layer_ops, merge_ops, mtp_draft_ops, scaled
from planner.perf.parallel import Layout, on_dies
from planner.perf.power import step_power_w
from planner.perf.roofline import build_step, eager_step
from planner.perf.speculation import NO_SPECULATION, Speculation


def with_framework_knobs(data: Any, name: str | None) -> Any:
    """``data`` (an ``Engine`` mapping, or nothing) with the scheduler knobs of framework ``name``
    where it gives none of its own. Anything else - an ``Engine`` already built, no name, a name
    that does not resolve (its own validator says why) - is returned as it is."""
    if not isinstance(name, str) or not (data is None or isinstance(data, dict)):
        return data
    from planner.catalog.frameworks import framework
    from planner.errors import PlannerError

    try:
        knobs = framework(name).engine_knobs()
    except PlannerError:
        return data
    return {**knobs, **(data or {})}


class Engine(Frozen):
    """Serving-engine knobs (defaults: vLLM V1)."""

    framework: FrameworkChoice = Field(
        None, description="serving framework entry (catalog name or YAML path) whose efficiencies, overheads and "
        "scheduler knobs apply: one for every device, or a mapping from a vendor or a hardware name to an entry "
        "(e.g. {nvidia: sglang, mi300x: vllm-rocm-mlperf}; a hardware name before its vendor); default: each "
        "vendor's vLLM (frameworks.DEFAULT_FRAMEWORKS), as for devices a mapping does not name")

    def on(self, hw: HardwareProfile | str) -> Engine:
        """This engine as it runs on device ``hw``: where ``framework`` maps devices to entries, the
        one it names for ``hw`` (``frameworks.framework_for``; none: the vendor's default), whose
        scheduler knobs fill those this engine does not give, as if that name had been given
        alone. An engine with one framework (or none) is the same on every device."""
        if not isinstance(self.framework, dict):
            return self
        from planner.catalog.frameworks import framework_for
        from planner.catalog.hardware import hardware

        given = {name: getattr(self, name) for name in self.model_fields_set if name != "framework"}
        return Engine.model_validate({**given, "framework": framework_for(self.framework, hardware(hw))})

    def profile_on(self, hw: HardwareProfile | str) -> HardwareProfile:
        """Device ``hw`` (a name, YAML path or profile) as this engine runs it: its framework
        entry for that device, its memory setting and its KV-pool cap (``frameworks.as_run``)."""
        from planner.catalog.frameworks import as_run

        return as_run(hw, self.framework, None, self.memory_fraction, self.kv_pool_tokens)

    @model_validator(mode="before")
    @classmethod
    def _framework_knobs(cls, data: Any) -> Any:
        """An engine that names its framework schedules as that framework does: the knobs the
        entry sets (``Framework.engine_knobs``: e.g. SGLang's unmixed prompt iterations,
        TensorRT-LLM's full-length KV reservation) fill the ones not given here."""
        return with_framework_knobs(data, data.get("framework") if isinstance(data, dict) else None)

    chunked_prefill: bool = True
    mixed_prefill: bool = Field(
        True, description="decodes ride in the iterations that run prompt chunks (vLLM V1, TensorRT-LLM); False: "
        "an iteration that runs prompts runs only prompts, up to the token budget, and the sequences decoding on "
        "the replicas that prefill wait for it (SGLang without --enable-mixed-chunk: its scheduler runs a prefill "
        "batch alone whenever one is ready)")
    # bounds far past any engine's (a trillion tokens, a billion sequences), which keep the
    # instance's limits (these times its replicas, up to MAX_DEGREE) inside 64-bit integers
    max_batched_tokens: int = Field(8192, ge=16, le=1 << 40, description="token budget per iteration (prefill + "
                                    "decode)")
    max_num_seqs: int = Field(1024, ge=1, le=1 << 30, description="most sequences decoding at once")
    kv_reservation: Literal["on_demand", "full_length"] = Field(
        "on_demand", description="on_demand: KV pages allocated as tokens are generated, the newest sequence "
        "preempted when the pool overflows (vLLM); full_length: a request is admitted only with KV for its whole "
        "prompt + output reserved, never preempted (TensorRT-LLM's default GUARANTEED_NO_EVICT)")
    limits_scope: Literal["replica", "instance"] = Field(
        "replica", description="what max_num_seqs and max_batched_tokens count under attention data parallelism: "
        "replica = each DP rank's own (vLLM's DP engine cores, TensorRT-LLM's attention DP), instance = the whole "
        "instance's, split evenly over its DP ranks (SGLang --enable-dp-attention divides --max-running-requests "
        "and --chunked-prefill-size by --dp-size)")
    dp_balance: Literal["least_loaded", "round_robin"] = Field(
        "least_loaded", description="how requests are placed on attention data-parallel replicas, each keeping a "
        "request for its lifetime (the simulator tracks them; every MoE layer waits for the replica with the most "
        "decoding sequences): least_loaded = on the one with the fewest unfinished requests (vLLM's API server "
        "balances on each engine's running and waiting queues), round_robin = in turn, whatever their load "
        "(SGLang's default --load-balance-method)")
    prefill_delay_passes: int = Field(
        0, ge=0, description="attention data parallelism: hold a replica's prompts until every replica has one "
        "to prefill, for at most this many forward passes, so the replicas prefill side by side instead of each "
        "stalling the others' decodes alone (SGLang's PrefillDelayer: --enable-prefill-delayer or "
        "SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE, default 30 passes); 0: off")
    simulator: Literal["auto", "python", "numba"] = Field(
        "auto", description="the discrete-event simulator's loop: python (the reference loop), numba (the same "
        "loop compiled; pip install \"planner[fast]\"), auto (numba when it imports, else python); they give the "
        "same numbers")
    mtp_tokens: int = Field(0, ge=0, le=64, description="draft tokens per decode step (multi-token prediction / "
                            "speculative decoding; the draft module is one layer like the model's last + LM head, "
                            "unless draft names a draft model)")
    mtp_acceptance: float = Field(0.0, ge=0, lt=1, description="probability that a draft token is accepted, "
                                  "given its predecessor was")
    draft: str | None = Field(
        None, description="the EAGLE-3 draft model that proposes the draft tokens: a bundled name (e.g. "
        "qwen3-235b-a22b-eagle3; planner/catalog/drafts/) or a local EAGLE-3 config.json (relative to the scenario "
        "file); default: the model's own MTP module (a block like its last layer and its LM head)")
    mtp_acceptance_sd: float | None = Field(
        None, ge=0, lt=0.5, description="standard deviation across requests of a request's own draft acceptance "
        "probability: the simulator gives each request its own tokens per step (their harmonic mean kept at the "
        "engine's) and the analytic TPOT percentiles carry the spread; default: a Beta concentration of 15.7, "
        "which reproduces the per-request spread aiperf's SPEED-Bench run measured (acceptance rate 63.8% +- 16.2 "
        "points; perf.speculation); 0: none")
    memory_fraction: float | None = Field(
        None, gt=0, le=1, description="the engine's memory setting as on its command line, in its own sense: vLLM "
        "--gpu-memory-utilization and SGLang --mem-fraction-static take it of total device memory, TensorRT-LLM "
        "kv_cache_free_gpu_mem_fraction of what weights and activations leave (frameworks.with_memory_fraction); "
        "applies to every machine the scenario runs; default: the framework entry's")
    kv_pool_tokens: int | None = Field(
        None, ge=1, description="the most tokens the engine's KV pool holds, per attention replica, where its "
        "launch caps it: SGLang --max-total-tokens, TensorRT-LLM kv_cache_config.max_tokens, vLLM "
        "--num-gpu-blocks-override x --block-size; the pool is the smaller of this and what memory gives, "
        "except that vLLM allocates it as given, so above memory it is refused (frameworks.with_kv_pool_tokens); "
        "applies to every machine the scenario runs; default: memory alone")
    state_dtype: Literal["fp32", "bf16", "fp16"] | None = Field(
        None, description="format the engine keeps linear-attention (Gated DeltaNet) recurrent states in, as set "
        "on its command line (vLLM --mamba-ssm-cache-dtype, SGLang --mamba-ssm-dtype); beats the checkpoint's "
        "declared one and the framework's default; default: as the framework entry says (SGLang fp32, vLLM the "
        "checkpoint's or the model dtype)")

    def model_as_run(self, model: ModelSpec) -> ModelSpec:
        """``model`` with this engine's recurrent-state format set on it where one is given
        (``ModelSpec.state_dtype_set``, which ``ops.engine_state_dtype`` reads first)."""
        return model if self.state_dtype is None else model.model_copy(update={"state_dtype_set": self.state_dtype})

    @model_validator(mode="after")
    def _acceptance_needs_drafts(self) -> Engine:
        if self.mtp_acceptance and not self.mtp_tokens:
            raise located("mtp_acceptance", "mtp_acceptance without mtp_tokens would be ignored; give mtp_tokens "
                          "(draft tokens per decode step)")
        if self.draft is not None:
            if not self.mtp_tokens:
                raise located("draft", "a draft model without mtp_tokens would be ignored; give mtp_tokens (draft "
                              "tokens per decode step) and mtp_acceptance")
            from planner.catalog.draft import draft as get_draft
            from planner.errors import InputError

            try:
                get_draft(self.draft)
            except InputError as e:
                raise located("draft", str(e)) from None
        if self.mtp_acceptance_sd is not None and not self.mtp_acceptance:
            raise located("mtp_acceptance_sd", "mtp_acceptance_sd without mtp_acceptance would be ignored; give "
                          "mtp_tokens and mtp_acceptance")
        if self.mtp_acceptance_sd:
            from planner.errors import InputError
            from planner.perf.speculation import request_distribution

            try:                                     # solve the per-request distribution now (cached)
                request_distribution(self.mtp_tokens, self.mtp_acceptance, self.mtp_acceptance_sd)
            except InputError as e:
                raise located("mtp_acceptance_sd", str(e)) from None
        return self

    def batch_limits(self, hw: HardwareProfile | None = None) -> tuple[int, int, bool]:
        """(sequences, tokens per iteration, whether that sequence limit is each attention replica's
        whatever ``limits_scope`` says) the engine runs with on ``hw``: the ones given (or set by
        the framework entry's knobs), else the ones the engine picks for that device where the
        launch gives none (``HardwareProfile.engine_defaults``: vLLM 2,048 tokens and 256
        sequences below 70 GiB, SGLang's chunk by GPU memory), else these fields' defaults."""
        if hw is not None and isinstance(self.framework, dict):
            return self.on(hw).batch_limits(hw)
        picked = self.device_picks(hw)
        per_replica = "max_num_seqs" in picked and hw.engine_defaults.seqs_per_replica
        return (picked.get("max_num_seqs", self.max_num_seqs),
                picked.get("max_batched_tokens", self.max_batched_tokens), per_replica)

    def device_picks(self, hw: HardwareProfile | None) -> dict[str, int]:
        """The limits (field: value) this engine takes from ``hw``'s engine defaults because
        neither the launch nor the framework entry's knobs give them."""
        if hw is not None and isinstance(self.framework, dict):
            return self.on(hw).device_picks(hw)
        d = hw.engine_defaults if hw is not None else None
        if d is None:
            return {}
        return {name: getattr(d, name) for name in ("max_num_seqs", "max_batched_tokens")
                if name not in self.model_fields_set and getattr(d, name) is not None}

    def instance_limits(self, dp, hw: HardwareProfile | None = None) -> tuple:
        """(sequences, tokens per iteration) the whole instance admits on ``hw`` (``batch_limits``)
        with ``dp`` attention data-parallel replicas (``limits_scope``)."""
        if hw is not None and isinstance(self.framework, dict):
            return self.on(hw).instance_limits(dp, hw)
        seqs, tokens, per_replica = self.batch_limits(hw)
        k = dp if self.limits_scope == "replica" else 1
        return seqs * (dp if per_replica else k), tokens * k

    def for_device(self, hw: HardwareProfile, dp: int) -> Engine:
        """This engine with the limits it runs with on ``hw`` (``batch_limits``) written out, in its
        own ``limits_scope``, for an instance of ``dp`` attention replicas."""
        if isinstance(self.framework, dict):
            return self.on(hw).for_device(hw, dp)
        # in the instance scope, the instance's limits; in the replica scope, one replica's
        seqs, tokens = self.instance_limits(dp if self.limits_scope == "instance" else 1, hw)
        return self.model_copy(update={"max_num_seqs": int(seqs), "max_batched_tokens": int(tokens)})

    @property
    def speculation(self) -> Speculation:
        from planner.catalog.draft import draft as get_draft

        return Speculation(self.mtp_tokens, self.mtp_acceptance, self.mtp_acceptance_sd, get_draft(self.draft))


@dataclass(frozen=True)
class Iteration:
    time_s: np.ndarray
    power_w: np.ndarray   # per device


def prompt_alone_s(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, tokens) -> np.ndarray:
    """Seconds one instance takes to prefill each prompt of ``tokens`` in an iteration of its own
    (no decodes riding along): a prompt server's service time. Computed once per distinct length."""
    uniq, inv = np.unique(np.asarray(tokens, dtype=float), return_inverse=True)
    return iteration(model, hw, lay, dtypes, 0.0, 16.0, uniq, uniq, power=False).time_s[inv.reshape(np.shape(tokens))]


def iteration(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, n_decode, decode_ctx,
              prefill_tokens, prompt_len, spec: Speculation = NO_SPECULATION, power: bool = True,
              dp_skew=1.0, replica_tokens=np.inf) -> Iteration:
    """One iteration's time and power: the roofline's, or a measured step-time table's where one is
    in use for this hardware (``perf.measured``; power stays the roofline's). ``power=False``: the
    power is not computed (NaN), for callers that only need times. ``dp_skew``: decoding sequences
    on the busiest attention data-parallel replica over the mean (``Step.dp_skew``; the roofline
    only); ``replica_tokens``: the most prompt tokens one such replica takes in the iteration
    (``Step.replica_tokens``)."""
    it = _roofline_iteration(model, hw, lay, dtypes, n_decode, decode_ctx, prefill_tokens, prompt_len, spec, power,
                             dp_skew, replica_tokens)
    table = table_for(hw.name)
    if table is None:
        return it

    def roof_dec(n, ctx):
        return _roofline_iteration(model, hw, lay, dtypes, n, ctx, 0.0, 1.0, spec).time_s

    def roof_pre(batch, tokens):
        return _roofline_iteration(model, hw, lay, dtypes, 0.0, 16.0, batch * tokens, tokens, spec).time_s

    match = (lay.pp == 1) & ((lay.tp == table.tp) if table.tp else True)
    t = measured_step_time(table, match, n_decode, decode_ctx, prefill_tokens, prompt_len, 1.0 + spec.draft_tokens,
                           roof_dec, roof_pre, it.time_s)
    return Iteration(t, it.power_w)


def _roofline_iteration(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes, n_decode, decode_ctx,
                        prefill_tokens, prompt_len, spec: Speculation = NO_SPECULATION,
                        power: bool = True, dp_skew=1.0, replica_tokens=np.inf) -> Iteration:
    """One iteration of ``n_decode`` decoding sequences (mean context ``decode_ctx``) and
    ``prefill_tokens`` prompt tokens of prompts of ``prompt_len`` (arrays broadcast). With pipeline
    parallelism the batch is split in ``pp`` micro-batches that each cross every stage. With
    speculation each decoding sequence verifies ``1 + k`` tokens and runs ``k`` draft passes."""
    hw, lay = on_dies(hw, lay)          # a multi-die package: one die's step (power stays the package's)
    pp, k = lay.pp, spec.draft_tokens
    n = np.asarray(n_decode, float) / pp
    eff = hw.efficiency
    a2a, aside, state = eff.moe_a2a, eff.shared_expert_ranks, engine_state_dtype(model, eff)
    dec = layer_ops(model, lay, Step.lean(n, 1.0 + k, decode_ctx, dp_skew), dtypes, a2a, aside, state)
    pre = layer_ops(model, lay, Step.lean(np.asarray(prefill_tokens, float) / pp / np.asarray(prompt_len, float),
                                          prompt_len, 0.0, prompt=True, replica_tokens=replica_tokens), dtypes, a2a,
                    state=state)
    draft = mtp_draft_ops(model, lay, Step.lean(n, 1.0, decode_ctx, dp_skew), dtypes, passes=k,
                          extend=eff.draft_extend, draft=spec.draft, a2a=a2a, shared_ranks=aside)
    # the prefill operators are temporaries of this call: sums may be written into their arrays
    ops = merge_ops(dec, pre, consume_b=True) + draft
    st = build_step(hw, ops, dtypes, lay, np.asarray(n_decode, float) + np.asarray(prefill_tokens, float) / np.asarray(
        prompt_len, float), eager_step(hw, prefill_tokens, np.asarray(n_decode, float) * (1 + k) + prefill_tokens))
    total = st.total_s
    if np.any(pp > 1):
        decodes = np.asarray(n_decode, float) if k == 0 else np.asarray(n_decode, float) * (1 + k)   # x * 1 = x
        # tokens per attention replica and stage x hidden x bytes: one chain (powers of two fold in exactly)
        payload = scaled(decodes + np.asarray(prefill_tokens, float), Per(pp), Per(lay.attention_dp),
                         model.hidden_size, dtypes.act.bytes)
        hop = pp * collective_time(hw, "p2p", payload, lay.devices)
        stages = pp > 1
        if not stages.all():
            hop = np.where(stages, hop, 0.0)
        total = total + hop
    else:       # no pipeline: the p2p term is 0 everywhere (x + 0 = x), added only if it widens the shape
        shape = np.broadcast_shapes(np.shape(n_decode), np.shape(prefill_tokens), np.shape(lay.attention_dp),
                                    np.shape(lay.devices))
        if np.broadcast_shapes(np.shape(total), shape) != np.shape(total):
            total = total + np.zeros(shape)
    return Iteration(total, step_power_w(hw, st) if power else np.full(np.shape(total), np.nan))
