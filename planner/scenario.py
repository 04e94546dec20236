"""Scenario files: YAML validated by pydantic, the same objects the CLI and Python API build.

A scenario names the model, the workload, the SLOs, the serving engine, the search space, the
cost model and the design. Errors name the file, line and field. Relative paths (model
``config.json``, hardware profiles, traces) are resolved against the scenario's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, ValidationError, ValidationInfo, field_validator, model_validator

from planner.catalog.dtypes import DType
from planner.checks import Degrees
from planner.designs.colocated import ColocatedSpec
from planner.designs.distserve import DistServeSpec
from planner.designs.fleet import FleetSpec
from planner.designs.horizon_spec import HorizonSpec
from planner.designs.kv_cache import KVCacheSpec
from planner.designs.polca import PolcaSpec
from planner.designs.prfaas import PrfaasSpec
from planner.designs.slo_search import SloSearchSpec
from planner.designs.splitwise_spec import SplitwiseSpec
from planner.errors import InputError, PlannerError
from planner.frozen import Frozen
from planner.perf.cost import CostModel
from planner.serving.batching import Engine
from planner.serving.sessions import SessionWorkload
from planner.serving.slo import SLO
from planner.serving.workload import Workload
from planner.yamlio import load_yaml, validation_error


def _resolve(value: str, info: ValidationInfo) -> str:
    base = (info.context or {}).get("base")
    if base and Path(value).suffix and not Path(value).is_absolute() and (Path(base) / value).exists():
        return str(Path(base) / value)
    return value


def _framework_paths(choice: Any, info: ValidationInfo) -> Any:
    """A framework choice (a name or file, or a mapping to them) with its files relative to the
    scenario's folder (``_resolve``)."""
    if isinstance(choice, str):
        return _resolve(choice, info)
    if isinstance(choice, dict):
        return {k: _resolve(v, info) if isinstance(v, str) else v for k, v in choice.items()}
    return choice


class SearchSpace(Frozen):
    """Candidates to evaluate: every hardware x layout x weight dtype."""

    hardware: list[str] = Field(min_length=1, description="profile names or YAML paths")
    tp: Degrees = [1, 2, 4, 8]
    ep: Degrees = [1]
    pp: Degrees = [1]
    weight_dtype: list[DType] = [DType.bf16]
    kv_dtype: DType | None = None
    max_instances: int = Field(100_000, ge=1)
    workers: int = Field(1, ge=1, le=256, description="local processes evaluating blocks of candidates "
                         "(slo-search and colocated searches; the same answer on any number; a session "
                         "workload's plan, one candidate at a time, runs in one process)")

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, v: list[str], info: ValidationInfo) -> list[str]:
        from planner.catalog.hardware import hardware

        out = []
        for name in v:
            name = _resolve(name, info)
            try:
                hardware(name)
            except PlannerError as e:
                raise ValueError(str(e)) from None
            out.append(name)
        return out


class SimulateSpec(Frozen):
    """Check the chosen deployment with the discrete-event simulator."""

    requests: int = Field(20_000, ge=100, le=2_000_000)
    seed: int = Field(0, ge=0, lt=2**32, description="random seed of the simulated arrivals and lengths")
    max_extra_instances: int = Field(8, ge=0, description="instances the check may add to meet the SLOs")


Design = Annotated[ColocatedSpec | SplitwiseSpec | PolcaSpec | PrfaasSpec | SloSearchSpec | FleetSpec
                   | DistServeSpec | HorizonSpec,
                   Field(discriminator="type")]


def _workload_kind(v: Any) -> str:
    has = v.get("sessions") is not None if isinstance(v, dict) else isinstance(v, SessionWorkload)
    return "sessions" if has else "requests"


AnyWorkload = Annotated[Annotated[Workload, Tag("requests")] | Annotated[SessionWorkload, Tag("sessions")],
                        Discriminator(_workload_kind)]


class Scenario(Frozen):
    name: str
    description: str = ""
    model: str = Field(description="catalog name or a local HuggingFace config.json")
    workload: AnyWorkload
    slo: SLO
    engine: Engine = Engine()
    search: SearchSpace | None = Field(None, description="candidates of the colocated design")
    cost: CostModel = CostModel()
    design: Design = ColocatedSpec()
    simulate: SimulateSpec | None = None
    confidence: float = Field(0.5, ge=0.05, le=0.95, description=(
        "size every design so it holds when the hardware performs at this quantile of the model's error "
        "bands (planner/catalog/bands.yaml); 0.5 = the median"))
    measured: dict[str, str] = Field({}, description="hardware name -> CSV of measured prefill/decode step times "
                                     "(phase,batch,tokens,context,seconds) used in place of the roofline where "
                                     "they cover the query (planner.perf.measured)")

    @field_validator("measured")
    @classmethod
    def _measured_paths(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        from planner.catalog.hardware import hardware

        for name in v:
            try:
                hardware(name)
            except PlannerError as e:
                raise ValueError(str(e)) from None
        return {hw: _resolve(path, info) for hw, path in v.items()}
    kv_cache: KVCacheSpec | None = Field(None, description="prefix-cache tiers of a session workload")

    @model_validator(mode="before")
    @classmethod
    def _one_engine(cls, data: Any, info: ValidationInfo) -> Any:
        """A framework file named in the scenario (``engine.framework``, a design's ``framework``,
        a mapping's values) is read relative to the scenario's folder, as the model is. A design
        that names the engine its machines run (``design.framework``: Splitwise, POLCA, DistServe;
        a horizon's ``design.splitwise.framework``) names the scenario's engine, unless
        ``engine.framework`` names one itself (two different names are refused:
        ``scenario_checks``): its scheduler knobs fill those the ``engine`` section does not give."""
        from planner.catalog.frameworks import checked_choice

        if not isinstance(data, dict):
            return data
        data = dict(data)
        engine, design = data.get("engine"), data.get("design")
        if isinstance(engine, dict) and engine.get("framework") is not None:
            engine = data["engine"] = {**engine, "framework": _framework_paths(engine["framework"], info)}
        if not isinstance(design, dict):
            return data
        design = data["design"] = dict(design)
        if design.get("framework") is not None:
            design["framework"] = _framework_paths(design["framework"], info)
        inner = design.get("splitwise")              # a horizon's Splitwise pools name theirs there
        if isinstance(inner, dict) and inner.get("framework") is not None:
            inner = design["splitwise"] = {**inner, "framework": _framework_paths(inner["framework"], info)}
        if engine is not None and not isinstance(engine, dict) or (engine or {}).get("framework") is not None:
            return data
        named = design.get("framework") or (inner.get("framework") if isinstance(inner, dict) else None)
        try:                                # a bad name is blamed where it is written, by the design
            checked_choice(named)
        except (ValueError, TypeError, AttributeError):
            return data
        return data if named is None else {**data, "engine": {**(engine or {}), "framework": named}}

    @model_validator(mode="after")
    def _design_needs(self) -> Scenario:
        own_pools = self.design.type == "horizon" and self.design.inner == "splitwise"   # pools in its section
        needs = self.design.type in ("colocated", "slo-search", "fleet", "horizon") and not own_pools
        if needs and self.search is None:
            raise ValueError(f"the {self.design.type} design needs a 'search' section (hardware and layouts to try)")
        if self.kv_cache is not None and not isinstance(self.workload, SessionWorkload):
            raise ValueError("kv_cache applies to a session workload (workload.sessions); give prefix_hit otherwise")
        return self

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        from planner.scenario_checks import check_scenario

        check_scenario(self)
        return self

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str, info: ValidationInfo) -> str:
        from planner.catalog.model_catalog import model

        v = _resolve(v, info)
        try:
            model(v)
        except PlannerError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("engine", mode="before")
    @classmethod
    def _draft_path(cls, v: Any, info: ValidationInfo) -> Any:
        """A draft ``config.json`` is read relative to the scenario's folder, as the model's."""
        if isinstance(v, dict) and isinstance(v.get("draft"), str):
            return {**v, "draft": _resolve(v["draft"], info)}
        return v

    @field_validator("workload", mode="before")
    @classmethod
    def _trace_paths(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, dict):
            v = dict(v)
            if isinstance(v.get("trace"), str):
                v["trace"] = _resolve(v["trace"], info)
            if isinstance(v.get("sessions"), dict) and isinstance(v["sessions"].get("trace"), str):
                v["sessions"] = {**v["sessions"], "trace": _resolve(v["sessions"]["trace"], info)}
            for key in ("input", "output"):
                if isinstance(v.get(key), dict) and isinstance(v[key].get("trace"), str):
                    v[key] = {**v[key], "trace": _resolve(v[key]["trace"], info)}
            if isinstance(v.get("demand"), dict) and isinstance(v["demand"].get("csv"), str):
                v["demand"] = {**v["demand"], "csv": _resolve(v["demand"]["csv"], info)}
        return v

    @field_validator("workload")
    @classmethod
    def _traces_load(cls, v: Workload) -> Workload:
        try:
            v.joint_support()
        except PlannerError as e:
            raise ValueError(str(e)) from None
        return v


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read and validate a scenario file; errors say ``file:line field: problem``. ``overrides``:
    ``key.path=value`` strings applied first (``--set``; their errors say ``--set``)."""
    from planner.checks import as_path

    path = as_path(path, "a scenario")
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}:1: a scenario is a YAML mapping")
    if overrides:
        from planner.overrides import apply_sets

        data, paths = apply_sets(data, overrides)
        lines = {k: v for k, v in lines.items() if not any(k[:len(p)] == p for p in paths)}
        lines.update({p: 0 for p in paths})             # line 0: "given by --set"
        # a section the file does not have, made by a --set, is the --set's too
        lines.update({p[:n]: 0 for p in paths for n in range(1, len(p)) if p[:n] not in lines})
    try:
        return Scenario.model_validate(data, context={"base": str(path.parent)})
    except ValidationError as e:
        raise validation_error(path, e, lines, Scenario) from None


def scenario_schema() -> dict:
    return Scenario.model_json_schema()
