"""Parameter counts derived from the operator list (one source of truth for weights)."""

from __future__ import annotations

from planner.catalog.model import ModelSpec
from planner.perf.ops import DTypes, Step, layer_ops
from planner.perf.parallel import Layout


def parameter_counts(model: ModelSpec) -> tuple[int, int]:
    """(total, active) parameters: active counts only ``k`` of ``E`` routed experts per MoE layer.
    Both include the embedding table and LM head (as HuggingFace totals do)."""
    ops = layer_ops(model, Layout.of(), Step.of(1, 1, 0), DTypes())
    total = sum(float(op.count * op.params) for op in ops)
    inactive = 0.0
    if model.moe is not None:
        moe = model.moe
        share = 1 - moe.experts_per_token / moe.num_experts
        inactive = sum(op.count * float(op.params) * share for op in ops if op.name == "experts")
    return int(round(total)), int(round(total - inactive))
