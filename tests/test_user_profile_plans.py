"""A scenario may search a profile of one's own (``search.hardware: [mine.yaml]``). The plan names the
device by its profile's name and later steps look it up again by that name (the notes, the
simulator check, a horizon's per-period curves): those lookups failed with "unknown hardware" after
the search had run. A file that takes a bundled profile's name, or two files one name, would be
looked up as the wrong device, so they are refused at their line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import planner
from planner.catalog.hardware import bundled_profiles_dir
from planner.errors import InputError
from planner.run import run_scenario

SCENARIOS = Path(__file__).parent.parent / "scenarios"
MINE = ("name: my-h100\nbase: h100-sxm\nsources: {mine: my STREAM run}\n"
        "memory:\n  bandwidth: {value: 3.0e12, source: mine}\n")


def _scenario(tmp_path, name: str, hardware: list[str], **top) -> Path:
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    data["search"]["hardware"] = hardware
    data.update(top)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_plan_on_a_profile_file_runs_to_its_end(tmp_path):
    (tmp_path / "mine.yaml").write_text(MINE)
    r = run_scenario(_scenario(tmp_path, "chat-h100", ["mine.yaml"], simulate={"requests": 400, "seed": 1}))
    assert r.best.hardware == "my-h100" and r.simulation is not None
    # slower memory than the H100 it is based on: never a cheaper plan than the H100's own
    h100 = run_scenario(_scenario(tmp_path, "chat-h100", ["h100-sxm"], simulate={"requests": 400, "seed": 1}))
    assert r.best.usd_per_h >= h100.best.usd_per_h


def test_a_horizon_on_a_profile_file(tmp_path):
    (tmp_path / "mine.yaml").write_text(MINE)
    data = yaml.safe_load((SCENARIOS / "horizon-chat-growth.yaml").read_text())
    data["search"]["hardware"] = ["mine.yaml"]
    data["workload"]["demand"]["hours"] = 48
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(data))
    r = run_scenario(path)
    assert r.candidates and r.candidates[0]["hardware"] == "my-h100"


def test_a_profile_file_with_a_bundled_name_is_refused_at_its_line(tmp_path):
    text = (bundled_profiles_dir() / "h100-sxm.yaml").read_text()
    (tmp_path / "copy.yaml").write_text(text)
    with pytest.raises(InputError, match=r"search\.hardware\.0: \S*copy\.yaml names its profile h100-sxm, a bundled "
                                         r"profile's name"):
        planner.load_scenario(_scenario(tmp_path, "chat-h100", ["copy.yaml"]))


def test_two_profile_files_of_one_name_are_refused(tmp_path):
    (tmp_path / "a.yaml").write_text(MINE)
    (tmp_path / "b.yaml").write_text(MINE.replace("3.0e12", "2.5e12"))
    with pytest.raises(InputError, match=r"search\.hardware\.1: \S*b\.yaml names its profile my-h100, as another file"):
        planner.load_scenario(_scenario(tmp_path, "chat-h100", ["a.yaml", "b.yaml"]))
