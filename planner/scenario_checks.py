"""Checks across a scenario's sections, each blaming the field at fault (``checks.located``):
names used as mapping keys (prices per hardware, fleet availability) must name hardware the
scenario can use, and the request lengths must fit the model's context window."""

from __future__ import annotations

import difflib
from typing import Any

from planner.checks import located
from planner.errors import PlannerError


def check_scenario(scn: Any) -> None:
    """Raise a located ``ValueError`` for the first cross-section problem of ``scn``."""
    _check_design_names(scn)
    _check_profile_files(scn)
    _check_one_engine(scn)
    _check_framework_vendors(scn)
    _check_split_engines(scn)
    _check_design_machines(scn)
    _check_search_layouts(scn)
    _check_something_to_evaluate(scn)
    _check_price_keys(scn)
    _check_fleet_available(scn)
    _check_context(scn)
    _check_draft(scn)
    _check_state_dtype(scn)
    _check_prfaas_engine(scn)


def _check_prfaas_engine(scn: Any) -> None:
    """PrfaaS sites run the planner's default engine (``designs.prfaas``), not the scenario's: of
    the engine section it reads only the recurrent-state format (``state_dtype``, set on the
    model), so any other field given there would be ignored."""
    if scn.design.type != "prfaas":
        return
    ignored = sorted(set(scn.engine.model_fields_set) - {"state_dtype"}, key=lambda f: (f != "framework", f))
    if ignored:
        raise located(f"engine.{ignored[0]}", "a prfaas design runs every site on the planner's default engine "
                      "(each vendor's vLLM, unbounded batch) and reads only engine.state_dtype from the engine "
                      "section, so this would be ignored; remove it")


def _check_state_dtype(scn: Any) -> None:
    """A recurrent-state format needs recurrent states: on a model without linear-attention
    layers it would be ignored."""
    from planner.catalog.model_catalog import model

    if scn.engine.state_dtype is not None and model(scn.model).linear_attention is None:
        raise located("engine.state_dtype", f"{scn.model} has no linear-attention layers, so it keeps no recurrent "
                      "states and this setting would be ignored; remove it, or plan a hybrid model (e.g. "
                      "qwen3-next-80b-a3b)")


def _check_draft(scn: Any) -> None:
    """An EAGLE-3 draft must read the scenario model's hidden states."""
    from planner.catalog.draft import draft
    from planner.catalog.model_catalog import model
    from planner.errors import InputError

    if scn.engine.draft is None:
        return
    try:
        draft(scn.engine.draft).check_target(model(scn.model))
    except InputError as e:
        raise located("engine.draft", str(e)) from None


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    prefixed = [k for k in known if k.startswith(name.lower())]
    pick = (prefixed or close)[:1]
    return (f"; did you mean {pick[0]!r}?" if pick else "") + f" (known: {', '.join(sorted(known))})"


def _design_strings(scn: Any) -> list[tuple[str, str, str]]:
    """(dotted path, key, value) of every string in the design section whose key names a catalog
    entry: ``hardware``, ``framework``, ``counterfactual_model`` and Splitwise search ``pairs``."""
    out: list[tuple[str, str, str]] = []
    stack: list[tuple[str, Any]] = [("design", scn.design.model_dump())]
    while stack:
        path, x = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("hardware", "framework", "counterfactual_model") and isinstance(v, str):
                    out.append((f"{path}.{k}", k, v))
                elif k == "pairs" and isinstance(v, (list, tuple)):
                    out += [(f"{path}.pairs.{i}", "hardware", h) for i, pair in enumerate(v)
                            if isinstance(pair, (list, tuple)) for h in pair if isinstance(h, str)]
                else:
                    stack.append((f"{path}.{k}", v))
        elif isinstance(x, (list, tuple)):
            stack += [(f"{path}.{i}", v) for i, v in enumerate(x)]
    return sorted(out)


def _check_design_names(scn: Any) -> None:
    """Pools, sites, baselines, framework entries: unknown names blamed where they are written."""
    from planner.catalog.frameworks import framework
    from planner.catalog.hardware import hardware
    from planner.catalog.model_catalog import model

    lookup = {"hardware": hardware, "framework": framework, "counterfactual_model": model}
    for path, key, value in _design_strings(scn):
        try:
            lookup[key](value)
        except PlannerError as e:
            raise located(path, str(e)) from None


def _check_profile_files(scn: Any) -> None:
    """A plan names a device by its profile's name and looks it up again by that name (notes,
    prices, the simulator check): a profile file of one's own must not take a bundled profile's
    name, nor two files one name."""
    from planner.catalog.hardware import hardware, is_bundled_hardware

    spelled = [(f"search.hardware.{i}", h) for i, h in enumerate(scn.search.hardware)] if scn.search else []
    spelled += [(path, v) for path, k, v in _design_strings(scn) if k == "hardware"]
    seen: dict[str, Any] = {}
    for path, spelling in spelled:
        if not spelling.endswith((".yaml", ".yml")):
            continue
        try:
            hw = hardware(spelling)
        except PlannerError:          # blamed where it is read
            continue
        if is_bundled_hardware(hw.name):
            raise located(path, f"{spelling} names its profile {hw.name}, a bundled profile's name, which the plan "
                          f"would look up (and price) as the bundled one; give it a name of its own (base: "
                          f"{hw.name} keeps the bundled figures it does not change)")
        if seen.setdefault(hw.name, hw) != hw:
            raise located(path, f"{spelling} names its profile {hw.name}, as another file of this scenario does; "
                          "give each its own name")


def _design_frameworks(scn: Any) -> list[tuple[str, Any]]:
    """(dotted path, choice) of the engine the design names for its machines: ``design.framework``
    (Splitwise, POLCA, DistServe) or a horizon's ``design.splitwise.framework``."""
    out = [("design.framework", getattr(scn.design, "framework", None))]
    inner = getattr(scn.design, "splitwise", None)
    out.append(("design.splitwise.framework", getattr(inner, "framework", None)))
    return [(path, choice) for path, choice in out if choice is not None]


def _check_one_engine(scn: Any) -> None:
    """A design that names the engine its machines run names the scenario's engine where
    ``engine.framework`` names none (``Scenario._one_engine``); two different ones would leave one
    unread."""
    named = scn.engine.framework
    for path, choice in _design_frameworks(scn):
        if choice != named:
            raise located(path, f"engine.framework is {named} but this is {choice}: one engine runs the design's "
                          "machines; name it in one place (or the same in both)")


def _check_framework_vendors(scn: Any) -> None:
    """A framework the scenario names must run on every device it may be applied to
    (``frameworks.vendor_mismatch``), and a mapping's keys must name a vendor or a device the
    scenario uses: refused at the field (the mapping's key) before any candidate is evaluated."""
    from planner.catalog.frameworks import framework, framework_for, vendor_mismatch
    from planner.catalog.hardware import hardware

    devices = []
    for spelling in _used_hardware(scn).values():
        try:
            devices.append(hardware(spelling))
        except PlannerError:          # an unknown name is blamed where it is written
            continue
    vendors = sorted({d.vendor for d in devices})
    names = sorted({d.name for d in devices})
    # the design's first: where it names the engine, engine.framework is a copy of it
    for path, choice in [*_design_frameworks(scn), ("engine.framework", scn.engine.framework)]:
        if choice is None:
            continue
        if isinstance(choice, dict):
            for key in choice:
                if key not in vendors and key not in names and devices:
                    close = difflib.get_close_matches(key, [*vendors, *names], n=1, cutoff=0.6)
                    raise located(f"{path}.{key}", f"names neither a vendor ({', '.join(vendors)}) nor a device "
                                  f"({', '.join(names)}) of this scenario, so it would be ignored"
                                  + (f"; did you mean {close[0]!r}?" if close else ""))
        for hw in devices:
            name = framework_for(choice, hw)
            if name is None:
                continue
            if why := vendor_mismatch(framework(name), hw):
                if isinstance(choice, dict):
                    raise located(f"{path}.{hw.name if hw.name in choice else hw.vendor}",
                                  f"{why}; or drop this key: {hw.name} then runs its vendor's default")
                raise located(path, why + ("" if len(vendors) == 1 else
                                           "; or leave it unset: each device then runs its own vendor's default"))


def _check_split_engines(scn: Any) -> None:
    """A Splitwise design's prompt and token machines run one engine (``Framework.family``): the KV
    cache moves from a prompt machine to a token machine through that engine's own transfer
    connector (vLLM's KV connectors, SGLang's disaggregation backends, ...), and no engine hands its
    cache to another's decode. Where a mapping by vendor or device gives the two machines entries
    of different engines, the pair is refused at its line."""
    from planner.catalog.frameworks import engine_name, family_entries, framework
    from planner.catalog.hardware import hardware

    d = scn.design
    spec, path = (d, "design") if d.type == "splitwise" else (getattr(d, "splitwise", None), "design.splitwise")
    if spec is None or not isinstance(scn.engine.framework, dict):
        return            # one entry (or each vendor's vLLM) on both machines
    pairs = [(f"{path}.designs.{i}.token.hardware", c.prompt.hardware, c.token.hardware)
             for i, c in enumerate(spec.designs)]
    pairs += [(f"{path}.search.pairs.{i}", p, t) for i, (p, t) in enumerate(spec.search.pairs if spec.search else [])]
    for where, prompt, token in pairs:
        try:
            hp, ht = hardware(prompt), hardware(token)
        except PlannerError:          # an unknown name is blamed where it is written
            continue
        fp, ft = (framework(engine_name(scn.engine.framework, h)) for h in (hp, ht))
        if fp.family and ft.family and fp.family != ft.family:
            alt = family_entries(fp.family, ht)
            fix = f"map {ht.name} to {_engine_label(alt[0])}" if alt else f"map {hp.name} to an entry of {ft.family}"
            raise located(where, f"prompt machines ({hp.name}) run {_engine_label(fp.name)} and token machines "
                          f"({ht.name}) run {_engine_label(ft.name)}: the KV cache moves between them through one "
                          f"engine's own transfer connector, so both pools run one engine; {fix}")


def _engine_label(name: str) -> str:
    """``vllm-rocm (vllm)``: an entry with its engine family where the names differ."""
    from planner.catalog.frameworks import framework

    family = framework(name).family
    return name if family in (None, name) else f"{name} ({family})"


def _check_search_layouts(scn: Any) -> None:
    """A search whose degree lists give no valid layout on any of its hardware has nothing to
    evaluate: refused at search.tp with why (it ran and answered "no valid layout", exit 1)."""
    from planner.catalog.hardware import hardware
    from planner.catalog.model_catalog import model
    from planner.search import layout_problems_on

    s = scn.search
    if s is None or scn.design.type not in ("colocated", "fleet", "slo-search", "horizon"):
        return
    m = model(scn.model)
    try:
        devices = [hardware(h) for h in s.hardware]
    except PlannerError:               # an unknown name is blamed where it is written
        return
    why = []
    for hw in devices:
        lay, problems = layout_problems_on(m, hw, s.tp, s.ep, s.pp)
        if (problems == "").any():
            return
        why += [f"tp={t} ep={e} pp={p} on {hw.name}: {text}"
                for t, e, p, text in zip(lay.tp, lay.ep, lay.pp, problems, strict=True)]
    raise located("search.tp", f"no layout of {scn.model} from these degrees is valid on the searched hardware: "
                  + "; ".join(why[:3]) + (f"; and {len(why) - 3} more" if len(why) > 3 else ""))


def _check_something_to_evaluate(scn: Any) -> None:
    """A Splitwise design with no pools to compare has no answer (it crashed on an empty table)."""
    d = scn.design
    if d.type == "splitwise" and not (d.baselines or d.designs or d.search):
        raise located("design.designs", "nothing to evaluate: give at least one of designs (prompt and token "
                      "pools), baselines (one colocated pool) or search")


def _check_design_machines(scn: Any) -> None:
    """Every fixed layout the design names (a pool, site, machine or reference: a mapping with a
    hardware and an integer tp) must split the model, over a multi-die package's dies too, and
    every power cap must leave the device more than its idle power: blamed at the field, before
    any evaluation (they failed mid-run, unlocated)."""
    from planner.catalog.hardware import hardware
    from planner.catalog.model_catalog import model
    from planner.perf.parallel import Layout, die_layout_problems

    m = None
    stack: list[tuple[str, Any]] = [("design", scn.design.model_dump())]
    while stack:
        path, x = stack.pop()
        if isinstance(x, dict):
            if isinstance(x.get("hardware"), str) and isinstance(x.get("power_cap"), float):
                hw = hardware(x["hardware"])
                cap_w, idle = x["power_cap"] * hw.power.tdp.value, hw.power.idle.value
                if cap_w <= idle:
                    raise located(f"{path}.power_cap", f"{x['power_cap']:g} x {hw.name}'s TDP is {cap_w:.0f} W, at "
                                  f"or below its idle power ({idle:.0f} W): expected power_cap above "
                                  f"{idle / hw.power.tdp.value:.2f}")
            if isinstance(x.get("hardware"), str) and isinstance(x.get("tp"), int):
                m = m or model(scn.model)
                degrees = [x.get(k) if isinstance(x.get(k), int) else 1 for k in ("tp", "ep", "pp")]
                why = str(die_layout_problems(m, hardware(x["hardware"]), Layout.of(*degrees))[()])
                if why:
                    raise located(f"{path}.tp", f"tp={degrees[0]} ep={degrees[1]} pp={degrees[2]} on "
                                  f"{x['hardware']} for {m.name}: {why}")
            stack += [(f"{path}.{k}", v) for k, v in x.items()]
        elif isinstance(x, (list, tuple)):
            stack += [(f"{path}.{i}", v) for i, v in enumerate(x)]


def _used_hardware(scn: Any) -> dict[str, str]:
    """Profile name -> the spelling the scenario used, over the search space and the design."""
    from planner.catalog.hardware import hardware

    names = list(scn.search.hardware) if scn.search is not None else []
    names += [v for _, k, v in _design_strings(scn) if k == "hardware"]
    out = {}
    for n in names:
        try:
            out[hardware(n).name] = n
        except PlannerError:
            out[n] = n
    return out


def _check_price_keys(scn: Any) -> None:
    for field in ("usd_per_h", "purchase_usd"):
        keys = getattr(scn.cost, field)
        if not keys:
            continue
        used = _used_hardware(scn)
        from planner.catalog.hardware import list_hardware

        known = sorted({*used, *list_hardware()})
        for key in keys:
            if key not in known:
                raise located(f"cost.{field}.{key}", f"unknown hardware {key!r}" + _did_you_mean(key, known))


def _check_fleet_available(scn: Any) -> None:
    available = getattr(scn.design, "available", None)
    if scn.design.type != "fleet" or not available:
        return
    known = list(scn.search.hardware)
    for key, n in available.items():
        if key not in known:
            raise located(f"design.available.{key}", f"{key!r} is not in search.hardware"
                          + _did_you_mean(key, known))
        if n < 0:
            raise located(f"design.available.{key}", f"must be >= 0 instances, got {n}")


def _check_context(scn: Any) -> None:
    """Explicit length distributions must fit the window. Traces are replayed as recorded (the
    Splitwise reproduction runs BLOOM-176B, a 2,048-token model, on Azure's longer prompts)."""
    from planner.catalog.model_catalog import model

    w = scn.workload
    window = model(scn.model).max_context
    sessions = getattr(w, "sessions", None)
    if window and sessions is not None and sessions.max_context is not None and sessions.max_context > window:
        raise located("workload.sessions.max_context", f"{sessions.max_context:,} tokens exceeds {scn.model}'s "
                      f"context window of {window:,} tokens: expected at most {window:,}")
    explicit = [(k, getattr(w, k)) for k in ("input", "output") if getattr(w, k) is not None
                and getattr(w, k).dist != "trace"]
    if not window or not explicit:
        return
    i, o, _ = w.joint_support()
    longest = float((i + o).max())
    if longest > window:
        raise located(f"workload.{explicit[0][0]}", f"the longest request (input + output = {longest:,.0f} tokens) "
                      f"exceeds {scn.model}'s context window of {window} tokens (set max: on the lengths)")
