"""Where ``planner plan`` may write: ``--csv``/``--plot`` checked against the scenario's inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.checks import is_file
from planner.outputs import IMAGE_SUFFIXES, check_output


def input_files(scenario_path: str | Path, scn: Any) -> list[Path]:
    """The files a scenario reads: itself, and every file one of its values names (a model config,
    profile, framework, trace, measured table, ...), as given or relative to the scenario's folder,
    wherever in the scenario it is given."""
    here = Path(scenario_path).parent
    found = [Path(scenario_path)]

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, str) and v:
            found.extend(p for p in (Path(v), here / v) if is_file(p))

    walk(scn.model_dump(mode="json") if hasattr(scn, "model_dump") else scn)
    return found


def check_plan_outputs(scenario_path: str | Path, scn: Any, csv_out: str | None, plot: str | None) -> None:
    inputs = input_files(scenario_path, scn)
    if csv_out:
        check_output(csv_out, "--csv", inputs, (".csv", ".txt", ".tsv"))
    if plot:
        check_output(plot, "--plot", inputs, IMAGE_SUFFIXES)
    if csv_out and plot and Path(csv_out).resolve() == Path(plot).resolve():
        from planner.errors import InputError

        raise InputError(f"--csv and --plot name the same file {csv_out}")
