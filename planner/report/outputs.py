"""Where ``planner plan`` may write: ``--csv``/``--plot`` checked against the scenario's inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.outputs import IMAGE_SUFFIXES, check_output


def input_files(scenario_path: str | Path, scn: Any) -> list[Path]:
    """The files a scenario reads: itself, and any model config, profile or trace given by path."""
    names = [scn.model, scn.workload.trace, *(scn.search.hardware if scn.search else ())]
    names += [getattr(getattr(scn.workload, k), "trace", None) for k in ("input", "output")]
    return [Path(scenario_path), *(Path(n) for n in names if isinstance(n, str) and Path(n).is_file())]


def check_plan_outputs(scenario_path: str | Path, scn: Any, csv_out: str | None, plot: str | None) -> None:
    inputs = input_files(scenario_path, scn)
    if csv_out:
        check_output(csv_out, "--csv", inputs, (".csv", ".txt", ".tsv"))
    if plot:
        check_output(plot, "--plot", inputs, IMAGE_SUFFIXES)
    if csv_out and plot and Path(csv_out).resolve() == Path(plot).resolve():
        from planner.errors import InputError

        raise InputError(f"--csv and --plot name the same file {csv_out}")
