"""Serving-framework entries (``catalog/frameworks.yaml``): a framework replaces the per-step
overhead and scales the GEMM / memory / scale-up link efficiencies of a hardware profile, so old and new engines
on the same chip can both be predicted without per-point factors; it also sets the engine's
scheduling defaults (sequences per iteration, KV reservation policy)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from planner.catalog.hardware import Figure, Fraction, HardwareProfile, Seconds
from planner.errors import InputError, unknown_name
from planner.frozen import Frozen
from planner.yamlio import load_yaml, validation_error

FRAMEWORKS_FILE = Path(__file__).resolve().parent / "frameworks.yaml"


class KvReservation(Frozen):
    value: Literal["on_demand", "full_length"]
    source: str
    note: str | None = None


class Framework(Frozen):
    description: str
    step_overhead: Seconds | None = None
    gemm_scale: Figure | None = None
    memory_scale: Figure | None = None
    link_scale: Figure | None = None
    max_num_seqs: Figure | None = None
    kv_reservation: KvReservation | None = None
    ring_hop_latency: Seconds | None = None   # the engine all-reduces with NCCL rings (see comm.py)

    def engine(self):
        """The serving engine with this framework's defaults (the rest: ``Engine``'s)."""
        from planner.serving.batching import Engine

        knobs: dict = {}
        if self.max_num_seqs:
            knobs["max_num_seqs"] = int(self.max_num_seqs.value)
        if self.kv_reservation:
            knobs["kv_reservation"] = self.kv_reservation.value
        return Engine(**knobs)

    def apply(self, hw: HardwareProfile) -> HardwareProfile:
        """``hw`` as this engine generation sees it (the profile itself is not changed)."""
        def scaled(base: Fraction, scale: Figure) -> Fraction:
            return Fraction(value=min(1.0, base.value * scale.value), source=base.source,
                            note=f"x {scale.value} ({scale.source})")

        eff = hw.efficiency
        update = {}
        if self.step_overhead is not None:
            update["step_overhead"] = self.step_overhead
        for field, scale in (("gemm", self.gemm_scale), ("memory", self.memory_scale),
                             ("scale_up", self.link_scale)):
            if scale is not None:
                update[field] = scaled(getattr(eff, field), scale)
        if self.gemm_scale is not None and eff.gemm_by_format:
            update["gemm_by_format"] = {f: scaled(v, self.gemm_scale) for f, v in eff.gemm_by_format.items()}
        if self.ring_hop_latency is not None:
            hw = hw.model_copy(update={"scale_up": hw.scale_up.model_copy(
                update={"ring_hop_latency": self.ring_hop_latency})})
        return hw.model_copy(update={"efficiency": eff.model_copy(update=update)}) if update else hw


@lru_cache(maxsize=1)
def _frameworks() -> dict[str, Framework]:
    data, lines = load_yaml(FRAMEWORKS_FILE)
    out = {}
    for name, spec in data.items():
        try:
            out[name] = Framework.model_validate(spec)
        except ValidationError as e:
            raise validation_error(FRAMEWORKS_FILE, e, {k[1:]: v for k, v in lines.items() if k[:1] == (name,)},
                                   Framework) from None
    return out


def framework(name: str) -> Framework:
    """A catalog entry by name, or the one entry of a frameworks YAML file by path (as written by
    ``planner calibrate``)."""
    if str(name).endswith((".yaml", ".yml")):
        return _framework_file(Path(name))
    fws = _frameworks()
    if name not in fws:
        raise unknown_name("framework", name, sorted(fws))
    return fws[name]


def _framework_file(path: Path) -> Framework:
    data, lines = load_yaml(path)
    if not isinstance(data, dict) or len(data) != 1 or not isinstance(next(iter(data.values())), dict):
        raise InputError(f"{path}:1: a framework file holds one entry, 'name: {{description: ..., ...}}'")
    name, spec = next(iter(data.items()))
    try:
        return Framework.model_validate(spec)
    except ValidationError as e:
        raise validation_error(path, e, {k[1:]: v for k, v in lines.items() if k[:1] == (name,)}, Framework) from None
