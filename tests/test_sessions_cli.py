"""Session scenarios end to end: the one-turn equivalence through the planner, CLI errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.run import run_scenario
from planner.scenario import load_scenario

BASE = """
name: {name}
model: llama-3.1-8b
workload:
{workload}
slo: {{ttft_s: {{p90: 1.0}}, tpot_s: {{p90: 0.05}}}}
search: {{hardware: [h100-sxm], tp: [1, 2]}}
"""
LENGTHS = "{dist: lognormal, median: 800, p90: 3000}", "{dist: lognormal, median: 200, p90: 600}"


def _write(tmp_path, name, workload):
    f = tmp_path / f"{name}.yaml"
    f.write_text(BASE.format(name=name, workload=workload))
    return f


def test_one_turn_sessions_plan_like_independent_requests(tmp_path):
    plain = _write(tmp_path, "plain", f"  rate: 12\n  input: {LENGTHS[0]}\n  output: {LENGTHS[1]}")
    sess = _write(tmp_path, "sess", f"  rate: 12\n  sessions:\n    turns: {{dist: fixed, value: 1}}\n"
                  f"    new_input: {LENGTHS[0]}\n    output: {LENGTHS[1]}\n"
                  "    think: {dist: exponential, mean_s: 1}")
    a, b = run_scenario(load_scenario(plain)), run_scenario(load_scenario(sess))
    assert a.best == b.best
    assert b.cache.hit_rate == 0.0 and b.cache.upper_bound == 0.0


def test_malformed_session_trace_exits_2(tmp_path):
    trace = tmp_path / "turns.csv"
    trace.write_text("session_id,timestamp,input_tokens,output_tokens\nx,0,100,5\nx,3,120,-4\n")
    scn = _write(tmp_path, "bad", "  sessions: {trace: turns.csv}")
    r = CliRunner().invoke(app, ["plan", str(scn)])
    assert r.exit_code == 2
    assert "turns.csv:3:9:" in r.output and "output_tokens" in r.output


def test_unknown_tier_and_preset_exit_2(tmp_path):
    scn = _write(tmp_path, "tier", "  rate: 1\n  sessions: {preset: chat}")
    scn.write_text(scn.read_text() + "kv_cache: {tiers: [hbm, floppy]}\n")
    r = CliRunner().invoke(app, ["plan", str(scn)])
    assert r.exit_code == 2 and "kv_cache.tiers" in r.output
    scn = _write(tmp_path, "preset", "  rate: 1\n  sessions: {preset: chatt}")
    r = CliRunner().invoke(app, ["plan", str(scn)])
    assert r.exit_code == 2 and "did you mean 'chat'" in r.output


def test_sessions_command_json(tmp_path):
    scn = _write(tmp_path, "chat", "  rate: 4\n  sessions: {preset: chat}")
    r = CliRunner().invoke(app, ["sessions", str(scn), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    hits = out["curve"]["analytic_hit_rate"]
    assert all(b >= a - 1e-12 for a, b in zip(hits, hits[1:], strict=False))
    assert abs(out["plan"]["cache"]["hit_rate"] - out["plan"]["cache"]["simulated_hit_rate"]) < 0.10


def test_bundled_session_scenarios_load():
    from pathlib import Path

    from planner.serving.sessions import SessionWorkload

    root = Path(__file__).resolve().parent.parent / "scenarios"
    for name in ("coding-agent-h200-hbm", "coding-agent-h200-offload", "reasoning-mi300x-vs-h200",
                 "rag-128k-cloudmatrix"):
        scn = load_scenario(root / f"{name}.yaml")
        assert isinstance(scn.workload, SessionWorkload) and scn.kv_cache is not None


def test_prfaas_sites_default_to_the_workload_hit():
    """A PrfaaS site without its own prefix_hit takes the workload's (which sessions derive)."""
    from pathlib import Path

    from planner.catalog.model_catalog import model
    from planner.designs.prfaas import plan_prfaas

    root = Path(__file__).resolve().parent.parent / "scenarios"
    text = (root / "prfaas-case-study.yaml").read_text().replace("model: models/", f"model: {root}/models/")
    scn = load_scenario_text(text, root)
    m = model(scn.model)
    given = scn.design.model_copy(update={s: getattr(scn.design, s).model_copy(update={"prefix_hit": 0.3})
                                          for s in ("local", "remote")})
    prices = {"h20": 2.4, "h200": 5.408}      # named rates (NaN prices would never compare equal)
    a = plan_prfaas(m, scn.design, scn.workload.model_copy(update={"prefix_hit": 0.3}), prices, "a")
    b = plan_prfaas(m, given, scn.workload, prices, "a")
    assert a.systems == b.systems


def test_site_hit_rises_with_instances():
    from planner.catalog.model_catalog import model
    from planner.designs.kv_cache import KVCacheSpec, site_cache
    from planner.serving.sessions import SessionWorkload

    w = SessionWorkload(rate=20.0, sessions={"preset": "coding_agent", "max_context": 131072})
    m = model("llama-3.1-70b")
    hits = [site_cache(m, w, KVCacheSpec(), "h200", 8, 1, k, "fp8", None)[0].prefix_hit for k in (1, 2, 4, 8, 16)]
    assert all(b >= a for a, b in zip(hits, hits[1:], strict=False)) and hits[-1] > hits[0]


def load_scenario_text(text, root):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "s.yaml"
        f.write_text(text)
        return load_scenario(f)


def test_kv_cache_without_sessions_exits_2(tmp_path):
    scn = _write(tmp_path, "plainkv", f"  rate: 12\n  input: {LENGTHS[0]}\n  output: {LENGTHS[1]}")
    scn.write_text(scn.read_text() + "kv_cache: {tiers: [hbm]}\n")
    r = CliRunner().invoke(app, ["plan", str(scn)])
    assert r.exit_code == 2 and "session workload" in r.output


def test_plan_from_a_session_trace(tmp_path):
    """A synthetic trace: 200 sessions of 4 turns 30 s apart, each turn adding 300 + 100 tokens to a
    500-token system prompt. Upper bound: (4 x 500 + 400 + 800 + 1200) / (800 + 1200 + 1600 + 2000)."""
    rows = ["session_id,timestamp,input_tokens,output_tokens"]
    for s in range(200):
        for k in range(4):
            rows.append(f"s{s},{s * 2 + 30 * k},{500 + 400 * k + 300},100")
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    scn = _write(tmp_path, "trace", "  sessions: {trace: t.csv, system_prompt: 500}")
    r = run_scenario(load_scenario(scn))
    assert r.cache.upper_bound == pytest.approx(4400 / 5600)
    assert r.cache.hit_rate <= r.cache.upper_bound + 1e-9
    assert abs(r.cache.hit_rate - r.cache.simulated_hit_rate) < 0.10
