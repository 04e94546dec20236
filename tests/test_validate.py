"""The validation set and `planner validate`."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.validate import Point, default_path, load_points, predict, validate

runner = CliRunner()


def test_dataset_spans_vendors_phases_and_is_sourced():
    ds = load_points()
    assert len(ds.points) >= 40
    assert {p.vendor for p in ds.points} == {"nvidia", "amd", "huawei"}
    assert {"prefill_s", "decode_step_s"} <= {p.metric for p in ds.points}
    assert min(p.batch or 1 for p in ds.points) == 1 and max(p.batch or 1 for p in ds.points) >= 64
    assert all(p.source in ds.sources for p in ds.points)
    assert len({p.id for p in ds.points}) == len(ds.points)


def test_no_per_point_correction_factors():
    # A point can only say what was measured: any extra field (a fudge factor) is rejected, and the
    # prediction depends on nothing but the catalog entries the point names.
    raw = yaml.safe_load(default_path().read_text())
    fields = set(Point.model_fields)
    assert all(set(p) <= fields for p in raw["points"])
    with pytest.raises(Exception, match="Extra inputs"):
        Point(**raw["points"][0], efficiency=0.5)
    p = load_points().points[0]
    assert predict(p) == predict(p.model_copy(update={"value": p.value * 10, "source": "x"}))


def test_validate_json_shape_and_amd_accuracy():
    r = runner.invoke(app, ["validate", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert len(data["points"]) >= 40
    for kinds in data["summary"]["held_out"].values():
        for s in kinds.values():
            assert {"n", "median_abs_rel_error", "p90_abs_rel_error"} <= set(s)
    # held-out AMD points (vLLM ROCm, Llama-3.1-405B FP8, MI300X) within 15% median; see the README
    # for where NVIDIA (2023 vLLM) and Huawei (MTP not modelled) miss
    amd = data["summary"]["held_out"]["amd"]
    assert amd["latency"]["median_abs_rel_error"] <= 0.15
    assert amd["throughput"]["median_abs_rel_error"] <= 0.15


def test_modern_nvidia_points():
    # TensorRT-LLM (NIM) on H100: median within 20%, every TPOT within 20%; closed-loop TTFT at
    # concurrency 5-50 is underestimated by ~35% (prefill batching of synchronized clients), see README
    import numpy as np
    rows = [r for r in validate()["points"] if r["id"].startswith("nim-")]
    assert np.median([abs(r["rel_error"]) for r in rows]) <= 0.20
    assert all(abs(r["rel_error"]) <= 0.20 for r in rows if r["metric"] == "tpot_s")


def test_cloudmatrix384_reproduction():
    """DeepSeek-R1 INT8 on CloudMatrix384 (Zuo et al. 2025): prefill 6,688 tokens/s per NPU,
    decode TPOT 49.4 ms at 96 sequences per NPU (1,943 tokens/s per NPU). Tolerances: prefill 30%
    and decode at batch 96 25%, because the model has no MTP (1.7 tokens per step in the paper), no
    SP-TP-SP MLA overheads and assumes perfectly balanced experts (the paper's 'perfect EPLB')."""
    rows = {r["id"]: r for r in validate()["points"]}
    assert abs(rows["cm384-prefill"]["rel_error"]) <= 0.30
    assert abs(rows["cm384-decode-b96"]["rel_error"]) <= 0.25
