"""KV-cache tiers below HBM (host DRAM, local SSD, a remote pool) per platform, from
``kv_tiers.yaml``: capacity per node, usable share, bandwidth per accelerator, each sourced.

Kept apart from the hardware profiles: a tier belongs to the server or cluster an accelerator sits
in (its host, drives and NICs), not to the chip; profiles name the chip, this file the platform.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import ValidationError, model_validator

from planner.catalog.hardware import Bandwidth, Bytes, Count, Fraction
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

    capacity: Bytes
    usable: Fraction
    bandwidth: Bandwidth
    efficiency: Fraction
    shared_by: Count | None = None

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
    """The tier figures of a platform (a hardware profile name, e.g. ``h200``)."""
    cat = tier_catalog()
    if name not in cat.platforms:
        raise unknown_name("KV-tier platform", name, sorted(cat.platforms))
    return cat.platforms[name]


def tier_figures(name: str, tier: TierName) -> TierFigures:
    t = getattr(platform(name), tier)
    if t is None:
        raise InputError(f"platform {name} has no {tier} tier in {TIERS_FILE.name}")
    return t
