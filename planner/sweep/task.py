"""One sweep variant as a task: validate the scenario, run it, flatten the result into a row.
Top-level and free of open handles, so process pools and Dask workers can pickle it."""

from __future__ import annotations

import json
import time
from typing import Any


def param_value(v: Any) -> Any:
    """A grid value as a table cell: scalars as they are, lists and mappings as JSON."""
    return v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v, sort_keys=True)


def validate(scenario: dict, base_dir: str):
    """The ``Scenario`` of a variant (pydantic errors propagate as ``ValidationError``)."""
    from planner.scenario import Scenario

    return Scenario.model_validate(scenario, context={"base": base_dir})


def run_variant(vid: str, params: dict, scenario: dict, base_dir: str) -> dict:
    """Row of one variant: its id and grid values, ``status`` (ok, infeasible or error), the
    message of a failure, the wall time, and the design's headline numbers (``planner.run.headline``)."""
    from planner.errors import PlannerError
    from planner.run import headline, run_scenario

    row: dict[str, Any] = {"id": vid, **{k: param_value(v) for k, v in params.items()}}
    t = time.perf_counter()
    try:
        result = run_scenario(validate(scenario, base_dir))
        row |= {"status": "ok", "message": ""}
        row |= {f"result.{k}": v for k, v in headline(result).items() if k not in ("scenario",)}
    except PlannerError as e:
        row |= {"status": "infeasible" if e.exit_code == 1 else "error", "message": str(e)}
    row["seconds"] = time.perf_counter() - t
    return row


def run_variants(batch: list[tuple[str, dict, dict]], base_dir: str) -> list[dict]:
    """Rows of several variants ``(id, params, scenario)``: one task for a pool or a Dask worker,
    so that short variants do not pay a scheduling round trip each."""
    return [run_variant(vid, params, scenario, base_dir) for vid, params, scenario in batch]
