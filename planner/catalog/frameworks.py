"""Serving-framework entries (``catalog/frameworks.yaml``): a framework replaces the per-step
overhead and scales the GEMM / memory / scale-up link efficiencies of a hardware profile, so old and new engines
on the same chip can both be predicted without per-point factors; it also sets the engine's
scheduling defaults (sequences per iteration, KV reservation policy, whether its limits are per
attention-DP replica or for the whole instance, how it places requests on those replicas)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from numbers import Integral
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, ValidationError, field_validator

from planner.catalog.dtypes import DType
from planner.catalog.hardware import (
    Count,
    DeviceLimits,
    EngineDefaults,
    Figure,
    Fraction,
    HardwareProfile,
    MemoryPolicy,
    OpKernels,
    Seconds,
    ep_ranks_checked,
    is_bundled_hardware,
    list_hardware,
)
from planner.errors import InputError, PlannerError, unknown_name
from planner.frozen import Frozen
from planner.units import parse_quantity
from planner.yamlio import load_yaml, validation_error

FRAMEWORKS_FILE = Path(__file__).resolve().parent / "frameworks.yaml"


# the serving engines the entries describe (Framework.family)
EngineFamily = Literal["vllm", "sglang", "tensorrt-llm", "mindie", "cloudmatrix-infer"]


class KvReservation(Frozen):
    value: Literal["on_demand", "full_length"]
    source: str
    note: str | None = None


class LimitsScope(Frozen):
    value: Literal["replica", "instance"]
    source: str
    note: str | None = None


class DpBalance(Frozen):
    value: Literal["least_loaded", "round_robin"]
    source: str
    note: str | None = None


class Switch(Frozen):
    value: bool
    source: str
    note: str | None = None


# the formats engines offer for linear-attention recurrent states (SGLang --mamba-ssm-dtype,
# vLLM --mamba-ssm-cache-dtype)
STATE_DTYPES = (DType.fp32, DType.bf16, DType.fp16)


class Format(Frozen):
    value: DType
    source: str
    note: str | None = None


class TokenCount(Figure):
    """A whole number of tokens, 0 allowed (``Framework.graph_max_tokens``)."""

    allow_zero: ClassVar[bool] = True

    @field_validator("value")
    @classmethod
    def _whole(cls, v: float) -> float:
        if v != int(v):
            raise ValueError(f"must be a whole number of tokens, got {v}")
        return v


class DeviceTier(DeviceLimits):
    """One row of an engine's defaults by device (``BatchDefaults``): its limits apply to a device
    with at least ``min_capacity`` of memory whose name contains none of ``not_named``."""

    min_capacity: float = Field(0.0, ge=0, description="bytes; text such as '70 GiB' is read")
    not_named: list[str] = []

    @field_validator("min_capacity", mode="before")
    @classmethod
    def _bytes(cls, v: object) -> float:
        return parse_quantity(v, "bytes")  # type: ignore[arg-type]

    def matches(self, hw: HardwareProfile) -> bool:
        """The device the engine sees is one die of a multi-die package (each its own rank)."""
        names = (hw.name.lower(), (hw.base or "").lower())
        return hw.memory.capacity.value / hw.dies_per_device >= self.min_capacity and not any(
            word.lower() in n for word in self.not_named for n in names)


class BatchDefaults(Frozen):
    """The scheduler limits an engine picks by itself from the device it runs on where its launch
    gives none (vLLM ``EngineArgs.get_batch_defaults``: larger budgets on devices of 70 GiB and
    more; SGLang ``_handle_gpu_memory_settings``: chunked prefill size and CUDA-graph batch by GPU
    memory): the first of ``tiers`` the device meets applies (``HardwareProfile.engine_defaults``)."""

    tiers: list[DeviceTier] = Field(min_length=1)
    seqs_per_replica: bool = False     # EngineDefaults.seqs_per_replica
    source: str = Field(min_length=1)
    note: str | None = None

    def for_device(self, hw: HardwareProfile) -> EngineDefaults | None:
        tier = next((t for t in self.tiers if t.matches(hw)), None)
        if tier is None:
            return None
        return EngineDefaults(**tier.model_dump(include=set(DeviceLimits.model_fields)),
                              seqs_per_replica=self.seqs_per_replica, source=self.source)


class LaunchArgs(Frozen):
    """Command-line arguments of the launch an entry's figures were measured under, beyond the
    ones a plan sets itself (parallelism, batch limits, memory, formats): ``plan --emit`` writes
    them for that engine, so a launch script runs the engine the plan modelled. A file with
    ``base:`` takes its base's."""

    args: list[str] = Field(min_length=1)
    source: str = Field(min_length=1)
    note: str | None = None


class Framework(Frozen):
    name: str = ""
    description: str
    # the hardware vendors (HardwareProfile.vendor) whose devices this engine runs on and its figures
    # were read from; empty: any (a file of one's own that names none)
    vendors: list[str] = []
    # the serving engine whose figures the entry holds, on any platform and in any generation
    # (ENGINE_FAMILIES); None: a file of one's own that names none (not checked)
    family: EngineFamily | None = None
    # per emitted engine (plan --emit vllm|sglang|trtllm): the launch's own arguments (LaunchArgs)
    launch_args: dict[Literal["vllm", "sglang", "trtllm"], LaunchArgs] = {}
    step_overhead: Seconds | None = None
    sequence_overhead: Seconds | None = None   # host time per running sequence per step
    request_overhead: Seconds | None = None    # per request, in its TTFT (tokenize, schedule, first sample)
    eager_prefill_dispatch: Seconds | None = None   # Efficiency.eager_prefill_dispatch
    graph_max_tokens: TokenCount | None = None      # Efficiency.graph_max_tokens
    gemm_scale: Figure | None = None
    attention_scale: Figure | None = None      # scales the prefill attention kernel plateau
    # the prefill attention plateau this engine's kernels reach, per hardware profile name (an
    # older engine runs an older kernel: 2023 vLLM has no FlashAttention-3 on H100)
    attention_prefill: dict[str, Fraction] = {}
    # its absorbed-MLA decode kernel's compute plateau, per hardware profile name (Efficiency.attention.mla_decode)
    attention_mla_decode: dict[str, Fraction] = {}
    # the HBM fraction its paged (GQA/MHA) decode-attention kernel streams K/V at, per hardware
    # profile name, where the engine calls another kernel than the one the profile measured
    # (Efficiency.attention.decode_memory); measured as the engine calls it, so memory_scale does not
    # scale it
    attention_decode: dict[str, Fraction] = {}
    memory_scale: Figure | None = None
    # its MoE grouped-GEMM kernels' rate as a fraction of the dense plateau (Efficiency.grouped_gemm:
    # the profiles' default is DeepGEMM's; Triton fused_moe / CUTLASS MoE kernels reach less)
    grouped_gemm: Fraction | None = None
    grouped_gemm_by_format: dict[DType, Fraction] = {}   # the same per operand format (Efficiency.grouped_by_format)
    # its MoE expert chain in a weight format, timed as the engine calls it: the weights' HBM fraction
    # and the chain's fixed time per layer (Efficiency.grouped_memory_by_format / grouped_fixed_by_format);
    # measured on the engine's own calls, so memory_scale does not scale them
    grouped_memory_by_format: dict[DType, Fraction] = {}
    grouped_fixed_by_format: dict[DType, Seconds] = {}
    # a quantized format's GEMM throughput on this engine's path (activation quantization + GEMM +
    # dequantization) relative to the same GEMM in BF16: caps the profile's plateau of that format,
    # which describes the matrix unit's rate (2x BF16 for INT8 on an Ascend cube)
    gemm_speedup_over_bf16: dict[DType, Figure] = {}
    link_scale: Figure | None = None
    # its EP all-to-all kernels for prompt steps (DeepEP normal mode), by EP ranks: Efficiency.ep_bulk
    ep_bulk: dict[int, Fraction] = {}
    memory_policy: MemoryPolicy | None = None
    moe_imbalance: Figure | None = None        # max/mean expert load from routing skew (EPLB or not)
    op_kernels: OpKernels | None = None        # kernels per modelled operator (Efficiency.op_kernels)
    fp8_dispatch: Switch | None = None
    overlap_moe_comm: Switch | None = None
    draft_extend: Switch | None = None      # Efficiency.draft_extend
    moe_a2a: Switch | None = None           # Efficiency.moe_a2a
    shared_expert_ranks: Switch | None = None   # Efficiency.shared_expert_ranks
    max_num_seqs: Figure | None = None
    # limits the engine sets by device where the launch gives none (HardwareProfile.engine_defaults)
    batch_defaults: BatchDefaults | None = None
    kv_reservation: KvReservation | None = None
    limits_scope: LimitsScope | None = None   # engine limits per attention-DP replica or for the instance
    dp_balance: DpBalance | None = None       # how requests are placed on attention-DP replicas
    mixed_prefill: Switch | None = None       # decodes ride in prompt iterations (Engine.mixed_prefill)
    ring_hop_latency: Seconds | None = None   # the engine all-reduces with NCCL rings (see comm.py)
    linear_state_dtype: Format | None = None   # Gated DeltaNet state format (Efficiency.linear_state_dtype)
    linear_state_from_checkpoint: Switch | None = None   # Efficiency.linear_state_from_checkpoint

    @field_validator("vendors")
    @classmethod
    def _vendor_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not name or name != name.strip().lower():
                raise ValueError(f"a vendor is written as the hardware profiles' vendor field is (lower case, e.g. "
                                 f"nvidia, amd, huawei), got {name!r}")
        return v

    @field_validator("ep_bulk")
    @classmethod
    def _ep_ranks(cls, v: dict[int, Fraction]) -> dict[int, Fraction]:
        return ep_ranks_checked(v)

    @field_validator("attention_prefill", "attention_mla_decode", "attention_decode")
    @classmethod
    def _profile_names(cls, v: dict[str, Fraction]) -> dict[str, Fraction]:
        """Per-profile kernel figures are keyed by bundled profile names (a profile of one's own
        takes them through its ``base``): a name that matches none would silently never apply."""
        for name in v:
            if name != name.lower() or not is_bundled_hardware(name):     # keys match profile names as written
                raise ValueError(f"{unknown_name('hardware profile', name, list_hardware())}; a profile of your "
                                 "own takes a bundled one's figure through its base")
        return v

    @field_validator("linear_state_dtype")
    @classmethod
    def _state_format(cls, v: Format | None) -> Format | None:
        if v is not None and v.value not in STATE_DTYPES:
            raise ValueError(f"recurrent states are kept in {', '.join(d.value for d in STATE_DTYPES)} "
                             f"(engines offer no other format), got {v.value.value}")
        return v

    @field_validator("step_overhead", "sequence_overhead", "request_overhead", "eager_prefill_dispatch")
    @classmethod
    def _host_time(cls, v: Seconds | None) -> Seconds | None:
        if v is not None and v.value > 10.0:
            raise ValueError(f"an engine's host time is at most 10 s (a step, a sequence, a request, a launch), "
                             f"got {v.value:g} s")
        return v

    @field_validator("moe_imbalance")
    @classmethod
    def _imbalance_at_least_one(cls, v: Figure | None) -> Figure | None:
        if v is not None and v.value < 1:
            raise ValueError(f"a max/mean load factor is at least 1, got {v.value}")
        return v

    def engine_knobs(self) -> dict:
        """The scheduler knobs this framework sets on ``serving.batching.Engine`` (the rest keep
        the engine's defaults): its sequence limit, KV reservation, attention-DP limits scope and
        placement, and whether decodes ride in prompt iterations. ``Engine(framework=name)`` takes
        them itself; ``Engine(**fw.engine_knobs())`` builds one from an entry object."""
        knobs: dict = {}
        if self.max_num_seqs:
            knobs["max_num_seqs"] = int(self.max_num_seqs.value)
        for name in ("kv_reservation", "limits_scope", "dp_balance", "mixed_prefill"):
            if (figure := getattr(self, name)) is not None:
                knobs[name] = figure.value
        return knobs

    def _capped_formats(self, hw: HardwareProfile, eff) -> dict[DType, Fraction]:
        """``eff``'s per-format GEMM plateaus with each format of ``gemm_speedup_over_bf16`` held to
        at most that multiple of the BF16 plateau's FLOP/s (formats the chip has no matrix rate for
        are left alone: they run in BF16)."""
        out = dict(eff.gemm_by_format)
        bf16_rate = eff.gemm_plateau(DType.bf16) * hw.peak_flops_per_s(DType.bf16)
        for fmt, speedup in self.gemm_speedup_over_bf16.items():
            if fmt not in hw.peak_flops or fmt is DType.bf16:
                continue
            cap = bf16_rate * speedup.value / hw.peak_flops[fmt].value
            if cap < eff.gemm_plateau(fmt):
                out[fmt] = Fraction(value=cap, source=speedup.source,
                                    note=f"{speedup.value:g} x the BF16 GEMM rate on this engine's {fmt.value} path")
        return out

    def apply(self, hw: HardwareProfile) -> HardwareProfile:
        """``hw`` as this engine generation sees it (the profile itself is not changed)."""
        def scaled(base: Fraction, scale: Figure) -> Fraction:
            return Fraction(value=min(1.0, base.value * scale.value), source=base.source,
                            note=f"x {scale.value} ({scale.source})")

        eff = hw.efficiency
        update: dict = {}
        for field in ("step_overhead", "sequence_overhead", "request_overhead", "eager_prefill_dispatch",
                      "moe_imbalance", "op_kernels", "grouped_gemm"):
            if getattr(self, field) is not None:
                update[field] = getattr(self, field)
        if self.ep_bulk:
            update["ep_bulk"] = self.ep_bulk
        if self.graph_max_tokens is not None:
            update["graph_max_tokens"] = int(self.graph_max_tokens.value)
        if self.linear_state_dtype is not None:
            update["linear_state_dtype"] = self.linear_state_dtype.value
        for field, target in (("grouped_gemm_by_format", "grouped_by_format"),      # per-format figures:
                              ("grouped_memory_by_format", "grouped_memory_by_format"),  # the entry's over
                              ("grouped_fixed_by_format", "grouped_fixed_by_format")):   # the profile's
            if getattr(self, field):
                update[target] = {**getattr(eff, target), **getattr(self, field)}
        for field in ("fp8_dispatch", "overlap_moe_comm", "draft_extend", "moe_a2a", "shared_expert_ranks",
                      "linear_state_from_checkpoint"):
            if getattr(self, field) is not None:
                update[field] = getattr(self, field).value
        def for_profile(by_name: dict[str, Fraction]) -> Fraction | None:
            return by_name.get(hw.name) or by_name.get(hw.base or "")   # a profile, else the one it derives from

        att: dict = {}
        if (attention := for_profile(self.attention_prefill)) is not None:
            att["prefill"] = attention
        elif self.attention_scale is not None:
            att["prefill"] = scaled(eff.attention.prefill, self.attention_scale)
        if (mla := for_profile(self.attention_mla_decode)) is not None:
            att["mla_decode"] = mla
        if (decode := for_profile(self.attention_decode)) is not None:
            att["decode_memory"] = decode
        elif self.memory_scale is not None and eff.attention.decode_memory is not None:
            # the engine streams K/V through the vendor kernel the profile measured, at the same
            # share of it as it streams weights at the profile's fraction
            att["decode_memory"] = scaled(eff.attention.decode_memory, self.memory_scale)
        if att:
            update["attention"] = eff.attention.model_copy(update=att)
        for field, scale in (("gemm", self.gemm_scale), ("memory", self.memory_scale),
                             ("scale_up", self.link_scale)):
            if scale is not None:
                update[field] = scaled(getattr(eff, field), scale)
        if self.gemm_scale is not None and eff.gemm_by_format:
            update["gemm_by_format"] = {f: scaled(v, self.gemm_scale) for f, v in eff.gemm_by_format.items()}
        if self.gemm_speedup_over_bf16:
            update["gemm_by_format"] = self._capped_formats(hw, eff.model_copy(update=update))
        if self.ring_hop_latency is not None:
            hw = hw.model_copy(update={"scale_up": hw.scale_up.model_copy(
                update={"ring_hop_latency": self.ring_hop_latency})})
        top: dict = {"framework": self.name or "custom", "efficiency": eff.model_copy(update=update),
                     "engine_defaults": None if self.batch_defaults is None else self.batch_defaults.for_device(hw)}
        if self.memory_policy is not None:
            top["memory_policy"] = self.memory_policy
        return hw.model_copy(update=top)


@lru_cache(maxsize=1)
def _frameworks() -> dict[str, Framework]:
    """The bundled entries. An entry with ``base: <earlier entry>`` is that entry with its own
    fields replacing the base's (an engine generation that differs in a few figures)."""
    data, lines = load_yaml(FRAMEWORKS_FILE)
    out: dict[str, Framework] = {}
    for name, spec in data.items():
        if isinstance(spec, dict) and "base" in spec:
            spec = _inherit(spec, out, FRAMEWORKS_FILE, _entry_lines(lines, name))
        try:
            out[name] = Framework.model_validate({**spec, "name": name})
        except ValidationError as e:
            raise validation_error(FRAMEWORKS_FILE, e, _entry_lines(lines, name), Framework) from None
    return out


def _entry_lines(lines: dict, name: str) -> dict:
    """The source lines of entry ``name``'s fields, keyed as its own (read only to locate an error
    or a ``base:``: scanning every key for every entry costs ~1 ms of each start-up)."""
    return {k[1:]: v for k, v in lines.items() if k[:1] == (name,)}


def _inherit(spec: dict, bases: dict[str, Framework], path: Path, spec_lines: dict) -> dict:
    """``spec`` on top of the entry its ``base:`` names (one of ``bases``): the base's fields, then
    the spec's own; a spec without a description of its own says it is the base's, changed."""
    base = spec["base"]
    if not isinstance(base, str) or base not in bases:
        line = spec_lines.get(("base",), 1)
        raise InputError(f"{path}:{line}: base: expected a bundled framework ({', '.join(sorted(bases))}), "
                         f"got {base!r}")
    inherited = bases[base].model_dump(exclude_unset=True, exclude={"name"})
    return {**inherited, "description": f"{bases[base].description} (as {path.name} changes it)",
            **{k: v for k, v in spec.items() if k != "base"}}


# The engine a prediction assumes when none is named (said in every output that names one): vLLM
# as each vendor's platform builds it, launched as its documentation launches it (on CUDA and ROCm
# without engine flags; on Ascend with full decode graphs, as vLLM-Ascend's tutorials and nightly CI
# do: its default piecewise mode spends ~40 ms of host time a step, the vllm-ascend entry). A device
# of a vendor no entry covers (Gaudi, Trainium, TPU) takes CUDA vLLM's entry: its host and memory
# figures over the profile's own kernel figures.
DEFAULT_FRAMEWORKS = {"nvidia": "vllm", "amd": "vllm-rocm", "huawei": "vllm-ascend-graph"}
FALLBACK_FRAMEWORK = "vllm"


def default_framework(hw: HardwareProfile) -> str:
    """The entry a prediction on ``hw`` runs when it names none (``DEFAULT_FRAMEWORKS``)."""
    return DEFAULT_FRAMEWORKS.get(hw.vendor, FALLBACK_FRAMEWORK)


def family_entries(family: str, hw: HardwareProfile) -> list[str]:
    """The bundled entries of engine ``family`` (``Framework.family``) that run on ``hw``, its
    vendor's default first: what to name for that engine on that device."""
    names = [name for name, fw in _frameworks().items() if fw.family == family and not vendor_mismatch(fw, hw)]
    return sorted(names, key=lambda name: name != default_framework(hw))


def vendor_mismatch(fw: Framework, hw: HardwareProfile) -> str:
    """Why ``fw`` cannot stand for the engine on ``hw`` ('' if it can): an entry names the vendors
    its engine runs on (CUDA vLLM's kernel, host and memory figures say nothing of an Ascend NPU);
    a device of a vendor no bundled entry covers may take any entry, having none of its own."""
    if not fw.vendors or hw.vendor in fw.vendors:
        return ""
    own = [name for name, entry in _frameworks().items() if hw.vendor in entry.vendors]
    if not own:
        return ""
    name = fw.name or "the framework file"
    return (f"framework {name} runs on {' and '.join(fw.vendors)} devices, not on {hw.name} "
            f"({hw.vendor}): name one of {', '.join(own)} (the default on {hw.vendor} devices is "
            f"{default_framework(hw)}), or write a framework file with base: {name} and vendors: [{hw.vendor}] "
            "to take its figures onto it")


def list_frameworks() -> list[str]:
    """The bundled entries' names, in the file's order."""
    return list(_frameworks())


def entry_figures(fw: Framework) -> list[tuple[str, object, str, str]]:
    """``(path, value, source, note)`` of every sourced figure an entry sets, nested ones by their
    dotted path (``memory_policy.fraction``, ``ep_bulk.16``): what ``planner frameworks show`` lists."""
    rows: list[tuple[str, object, str, str]] = []

    def sourced(x: object) -> bool:
        return isinstance(x, dict) and ("source" in x or any(sourced(v) for v in x.values()))

    def walk(path: str, x: dict) -> None:
        if "source" in x:        # a figure, or a group of settings under one source
            own = {k: v for k, v in x.items() if k not in ("source", "note") and not sourced(v)}
            rows.append((path, own.get("value", own), str(x["source"]), str(x.get("note") or "")))
        for k, v in x.items():
            if sourced(v):
                walk(f"{path}.{k}" if path else str(k), v)
            elif "source" not in x and k not in ("note",):      # a setting of a group without a source
                rows.append((f"{path}.{k}" if path else str(k), v, "", ""))

    walk("", fw.model_dump(mode="json", exclude_unset=True, exclude={"name", "description", "vendors", "family"}))
    return rows


def load_framework_file(path: str | Path) -> Framework:
    """A framework entry from a YAML file of its own: either the entry's fields at the top level,
    or one ``name: {description: ..., ...}`` entry as ``planner calibrate`` writes it. ``base:
    <bundled entry>`` starts from that entry, the file's fields replacing its own (e.g. a launch
    without prompt graphs: ``base: vllm-ascend`` and ``graph_max_tokens: {value: 0, ...}``)."""
    path = Path(path)
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}:1: a framework file is a YAML mapping (one entry, 'name: {{description: ...}}')")
    name, spec, spec_lines = path.stem, data, lines
    if "description" not in data and "base" not in data and len(data) == 1 \
            and isinstance(next(iter(data.values())), dict):
        name, spec = next(iter(data.items()))
        spec_lines = _entry_lines(lines, name)
    if "base" in spec:
        spec = _inherit(spec, _frameworks(), path, spec_lines)
    try:
        return Framework.model_validate({**spec, "name": str(name)})
    except ValidationError as e:
        raise validation_error(path, e, spec_lines, Framework) from None


def framework(name: str | Framework) -> Framework:
    """A framework entry by catalog name (``vllm``), by YAML path, or passed through."""
    if isinstance(name, Framework):
        return name
    if str(name).endswith((".yaml", ".yml")):
        return load_framework_file(name)
    fws = _frameworks()
    if name not in fws:
        raise unknown_name("framework", name, sorted(fws))
    return fws[name]


def checked_choice(v: str | dict[str, str] | None) -> str | dict[str, str] | None:
    """``v`` as a scenario gives an engine (``engine.framework``, a design's ``framework``): each
    catalog name must exist (did-you-mean otherwise) and each framework file must read; a
    mapping's keys are read in the catalog's spelling (stripped, lower case) and must be distinct.
    Whether the keys name a vendor or device the scenario uses is checked with the scenario
    (``scenario_checks``). A ``ValueError`` (a validator's) for a bad one."""
    if v is None:
        return v
    from planner.checks import located

    for key, name in v.items() if isinstance(v, dict) else [(None, v)]:
        try:                          # a file is read now, so a missing or bad one is blamed here
            framework(name)
        except PlannerError as e:
            raise (ValueError(str(e)) if key is None else located(str(key), str(e))) from None
    if not isinstance(v, dict):
        return v
    keys = [k.strip().lower() for k in v]
    if not v or not all(keys) or len(set(keys)) < len(keys):
        raise ValueError(f"a framework mapping needs distinct vendor or hardware names as keys, got {sorted(v)}")
    return dict(zip(keys, v.values(), strict=True))


def framework_for(choice: str | Framework | Mapping[str, str] | None, hw: HardwareProfile) -> str | Framework | None:
    """The engine ``choice`` names for device ``hw``: one name (or entry) for every device, or a
    mapping from a profile name or a vendor to a name (``engine.framework: {nvidia: sglang,
    mi300x: vllm-rocm-mlperf}``), the profile's name before its vendor; None where the mapping
    names neither (the vendor's default, ``default_framework``)."""
    if not isinstance(choice, Mapping):
        return choice
    return choice.get(hw.name, choice.get(hw.vendor))


def engine_name(choice: str | Framework | Mapping[str, str] | None, hw: HardwareProfile) -> str:
    """The name of the engine ``choice`` runs on ``hw`` (``framework_for``), its vendor's default
    where it names none: what an output names beside the device."""
    named = framework_for(choice, hw)
    if named is None:
        return default_framework(hw)
    return named if isinstance(named, str) else named.name or "custom"


def with_framework(hw: HardwareProfile, name: str | Framework | Mapping[str, str] | None = None) -> HardwareProfile:
    """``hw`` as the named engine sees it (a mapping by device: ``framework_for``). A profile a
    framework was already applied to is returned as is unless another framework is named; a bare
    profile gets its vendor's default (``default_framework``). An engine of another vendor's
    devices is refused (``vendor_mismatch``)."""
    name = framework_for(name, hw)
    if name is None:
        return hw if hw.framework else framework(default_framework(hw)).apply(hw)
    fw = framework(name)
    if why := vendor_mismatch(fw, hw):
        raise InputError(why)
    if hw.framework == (fw.name or "custom"):
        return hw
    return fw.apply(hw)


def as_run(hardware: str | HardwareProfile, framework: str | Framework | Mapping[str, str] | None = None,
           state_dtype: str | DType | None = None, memory_fraction: float | None = None,
           kv_pool_tokens: int | None = None) -> HardwareProfile:
    """The profile (a name, YAML path or profile) as one engine run sees it: ``framework``'s entry
    applied (``with_framework``), its recurrent states in ``state_dtype``, its memory setting at
    ``memory_fraction`` and its KV pool capped at ``kv_pool_tokens`` where given
    (``with_state_dtype``, ``with_memory_fraction``, ``with_kv_pool_tokens``)."""
    from planner.catalog.hardware import hardware as get_hardware

    hw = with_state_dtype(with_framework(get_hardware(hardware), framework), state_dtype)
    return with_kv_pool_tokens(with_memory_fraction(hw, memory_fraction), kv_pool_tokens)


def with_memory_fraction(hw: HardwareProfile, fraction: float | None) -> HardwareProfile:
    """``hw`` whose engine was given ``fraction`` for its memory setting, in that engine's own
    sense (``MemoryPolicy.kind``): vLLM ``--gpu-memory-utilization`` and SGLang
    ``--mem-fraction-static`` take it of total memory, TensorRT-LLM
    ``kv_cache_free_gpu_mem_fraction`` of what weights and activations leave; None: the entry's."""
    if fraction is None:
        return hw
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise InputError(f"memory_fraction must be in (0, 1], got {fraction!r}")
    given = Fraction(value=float(fraction), source="given with the run (--memory-fraction, engine.memory_fraction)")
    return hw.model_copy(update={"memory_policy": hw.memory_policy.given(given)})


def with_kv_pool_tokens(hw: HardwareProfile, tokens: int | None) -> HardwareProfile:
    """``hw`` whose engine was launched with its KV pool capped at ``tokens`` per attention replica
    (``MemoryPolicy.pool_tokens``): SGLang ``--max-total-tokens`` (each DP rank's model runner takes
    min(profiled, given): model_runner init_memory_pool), TensorRT-LLM ``KvCacheConfig.max_tokens``
    ("memory corresponding to the minimum" of it and the free fraction), vLLM
    ``--num-gpu-blocks-override`` x block size (an override: the engine allocates it as given, so
    above what memory holds it fails to start and every evaluator refuses it,
    ``MemoryPolicy.pool_tokens_exact``); None: memory alone sizes the pool."""
    if tokens is None:
        return hw
    if isinstance(tokens, bool) or not isinstance(tokens, Integral) or tokens < 1:
        raise InputError(f"kv_pool_tokens must be a positive integer (tokens per KV pool), got {tokens!r}")
    given = Count(value=int(tokens), source="given with the run (--kv-pool-tokens, engine.kv_pool_tokens)")
    return hw.model_copy(update={"memory_policy": hw.memory_policy.capped(given)})


def with_state_dtype(hw: HardwareProfile, state_dtype: str | DType | None) -> HardwareProfile:
    """``hw`` whose engine keeps linear-attention recurrent states in ``state_dtype``, whatever
    the checkpoint declares (a flag the user passes wins); None: as its framework entry says
    (``Efficiency.linear_state_dtype``, ``linear_state_from_checkpoint``)."""
    if state_dtype is None:
        return hw
    names = ", ".join(d.value for d in STATE_DTYPES)
    try:
        fmt = DType(state_dtype)
    except ValueError:
        raise InputError(f"state_dtype {state_dtype!r}: expected one of {names}") from None
    if fmt not in STATE_DTYPES:
        raise InputError(f"state_dtype {fmt.value}: recurrent states are kept in {names} (engines offer no "
                         "other format)")
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(
        update={"linear_state_dtype": fmt, "linear_state_from_checkpoint": False})})
