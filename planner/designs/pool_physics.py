"""Physics shared by the disaggregated designs (Splitwise, its mixed pool, DistServe): a machine's
profile under an engine entry and a power cap, the prefill service times of a workload's prompts,
and the TTFT of a pool of prompt machines."""

from __future__ import annotations

import numpy as np

from planner.catalog.frameworks import as_run
from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.perf.kv_tiers import exposed_prefill_s
from planner.perf.ops import DTypes
from planner.perf.parallel import Layout
from planner.perf.power import apply_power_cap
from planner.serving.batching import Engine, Iteration, iteration
from planner.serving.slo import PERCENTILES
from planner.serving.workload import Workload, weighted_quantile


def engine_named(spec, engine: Engine):
    """``spec`` (a design whose ``framework`` is the engine its machines run: Splitwise, DistServe,
    POLCA) with ``engine.framework`` (a name, or a mapping by vendor or device that ``as_run``
    resolves machine by machine) filled in where the design names none, so that the machines run
    the engine whose scheduler knobs the ``engine`` carries (they ran the vendor's default entry
    under another engine's scheduler). Both named and different is an ``InputError``: one engine
    runs the machines."""
    from planner.errors import InputError

    named = engine.framework
    if named is None or spec.framework == named:
        return spec
    if spec.framework is None:
        return spec.model_copy(update={"framework": named})
    raise InputError(f"engine.framework is {named} but design.framework is {spec.framework}: one engine runs the "
                     "design's machines; name it in one place (or the same in both)")


def machine_hw(name: str, fw: str | dict[str, str] | None, cap: float = 1.0, memory_fraction: float | None = None,
               kv_pool_tokens: int | None = None) -> HardwareProfile:
    """Profile ``name`` with engine entry ``fw`` applied, its memory setting at ``memory_fraction``
    and its KV pool capped at ``kv_pool_tokens`` where given (``Engine.memory_fraction``,
    ``Engine.kv_pool_tokens``) and its devices capped at ``cap`` of TDP."""
    return apply_power_cap(as_run(name, fw, None, memory_fraction, kv_pool_tokens), cap)


def prompt_service(model: ModelSpec, hw: HardwareProfile, lay: Layout, dtypes: DTypes,
                   workload: Workload, cp: int = 1) -> tuple[np.ndarray, np.ndarray, float]:
    """(prompt lengths at 48 quantiles, prefill seconds of each on one instance, mean device power
    while prefilling) over the workload's prompt-length distribution (prefix hits skipped; a
    session workload's hits per turn, those from slower KV tiers loading layer by layer under the
    prefill, ``perf.kv_tiers.exposed_prefill_s``). ``cp > 1``: each prompt is prefilled over ``cp``
    instances of ``lay`` (context parallelism, ``perf.context_parallel``)."""
    i, _, w = workload.joint_support()
    pre_len = np.maximum(np.round(i * (1 - workload.support_hits())), 1)
    q = (np.arange(48) + 0.5) / 48
    support = weighted_quantile(pre_len, w, q)
    it = iteration(model, hw, lay, dtypes, 0.0, 16.0, support, support)
    if cp > 1:
        from planner.perf.context_parallel import cp_prefill

        it = Iteration(cp_prefill(model, hw, lay, dtypes, support, cp).time_s, it.power_w)
    load = np.broadcast_to(np.asarray(workload.support_loads(), float), i.shape)
    if not load.any():
        return support, it.time_s, float(np.mean(it.power_w))
    compute = np.interp(pre_len, support, it.time_s)       # each turn's prefill, from the support's
    service = weighted_quantile(exposed_prefill_s(compute, load, model.num_layers), w, q)
    return support, service, float(np.mean(it.power_w))


def prompt_ttft(wait: np.ndarray, rho: np.ndarray, service_s: np.ndarray) -> dict[str, np.ndarray]:
    """TTFT mean and percentiles of the prompt pool: the queue's mean ``wait`` at utilisation
    ``rho`` (any shape) with an exponential tail beyond the probability ``rho`` of waiting, plus
    the service quantile over the prompt-length support ``service_s``."""
    ttft = {"mean": wait + float(service_s.mean())}
    for k, qv in zip(PERCENTILES, (0.5, 0.9, 0.99), strict=True):
        with np.errstate(divide="ignore", invalid="ignore"):
            wq = np.where(rho > 1 - qv, wait / np.maximum(rho, 1e-12) * np.log(np.maximum(rho, 1e-12) / (1 - qv)), 0)
        ttft[k] = wq + float(np.quantile(service_s, qv))
    return ttft
