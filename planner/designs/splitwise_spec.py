"""Splitwise scenario specification (the ``design: {type: splitwise}`` section): machine pools,
listed designs and colocated baselines, the pool-size search, and Splitwise's slowdown SLO
reference. The evaluation is ``splitwise_pools`` (pools as queues) and ``splitwise`` (the plan)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from planner.catalog.dtypes import DType
from planner.checks import Degree, Degrees, FrameworkChoice
from planner.frozen import Frozen
from planner.perf.parallel import Layout


class Pool(Frozen):
    """Machines of one kind: ``count`` instances of ``max(tp, ep) x pp`` devices (``perf.parallel``),
    optionally power-capped."""

    hardware: str
    tp: Degree = 8
    ep: Degree = Field(1, description="MoE models: experts over ep devices; ep > tp runs attention "
                    "data-parallel over ep / tp replicas with all-to-all dispatch (DeepEP-style), an instance "
                    "being max(tp, ep) x pp devices")
    pp: Degree = 1
    count: int = Field(ge=1, le=100_000, description="machines in the pool")
    power_cap: float = Field(1.0, gt=0, le=1, description="fraction of TDP each device may draw")
    cp: Degree = Field(1, description="prompt pools: a machine is cp instances of tp x pp devices that prefill "
                    "each prompt together (context parallelism, ring attention; perf/context_parallel.py)")

    @model_validator(mode="after")
    def _cp_without_dp(self) -> Pool:
        if self.cp > 1 and self.ep > self.tp:
            raise ValueError(f"cp={self.cp} with ep={self.ep} > tp={self.tp}: context-parallel prefill of an "
                             "attention-data-parallel instance is not modelled; give cp 1 or ep <= tp")
        return self

    @property
    def layout(self) -> Layout:
        return Layout.of(self.tp, self.ep, self.pp)

    @property
    def devices(self) -> int:
        """Accelerators of one machine: ``cp`` instances of ``max(tp, ep) x pp``."""
        return max(self.tp, self.ep) * self.pp * self.cp

    @property
    def label(self) -> str:
        """``tp8``, ``tp1 ep8``, ``tp8 pp2``: the degrees a machine runs, for names and messages."""
        return f"tp{self.tp}" + (f" ep{self.ep}" if self.ep > 1 else "") + (f" pp{self.pp}" if self.pp > 1 else "")


class Candidate(Frozen):
    name: str
    prompt: Pool
    token: Pool


class Baseline(Frozen):
    name: str
    pool: Pool


class SlowdownReference(Frozen):
    """Splitwise's SLOs are slowdowns against one request on a reference machine with no
    contention (Table VI); they become absolute bounds at the workload's length quantiles."""

    hardware: str = "a100-80g"
    tp: Degree = 8
    ttft: tuple[float, float, float] = (2.0, 3.0, 6.0)
    tbt: tuple[float, float, float] = (1.25, 1.5, 5.0)
    e2e: tuple[float, float, float] = (1.25, 1.5, 5.0)


BudgetKind = Literal["cost", "power", "machines"]


class SplitSearch(Frozen):
    """Find the best pool sizes for each (prompt, token) hardware pair under a budget: the cost or
    provisioned power of a named baseline, or a number of machines."""

    pairs: list[tuple[str, str]] = Field(min_length=1)
    token_power_caps: list[Annotated[float, Field(gt=0, le=1)]] = Field(
        [1.0], min_length=1, description="power caps to try on the token pool, each a fraction of TDP in (0, 1]")
    budget: BudgetKind | list[BudgetKind] = Field("cost", description="one budget, or several that must all hold "
                                                  "(a joint budget: e.g. [cost, power, machines])")
    of_baseline: str | None = Field(None, description="take the budget(s) from this baseline")
    limit: float | dict[BudgetKind, float] | None = Field(
        None, description="explicit budget: $/h, W or machines; with several budgets a mapping "
        "{cost: ..., power: ..., machines: ...} (a kind left out is taken from of_baseline)")

    @model_validator(mode="after")
    def _positive(self) -> SplitSearch:
        if isinstance(self.budget, list) and not self.budget:
            raise ValueError("budget: give at least one of cost, power, machines")
        limits = self.limit.values() if isinstance(self.limit, dict) else [self.limit]
        if any(v is not None and v <= 0 for v in limits):
            raise ValueError("limit: budgets must be > 0")
        if isinstance(self.limit, dict) and set(self.limit) - set(self.budgets):
            raise ValueError(f"limit names {sorted(set(self.limit) - set(self.budgets))}, not in budget {self.budgets}")
        return self

    @property
    def budgets(self) -> list[str]:
        """The budget kinds, the first one primary (the one min_budget minimises)."""
        return [self.budget] if isinstance(self.budget, str) else list(dict.fromkeys(self.budget))
    objective: Literal["max_throughput", "min_budget"] = Field(
        "max_throughput", description="most requests/s within the budget, or the least budget (cost, power or "
        "machines) that serves target_rate")
    target_rate: float | None = Field(None, gt=0, description="requests/s to serve (objective min_budget)")
    tp: Degrees = Field([8], description="TP degrees to try for each pool")
    ep: Degrees = Field([1], description="EP degrees to try for each pool (MoE models; with each "
                          "TP degree: ep > tp is attention data parallelism over max(tp, ep) devices)")


class SplitwiseSpec(Frozen):
    type: Literal["splitwise"] = "splitwise"
    framework: FrameworkChoice = Field(None, description="engine entry applied to every pool (e.g. vllm-2023), or a "
                                       "mapping by vendor or hardware name; default: engine.framework")
    weight_dtype: DType = DType.bf16
    kv_transfer: Literal["layerwise", "serialized"] = "layerwise"
    serialize_below_tokens: int = Field(512, ge=0, description="Splitwise serializes short prompts' KV")
    transfer_overhead_s: float | None = Field(None, ge=0, description="exposed cost of layer-wise transfer; "
                                              "default per hardware (Splitwise Sec. 6.1: ~5 ms on H100, ~8 ms "
                                              "on A100; planner/designs/kv_link.py)")
    mixed_pool: bool = Field(False, description="Splitwise's mixed pool: machines are borrowed across pools (a "
                             "prompt machine decodes, a token machine prefills, or either runs both phases with "
                             "prompts first) when the load calls for it; planner/designs/mixed_pool.py")
    link_gbps: float | None = Field(None, gt=0, description="KV-transfer bandwidth per instance (Gb/s); "
                                    "default: the instance's NICs (devices x NIC x scale-out efficiency)")
    slowdown_slo: SlowdownReference | None = None
    baselines: list[Baseline] = []
    designs: list[Candidate] = []
    search: SplitSearch | None = None
