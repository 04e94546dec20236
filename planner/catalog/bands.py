"""Error bands: how far real measurements land from the model, per regime (``bands.yaml``).

A band is a set of empirical quantiles of the *slowdown* ``s = measured time / predicted time``
(for a throughput metric, ``predicted / measured``: time per token is the inverse of throughput)
over validation points held out from every fit, in one regime: vendor x framework x bound
(compute, memory, comm, overhead: ``perf/regime.py``) x phase (``prefill`` for TTFT-like
metrics, ``decode`` for TPOT-like ones, ``serving`` for end-to-end latency and throughput).
Quantiles use the split-conformal order statistic (Vovk et al., *Algorithmic Learning in a Random
World*, 2005; Lei et al., *Distribution-free predictive inference for regression*, JASA 2018):
with ``n`` calibration residuals, the level-``q`` upper bound is the ``ceil((n+1) q)``-th smallest,
so a new exchangeable point lies below it with probability at least ``q``.

A prediction ``v`` of a latency has quantile ``v x s_q``; of a throughput, ``v / s_(1-q)``.
Cells with fewer than ``min_points`` residuals are not stored; a query falls back along
``chain()`` to the first coarser regime that is. The file is written by ``python -m
planner.bands`` from the validation corpus and never edited by hand.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from planner.frozen import Frozen
from planner.yamlio import load_yaml

BANDS_FILE = Path(__file__).resolve().parent / "bands.yaml"
PHASES = ("prefill", "decode", "serving")
ANY = "*"


class Band(Frozen):
    """Slowdown quantiles of one regime (``quantiles`` of the table, ascending)."""

    regime: str
    n: int
    slowdown: list[float]


class Banded(Frozen):
    """Result fields of a prediction's bands (``band_fields``): P10/P50/P90 of what hardware
    measures for its TTFT, TPOT and output tokens/s (None without a band file), the bound of each
    phase and the regime each band came from."""

    ttft_s_p10: float | None = None
    ttft_s_p50: float | None = None
    ttft_s_p90: float | None = None
    tpot_s_p10: float | None = None
    tpot_s_p50: float | None = None
    tpot_s_p90: float | None = None
    output_tokens_per_s_p10: float | None = None
    output_tokens_per_s_p50: float | None = None
    output_tokens_per_s_p90: float | None = None
    regime_bounds: dict[str, str] = {}     # phase -> compute | memory | comm | overhead
    bands: dict[str, str] = {}             # phase -> regime the band came from


class BandTable(Frozen):
    quantiles: list[float]
    min_points: int
    cells: dict[str, Band]

    def slowdown(self, band: Band, q: float) -> float:
        """``s_q``, interpolated between the stored levels (clipped to the outermost ones)."""
        return float(np.interp(q, self.quantiles, band.slowdown))


def regime_key(vendor: str, framework: str, bound: str, phase: str) -> str:
    return "/".join((vendor, framework, bound, phase))


def chain(vendor: str, framework: str | None, bound: str | None, phase: str) -> list[str]:
    """Regimes from finest to coarsest: the full cell, then any framework, then any bound, then
    any vendor, then every point of the phase. An unknown framework or bound (``None``) starts
    at the first level that pools over it."""
    levels = [(vendor, framework, bound), (vendor, ANY, bound), (vendor, ANY, ANY), (ANY, ANY, bound),
              (ANY, ANY, ANY)]
    return [regime_key(v, f, b, phase) for v, f, b in levels if f is not None and b is not None]


def conformal_quantile(sorted_values: np.ndarray, q: float) -> float:
    """Split-conformal order statistic of ``sorted_values`` (ascending, n >= 1) at level ``q``:
    the ``ceil((n+1)q)``-th smallest for an upper level (q >= 0.5), the ``floor((n+1)q)``-th for a
    lower one, clipped to the sample."""
    n = sorted_values.size
    k = math.ceil((n + 1) * q - 1e-9) if q >= 0.5 else math.floor((n + 1) * q + 1e-9)
    return float(sorted_values[min(max(k, 1), n) - 1])


@lru_cache(maxsize=1)
def load_bands(path: Path = BANDS_FILE) -> BandTable | None:
    """The stored table, or None if no band file has been generated."""
    if not path.is_file():
        return None
    data, _ = load_yaml(path)
    return parse_table(data)


def parse_table(data: dict) -> BandTable:
    """A table from its file form (cells keyed by regime, without the regime repeated)."""
    cells = {k: Band(regime=k, **v) for k, v in data["cells"].items()}
    return BandTable(quantiles=data["quantiles"], min_points=data["min_points"], cells=cells)


def lookup(vendor: str, framework: str | None, bound: str | None, phase: str,
           table: BandTable | None = None) -> Band | None:
    table = table or load_bands()
    if table is None:
        return None
    for key in chain(vendor, framework, bound, phase):
        if key in table.cells:
            return table.cells[key]
    return None


def band_fields(vendor: str, framework: str | None, bounds: dict[str, str], ttft_s: float, tpot_s: float,
                output_tokens_per_s: float) -> dict:
    """P10/P50/P90 of TTFT (prefill regime), TPOT (decode) and output throughput (serving) of one
    prediction, and the regime each band came from (``bands``), as result fields."""
    table = load_bands()
    out: dict = {"bands": {}}
    for key, phase, value, latency in (("ttft_s", "prefill", ttft_s, True), ("tpot_s", "decode", tpot_s, True),
                                       ("output_tokens_per_s", "serving", output_tokens_per_s, False)):
        band = lookup(vendor, framework, bounds.get(phase), phase, table) if table else None
        for q in (0.1, 0.5, 0.9):
            if band is None:
                out[f"{key}_p{round(100 * q)}"] = None
                continue
            s = table.slowdown(band, q if latency else 1.0 - q)
            out[f"{key}_p{round(100 * q)}"] = value * s if latency else value / s
        if band is not None:
            out["bands"][phase] = f"{band.regime} (n={band.n})"
    return out
