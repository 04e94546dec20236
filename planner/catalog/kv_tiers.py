"""KV-cache tiers below HBM (host DRAM, local SSD, a remote pool) per platform, from
``kv_tiers.yaml``: capacity per node, usable share, bandwidth per accelerator, each sourced.

Kept apart from the hardware profiles: a tier belongs to the server or cluster an accelerator sits
in (its host, drives and NICs), not to the chip; profiles name the chip, this file the platform.
One exception has one home in the profile: host memory a device reaches over a coherent
chip-to-chip link (Grace LPDDR5X over NVLink-C2C) is recorded per device as the profile's
``host_memory``; a tier written ``from_profile: true`` takes its capacity and bandwidth from there
and adds only what the platform decides (usable share, achieved link efficiency).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import ValidationError, model_validator

from planner.catalog.hardware import Bandwidth, Bytes, Count, Fraction, hardware
from planner.errors import InputError, unknown_name
from planner.frozen import Frozen
from planner.yamlio import load_yaml, validation_error

TIERS_FILE = Path(__file__).resolve().parent / "kv_tiers.yaml"
TierName = Literal["hbm", "host_dram", "local_ssd", "remote_pool"]
OFFLOAD_TIERS: tuple[TierName, ...] = ("host_dram", "local_ssd", "remote_pool")


class TierFigures(Frozen):
    """One tier of one node: ``capacity`` per node, of which ``usable`` holds KV; ``bandwidth`` per
    accelerator unless ``shared_by`` accelerators share it (one drive per node); ``efficiency`` the
    achieved fraction of it."""

    capacity: Bytes | None = None
    usable: Fraction
    bandwidth: Bandwidth | None = None
    efficiency: Fraction
    shared_by: Count | None = None
    from_profile: bool = False   # capacity and bandwidth: the hardware profile's host_memory (per device)

    @model_validator(mode="after")
    def _sized(self) -> TierFigures:
        sized = (self.capacity is not None, self.bandwidth is not None)
        if sized != ((False, False) if self.from_profile else (True, True)):
            raise ValueError("give capacity and bandwidth, or from_profile: true (the profile's host_memory)")
        return self

    def bytes_per_accelerator(self, per_node: int) -> float:
        return self.capacity.value * self.usable.value / per_node

    @property
    def load_bytes_per_s(self) -> float:
        """Bytes/s one accelerator loads from this tier when all of its sharers load at once."""
        share = self.shared_by.value if self.shared_by else 1.0
        return self.bandwidth.value * self.efficiency.value / share


class Platform(Frozen):
    accelerators_per_node: Count
    host_dram: TierFigures | None = None
    local_ssd: TierFigures | None = None
    remote_pool: TierFigures | None = None


class TierCatalog(Frozen):
    sources: dict[str, str]
    platforms: dict[str, Platform]

    @model_validator(mode="after")
    def _sources_known(self) -> TierCatalog:
        for name, p in self.platforms.items():
            for tier in OFFLOAD_TIERS:
                t = getattr(p, tier)
                figs = [] if t is None else [t.capacity, t.usable, t.bandwidth, t.efficiency, t.shared_by]
                if t is not None and t.from_profile and p.accelerators_per_node.value != 1:
                    raise ValueError(f"platform {name}: a from_profile tier is per device: accelerators_per_node "
                                     "must be 1")
                for f in [p.accelerators_per_node, *figs]:
                    if f is not None and f.source not in self.sources:
                        raise ValueError(f"platform {name}: unknown source {f.source!r}")
        return self


@lru_cache(maxsize=4)
def tier_catalog(path: str = str(TIERS_FILE)) -> TierCatalog:
    data, lines = load_yaml(Path(path))
    try:
        return TierCatalog.model_validate(data)
    except ValidationError as e:
        raise validation_error(path, e, lines, TierCatalog) from None


def platform(name: str) -> Platform:
    """The tier figures of a platform (a hardware profile name, e.g. ``h200``), ``from_profile``
    tiers filled in from that profile's ``host_memory``."""
    cat = tier_catalog()
    if name not in cat.platforms:
        raise unknown_name("KV-tier platform", name, sorted(cat.platforms))
    return _resolved(name, cat.platforms[name])


def _resolved(name: str, p: Platform) -> Platform:
    update = {}
    for tier in OFFLOAD_TIERS:
        t = getattr(p, tier)
        if t is None or not t.from_profile:
            continue
        host = hardware(name).host_memory
        if host is None:
            raise InputError(f"platform {name}: {tier} is from_profile but hardware {name!r} records no "
                             f"host_memory ({TIERS_FILE.name})")
        update[tier] = t.model_copy(update={"capacity": host.capacity, "bandwidth": host.bandwidth})
    return p.model_copy(update=update) if update else p


def tier_figures(name: str, tier: TierName) -> TierFigures:
    t = getattr(platform(name), tier)
    if t is None:
        raise InputError(f"platform {name} has no {tier} tier in {TIERS_FILE.name}")
    return t
