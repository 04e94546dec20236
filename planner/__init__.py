"""planner: an LLM serving-cluster capacity planner (analytical roofline models of prefill and
decode on NVIDIA, AMD and Huawei Ascend hardware).

Public API (re-exports only; modules load on first use so ``import planner`` stays fast)::

    planner.list_hardware(), planner.hardware(name)
    planner.list_models(), planner.model(name), planner.model_from_hf_config(path)
    planner.kv_cache_bytes_per_token(model, kv_dtype="bf16")
    planner.estimate(model, hardware, *, tp, pp, ep, batch, input_len, output_len, ...)
    planner.throughput(model, hardware, *, tp, pp, ep, input_len, output_len, concurrency=None, ...)
    planner.load_scenario(path), planner.run_scenario(scenario)
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "list_hardware": "planner.catalog.hardware",
    "hardware": "planner.catalog.hardware",
    "HardwareProfile": "planner.catalog.hardware",
    "list_models": "planner.catalog.model_catalog",
    "model": "planner.catalog.model_catalog",
    "model_from_hf_config": "planner.catalog.hf_config",
    "ModelSpec": "planner.catalog.model",
    "DType": "planner.catalog.dtypes",
    "estimate": "planner.perf.estimate",
    "throughput": "planner.serving.closed_loop",
    "ServingEstimate": "planner.serving.closed_loop",
    "Estimate": "planner.perf.estimate",
    "load_scenario": "planner.scenario",
    "Scenario": "planner.scenario",
    "run_scenario": "planner.run",
    "PlanResult": "planner.run",
    "InputError": "planner.errors",
    "InfeasibleError": "planner.errors",
    "PlannerError": "planner.errors",
}


def kv_cache_bytes_per_token(model: Any, kv_dtype: str = "bf16") -> int:
    """KV-cache bytes one token adds across all layers (see ``perf.memory``)."""
    from planner.catalog.model_catalog import model as get_model
    from planner.perf.estimate import resolve_dtypes
    from planner.perf.memory import kv_cache_bytes_per_token as _kv

    m = get_model(model)
    return _kv(m, resolve_dtypes(m, None, kv_dtype).kv)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")


__all__ = sorted([*_EXPORTS, "kv_cache_bytes_per_token", "__version__"])
