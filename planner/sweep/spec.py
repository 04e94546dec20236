"""Sweep files: a base scenario and a grid of overrides, expanded into scenario variants.

```yaml
name: chat-capacity
base: chat-h100.yaml                 # a scenario file (relative to this file) or an inline mapping
grid:                                # dotted key into the scenario -> the values to try
  model: [llama-3.1-8b, llama-3.1-70b]
  workload.rate: [5, 10, 20]
  search.hardware: [[h100-sxm], [h200], [mi300x]]
  slo.ttft_s.p90: [0.5, 1.0]
  simulate.seed: [1, 2]
output: results.csv                  # or .parquet; --out overrides
```

The variants are the Cartesian product of the grid, in file order (the last key varies fastest).
Each variant has an ``id``: a hash of its scenario (the base with its overrides applied), which is
how a rerun knows what is done: an edited base, or another sweep file sharing the output, gives
other ids, so no row of another scenario is taken for one of this sweep's.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError, count
from planner.yamlio import load_yaml

MAX_VARIANTS = 100_000
"""Most variants a sweep file may expand to: each is a copy of the base scenario held in memory and
validated before the first runs (100,000 take ~0.3 GB and ~2.5 min; 1,000,000 would be ~3 GB and
~25 min, a hang to the user). A larger study is several sweep files sharing one output."""


@dataclass(frozen=True)
class Variant:
    id: str
    params: dict[str, Any]       # dotted key -> value
    scenario: dict[str, Any]     # the base scenario with the overrides applied


@dataclass(frozen=True)
class Sweep:
    name: str
    path: Path
    base_dir: Path               # where the variants' relative paths (traces, profiles) resolve
    keys: list[str]
    variants: list[Variant]
    output: str | None


def variant_id(scenario: dict[str, Any]) -> str:
    """Stable id of a variant: the first 16 hex digits of the SHA-1 of its scenario as JSON (the
    base and the overrides both: a row is reused only for the very scenario it ran)."""
    return hashlib.sha1(json.dumps(scenario, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _set_in(data: dict, dotted: str, value: Any, where: str) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise InputError(f"{where} grid.{dotted}: '{part}' is not a mapping in the base scenario")
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def load_sweep(path: str | Path) -> Sweep:
    """Read a sweep file and expand its grid; errors say ``file:line field: problem``."""
    path = Path(path)
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}:1: a sweep is a YAML mapping with 'base' and 'grid'")
    unknown = set(data) - {"name", "base", "grid", "output"}
    if unknown:
        key = sorted(unknown)[0]
        raise InputError(f"{path}:{lines.get((key,), 1)} {key}: unknown key (expected name, base, grid, output)")
    base, base_dir = _base(path, data.get("base"), lines)
    grid = data.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise InputError(f"{path}:{lines.get(('grid',), 1)} grid: expected a mapping of dotted keys to value lists")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise InputError(f"{path}:{lines.get(('grid', str(key)), 1)} grid.{key}: expected a non-empty list")
        _json_values(path, ("grid", str(key)), values, lines)
        seen = [json.dumps(v, sort_keys=True) for v in values]
        if len(set(seen)) < len(seen):
            twice = next(values[i] for i, v in enumerate(seen) if seen.index(v) != i)
            raise InputError(f"{path}:{lines.get(('grid', str(key)), 1)} grid.{key}: {twice!r} is given more than "
                             "once; each value is one variant")
    n = math.prod(len(v) for v in grid.values())
    if n > MAX_VARIANTS:
        sizes = " x ".join(str(len(v)) for v in grid.values())
        raise InputError(f"{path}:{lines.get(('grid',), 1)} grid: {count(n)} variants ({sizes}), more than "
                         f"{MAX_VARIANTS:,}; split it into several sweep files (they can share one --out)")
    keys = [str(k) for k in grid]
    variants = []
    for combo in itertools.product(*grid.values()):
        params = dict(zip(keys, combo, strict=True))
        scn = copy.deepcopy(base)
        for k, v in params.items():
            _set_in(scn, k, v, f"{path}:{lines.get(('grid', k), 1)}")
        vid = variant_id(scn)
        scn["name"] = f"{scn.get('name', path.stem)}/{vid}"
        variants.append(Variant(vid, params, scn))
    output = data.get("output")
    if output is not None:
        output = str(path.parent / str(output))
    return Sweep(str(data.get("name", path.stem)), path, base_dir, keys, variants, output)


def _json_values(path: Path, at: tuple[str, ...], value: Any, lines) -> None:
    """Refuse a grid value that is not JSON (text, numbers, true/false, null, and lists and mappings
    of them): a YAML date, ``!!binary`` or ``!!set`` has no id and no table cell."""
    where = f"{path}:{lines.get(at, lines.get(at[:2], 1))} {'.'.join(at)}"
    if isinstance(value, dict):
        if len({isinstance(k, str) for k in value}) > 1 or not all(isinstance(k, (str, int, float)) for k in value):
            raise InputError(f"{where}: keys {list(value)!r}: expected all text (or all numbers)")
        for k, v in value.items():
            _json_values(path, (*at, str(k)), v, lines)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _json_values(path, (*at, str(i)), v, lines)
    elif not isinstance(value, (str, int, float, bool)) and value is not None:
        raise InputError(f"{where}: {str(value)[:60]} is a {type(value).__name__} value, not JSON; expected text, a "
                         "number, true/false, null, a list or a mapping (quote it to make it text)")


def _base(path: Path, base: Any, lines) -> tuple[dict, Path]:
    where = f"{path}:{lines.get(('base',), 1)} base"
    if isinstance(base, dict):
        return base, path.parent
    if isinstance(base, str):
        file = path.parent / base
        data, _ = load_yaml(file)
        if not isinstance(data, dict):
            raise InputError(f"{where}: {file} is not a scenario mapping")
        return data, file.parent
    raise InputError(f"{where}: expected a scenario file name or an inline scenario mapping")
