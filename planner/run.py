"""Run a scenario's design and collect a JSON-serializable result."""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from planner.catalog.model_catalog import model as get_model
from planner.designs.colocated import Deployment, SimCheck, rescaled, search_colocated, verify_by_simulation
from planner.designs.kv_cache import CacheReport
from planner.errors import InputError
from planner.perf.cost import PriceQuote
from planner.scenario import Scenario, load_scenario
from planner.serving.sessions import SessionWorkload
from planner.serving.workload import length_stats


class PlanResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    scenario: str
    design: str
    model: str
    rate: float
    mean_input_tokens: float
    mean_output_tokens: float
    best: Deployment
    alternatives: list[Deployment]
    analytic_instances: int
    simulation: SimCheck | None = None
    notes: list[str] = []
    prices: list[PriceQuote] = []
    certainty: dict | None = None      # sizes at P50 and at the scenario's confidence (planner.confidence)
    cache: CacheReport | None = None      # session workloads: the prefix cache of one instance


def run_scenario(scn: Scenario | str | Path):
    """Run the scenario's design at its ``confidence`` quantile of the error bands, and at the
    median, and attach both sizes (``certainty``: ``planner.confidence``); the result states the
    prices it used (``plan_prices``). ``scn`` is a ``Scenario`` or the path of a scenario file."""
    from planner.confidence import sized_at

    if isinstance(scn, (str, Path)):
        scn = load_scenario(scn)
    elif not isinstance(scn, Scenario):
        raise InputError(f"run_scenario takes a Scenario or a scenario file path, got {type(scn).__name__}")
    from planner.plan_prices import scenario_hardware, scenario_prices, with_prices

    rates = scn.cost.rates(scenario_hardware(scn))
    result = sized_at(scn, lambda s: _run_measured(s, rates), headline)
    return with_prices(result, scenario_prices(scn))


def _run_measured(scn: Scenario, rates: dict[str, float]):
    """The design with the scenario's measured step-time tables (``measured:``) in place of the
    roofline where they cover a query; the result's notes say so."""
    if not scn.measured:
        return _run_design(scn, rates)
    from planner.perf.measured import load_table, tables_in_use, usage_notes

    with tables_in_use({hw: load_table(path) for hw, path in scn.measured.items()}) as use:
        result = _run_design(scn, rates)
    if hasattr(result, "notes"):
        result = result.model_copy(update={"notes": [*result.notes, *usage_notes(use)]})
    return result


def _run_design(scn: Scenario, rates: dict[str, float]):
    """Run the scenario's design. Colocated: the cheapest deployment; with ``simulate:``, verify
    the pick in the simulator and add instances (up to ``max_extra_instances``) until the
    simulated requests meet the SLOs. Splitwise: every listed design and baseline at its largest
    SLO-meeting rate, with cost and power ratios. POLCA: the oversubscription sweep of a row.
    ``scn`` is a ``Scenario`` or the path of a scenario file."""
    if isinstance(scn, (str, Path)):
        scn = load_scenario(scn)
    elif not isinstance(scn, Scenario):
        raise InputError(f"run_scenario takes a Scenario or a scenario file path, got {type(scn).__name__}")
    m = scn.engine.model_as_run(get_model(scn.model))      # the recurrent-state format the engine is set to
    if scn.design.type == "splitwise":          # each design loads only when used (CLI start-up)
        from planner.designs.splitwise import plan_splitwise

        return plan_splitwise(m, scn.design, scn.workload, scn.slo, scn.engine, rates, scn.name, scn.kv_cache)
    if scn.design.type == "polca":
        from planner.designs.polca import plan_polca

        return plan_polca(m, scn.design, scn.workload, scn.engine, scn.name)
    if scn.design.type == "prfaas":
        from planner.designs.prfaas import plan_prfaas

        workload, cache = scn.workload, None
        if isinstance(workload, SessionWorkload):   # sessions: the hit rate of the local site's KV tiers
            from planner.designs.kv_cache import KVCacheSpec, site_cache

            site = scn.design.local
            workload, cache = site_cache(m, workload, scn.kv_cache or KVCacheSpec(), site.hardware, site.tp, site.ep,
                                         site.instances, scn.design.weight_dtype, scn.design.kv_dtype)
        return plan_prfaas(m, scn.design, workload, rates, scn.name).model_copy(update={"cache": cache})
    if scn.design.type == "distserve":
        from planner.designs.distserve import plan_distserve

        return plan_distserve(m, scn.design, scn.workload, scn.slo, scn.engine, scn.name)
    if scn.design.type == "fleet":
        from planner.designs.fleet import plan_fleet

        s = scn.search
        assert s is not None
        return plan_fleet(m, scn.design, scn.workload, scn.slo, scn.engine, scn.cost, s.hardware, s.tp, s.ep, s.pp,
                          s.weight_dtype, s.kv_dtype, scn.name, s.max_instances)
    if scn.design.type == "horizon":
        from planner.designs.horizon import plan_horizon

        return plan_horizon(m, scn.design, scn.workload, scn.slo, scn.engine, scn.cost, scn.search, scn.name)
    if scn.design.type == "slo-search":
        from planner.designs.slo_search import plan_slo_search

        s = scn.search
        assert s is not None
        return plan_slo_search(m, scn.design, scn.workload, scn.slo, scn.engine, s.hardware, s.tp, s.ep, s.pp,
                               s.weight_dtype, s.kv_dtype, scn.name, workers=s.workers)
    s = scn.search
    assert s is not None
    workload, cache = scn.workload, None
    if isinstance(workload, SessionWorkload):     # hit rate and deployment at a fixed point
        from planner.designs.kv_cache import KVCacheSpec, plan_with_cache

        args = dict(slo=scn.slo, engine=scn.engine, cost=scn.cost, hardware=s.hardware, tp=s.tp, ep=s.ep, pp=s.pp,
                    weight_dtypes=s.weight_dtype, kv_dtype=s.kv_dtype, max_instances=s.max_instances)
        deployments, workload, cache = plan_with_cache(m, workload, scn.kv_cache or KVCacheSpec(), args)
    else:
        deployments = search_colocated(m, workload, scn.slo, scn.engine, scn.cost, s.hardware, s.tp, s.ep, s.pp,
                                       s.weight_dtype, s.kv_dtype, s.max_instances, top=9,
                                       workers=s.workers).deployments
    best = deployments[0]
    seen, alternatives = set(), []
    for d in deployments[1:]:
        key = (d.hardware, d.tp, d.ep, d.pp, d.weight_dtype)
        if key not in seen and len(alternatives) < 8:
            seen.add(key)
            alternatives.append(d)
    stats = length_stats(workload)
    notes, sim = _framework_scheduling(scn.engine, best.hardware) + _device_limits(scn.engine, best.hardware), None
    notes += _beyond_window(m, scn.workload)
    if scn.engine.mtp_tokens:
        notes.append(f"decode with {scn.engine.mtp_tokens} MTP draft token(s), {scn.engine.mtp_acceptance:.0%} "
                     f"accepted: {scn.engine.speculation.tokens_per_step:.2f} tokens per decode step")
    analytic_k = best.instances
    if scn.simulate is not None:
        spec = scn.simulate
        for extra in range(spec.max_extra_instances + 1):
            sim = verify_by_simulation(m, best, workload, scn.slo, scn.engine, spec.requests, spec.seed,
                                       instances=analytic_k + extra)
            if sim.meets_slo:
                break
        if sim.instances != analytic_k:
            notes.append(f"the simulator needed {sim.instances} instances where the analytic model chose "
                         f"{analytic_k}; the deployment below is scaled to {sim.instances}")
            best = rescaled(best, sim.instances)
            # the alternatives were sized by the same analytic model: apply the same correction, so
            # none looks cheaper than the pick only because it was not simulated
            alternatives = [rescaled(d, -(-d.instances * sim.instances // analytic_k)) for d in alternatives]
            notes.append("alternatives scaled by the same simulator correction (not simulated themselves)")
        if not sim.meets_slo:
            notes.append("the simulator still sees SLO violations: " + "; ".join(sim.violations))
    if (note := _headroom_note(best)) is not None:
        notes.append(note)
    return PlanResult(scenario=scn.name, design=scn.design.type, model=m.name, rate=workload.request_rate,
                      mean_input_tokens=stats.mean_input, mean_output_tokens=stats.mean_output, best=best,
                      alternatives=alternatives, analytic_instances=analytic_k, simulation=sim, notes=notes,
                      cache=cache)


def _headroom_note(best) -> str | None:
    """A note when the chosen deployment runs within ``THROUGHPUT_MARGIN`` of the most load that meets
    its SLOs: that much less throughput than modelled would miss them (MLPerf's Server runs, at 92-100%
    of capacity, measured latencies 1.3-5.7x the model's there), with the instance count that keeps
    the margin in hand."""
    from planner.serving.load_point import THROUGHPUT_MARGIN

    keep = 1 - THROUGHPUT_MARGIN
    share = best.rate_per_instance / best.max_rate_per_instance if best.max_rate_per_instance > 0 else 0.0
    if share < keep:
        return None
    safe = math.ceil(best.rate_per_instance * best.instances / (keep * best.max_rate_per_instance) - 1e-9)
    margin = f"{THROUGHPUT_MARGIN:.0%}"
    return (f"each instance runs at {share:.0%} of the most load that meets the SLOs: {margin} less throughput "
            f"than modelled would miss them; {safe} instances keep {margin} in hand")


def _device_limits(engine, hardware: str) -> list[str]:
    """A note naming the batch limits the engine picks by itself on the chosen device where the
    scenario gives none (``Engine.batch_limits``: vLLM's budget below 70 GiB, SGLang's chunk)."""

    engine = engine.on(hardware)
    hw = engine.profile_on(hardware)
    picked = engine.device_picks(hw)
    if not picked:
        return []
    parts = []
    if "max_batched_tokens" in picked:
        parts.append(f"{picked['max_batched_tokens']:,} tokens per iteration")
    if "max_num_seqs" in picked:
        parts.append(f"{picked['max_num_seqs']:,} sequences"
                     + (" per attention-DP worker" if hw.engine_defaults.seqs_per_replica else ""))
    return [f"engine limits on {hw.name}: {', '.join(parts)} ({hw.framework}'s own default for this device; "
            f"engine.max_batched_tokens / engine.max_num_seqs to change)"]


def _beyond_window(m, workload) -> list[str]:
    """A note where some of the workload's requests (a trace's, or a session's later turns) are
    longer than the model's context window: they are planned as recorded (as the Splitwise
    reproduction runs BLOOM-176B on Azure's longer prompts), though an engine would refuse them."""
    window = m.max_context
    if not window:
        return []
    i, o, w = workload.joint_support()
    over = (i + o) > window
    share = float(w[over].sum() / w.sum()) if w.sum() > 0 else 0.0
    if share <= 0:
        return []
    return [f"{share:.1%} of the requests (up to {float((i + o).max()):,.0f} tokens) are longer than {m.name}'s "
            f"context window of {window:,} tokens: they are planned as recorded, though an engine refuses them "
            "(vLLM: longer than max_model_len); "
            + ("set workload.sessions.max_context to end sessions before it" if hasattr(workload, "sessions") else
               "plan a model with a longer context, or lengths that fit it")]


def _framework_scheduling(engine, hardware: str) -> list[str]:
    """Notes naming the scheduler knobs the engine's framework entry sets (``Framework.engine_knobs``)
    and the memory setting (and KV-pool cap) the scenario gives its engine, in that engine's sense
    (the default engine is the chosen ``hardware``'s)."""
    from planner.catalog.frameworks import engine_name, framework
    from planner.catalog.hardware import hardware as get_hardware

    engine = engine.on(hardware)
    fw = framework(engine_name(engine.framework, get_hardware(hardware)))
    notes = []
    if engine.memory_fraction is not None:
        free = fw.memory_policy is not None and fw.memory_policy.kind == "free_fraction"
        notes.append(f"engine memory setting {engine.memory_fraction:g} of "
                     f"{'the memory weights and activations leave' if free else 'total device memory'} "
                     f"({fw.name}, engine.memory_fraction): the KV cache of every candidate is sized with it")
    if engine.kv_pool_tokens is not None:
        notes.append(f"engine KV pool capped at {engine.kv_pool_tokens:,} tokens per attention replica "
                     f"(engine.kv_pool_tokens): every candidate's pool is the smaller of that and what memory holds")
    if engine.framework is None:
        return notes
    held = [f"{k}={v}" for k, v in fw.engine_knobs().items() if getattr(engine, k) == v]
    if held:
        notes.append(f"engine scheduling of {engine.framework}: {', '.join(held)} (set under engine: to change)")
    return notes


def headline(result) -> dict:
    """A few comparable numbers of any design's result (``planner compare``)."""
    d = result.design
    head = {"scenario": result.scenario, "design": d, "model": result.model}
    if d == "colocated":
        b = result.best
        layout = f"tp{b.tp}" + (f" ep{b.ep}" if b.ep > 1 else "") + (f" pp{b.pp}" if b.pp > 1 else "")
        head |= {"deployment": f"{b.instances} x {b.hardware} {layout} {b.weight_dtype}", "engine": b.engine,
                 "accelerators": b.accelerators,
                 "usd_per_h": b.usd_per_h, "usd_per_million_output_tokens": b.usd_per_million_output_tokens,
                 "ttft_p90_s": b.ttft_s["p90"], "tpot_p90_s": b.tpot_s["p90"], "avg_power_w": b.avg_power_w,
                 "output_tokens_per_joule": b.output_tokens_per_joule, "binding": b.binding,
                 "goodput_req_per_s_per_gpu": b.max_rate_per_instance * b.instances / b.accelerators}
    elif d == "slo-search":
        top = result.best[0]
        head |= {"best": f"{top.mode} {top.hardware} {top.layout} {top.weight_dtype}",
                 "tokens_per_s_per_gpu": top.tokens_per_s_per_gpu, "tokens_per_s_per_user": top.tokens_per_s_per_user}
    elif d == "splitwise":
        top = max(result.rows, key=lambda r: r.max_rate, default=None)    # none: a search that found no split
        head |= {"best": None, "max_rate": 0.0} if top is None else {
            "best": top.name, "max_rate": top.max_rate, "usd_per_h": top.usd_per_h,
            "provisioned_power_w": top.provisioned_power_w,
            "goodput_req_per_s_per_gpu": top.max_rate / top.accelerators}
    elif d == "distserve":
        top = result.best[0]
        head |= {"best": f"{top.placement} {top.layout}", "goodput_req_per_s_per_gpu": top.goodput_per_gpu}
    elif d == "polca":
        head |= {"extra_servers_fraction": result.extra_servers_fraction, "extra_servers": result.extra_servers}
    elif d == "prfaas":
        head |= {k: float(v) for k, v in result.gains.items()}
    elif d == "horizon":
        head |= {"deployment": result.deployment,
                 "reserved": ", ".join(f"{n} x {k}" for k, n in result.reserved.items()),
                 "usd_total": result.totals["total"],
                 "usd_static_peak_on_demand": result.comparisons["static_peak_on_demand"]}
    elif d == "fleet":
        head |= {"fleet": ", ".join(f"{n} x {h}" for h, n in result.instances.items()), "usd_per_h": result.usd_per_h,
                 "saving_vs_best_single": result.saving_vs_best_single}
    return head
