"""Parallel layout of one serving instance, and its validation.

An instance is ``pp`` pipeline stages of ``D = max(tp, ep)`` devices each:

* attention runs tensor-parallel over ``tp`` devices, replicated ``D / tp`` times
  (attention data parallelism: each replica serves its own share of the batch);
* MoE experts are split over ``ep`` devices, each expert tensor-parallel over ``D / ep``.

So ``--tp 8`` is vLLM's default TP=8, ``--tp 8 --ep 8`` is vLLM's ``enable_expert_parallel`` on
the same 8 GPUs, and ``--tp 1 --ep 320`` is CloudMatrix-Infer's DP320 attention + EP320 decode.

Degrees count devices (packages). On a multi-die package (``HardwareProfile.dies``: Ascend 910C)
engines run every die as its own rank, so the roofline times one die of the layout ``on_dies``
gives: TP and EP groups span all the dies of their packages (SGLang's ``--tp 16`` on an 8-package
A3 node is ``tp 8`` here); attention data parallelism (``tp 1`` with ``ep > 1``) stays data-parallel
on each die (SGLang ``--enable-dp-attention``, CloudMatrix-Infer's DP320 over 160 NPUs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.catalog.hardware import HardwareProfile
from planner.catalog.model import ModelSpec
from planner.errors import InputError


@dataclass(frozen=True)
class Layout:
    """Parallel degrees, broadcast as integer arrays (the degrees are not changed after
    construction: the derived ones are computed once per layout and shared, read-only)."""

    tp: np.ndarray
    ep: np.ndarray
    pp: np.ndarray

    @classmethod
    def of(cls, tp=1, ep=1, pp=1) -> Layout:
        tp, ep, pp = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (tp, ep, pp)))
        return cls(*(_read_only(x) for x in (tp, ep, pp)))

    @cached_property
    def stage_devices(self) -> np.ndarray:
        return _read_only(np.maximum(self.tp, self.ep))

    @cached_property
    def attention_dp(self) -> np.ndarray:
        return _read_only(self.stage_devices // self.tp)

    @cached_property
    def expert_tp(self) -> np.ndarray:
        return _read_only(self.stage_devices // self.ep)

    @cached_property
    def devices(self) -> np.ndarray:
        return _read_only(self.stage_devices * self.pp)


def _read_only(x: np.ndarray) -> np.ndarray:
    """``x`` (a view or array made here) marked read-only: shared by every user of the layout
    (a NumPy scalar stays one)."""
    if isinstance(x, np.ndarray):
        x.flags.writeable = False
    return x


def on_dies(hw: HardwareProfile, lay: Layout) -> tuple[HardwareProfile, Layout]:
    """(profile of one rank, layout over ranks) of ``lay`` on ``hw`` (unchanged for single-die
    devices; idempotent: a die's profile has one die). Per-rank quantities (step time, memory of
    one rank) follow from these; a package holds ``dies`` ranks."""
    d = hw.dies_per_device
    if d == 1:
        return hw, lay
    dp_attention = (lay.tp == 1) & (lay.ep > 1)
    tp = np.where(dp_attention, 1, lay.tp * d)
    ep = np.where(lay.ep > 1, lay.ep * d, 1)
    return hw.per_die(), Layout.of(tp, ep, lay.pp)


def dp_ranks(hw: HardwareProfile, lay: Layout) -> int:
    """Attention data-parallel replicas of a one-layout instance, counted as the engine does: per
    die on a multi-die package (``on_dies``)."""
    return int(np.ravel(on_dies(hw, lay)[1].attention_dp)[0])


def die_layout_problems(model: ModelSpec, hw: HardwareProfile, lay: Layout) -> np.ndarray:
    """``layout_problems`` on ``hw``: over packages, and where those hold, over the dies of a
    multi-die package (``on_dies``), said in packages - a layout valid over packages may split
    heads unevenly over dies (12 heads at tp 4 = 8 dies)."""
    why = layout_problems(model, lay)
    d = hw.dies_per_device
    if d == 1:
        return why
    over_dies = layout_problems(model, on_dies(hw, lay)[1])
    bad = (why == "") & (over_dies != "")
    why = why.copy()
    why[bad] = [f"over {hw.name}'s {d} dies per package (tp over dies = {d} x tp), {w}" for w in over_dies[bad]]
    return why


def layout_problems(model: ModelSpec, layout: Layout) -> np.ndarray:
    """Per candidate, a reason string why the layout is invalid for the model, or ''."""
    tp, ep, pp = layout.tp, layout.ep, layout.pp
    why = np.full(tp.shape, "", dtype=object)

    def flag(mask: np.ndarray, text: str) -> None:
        sel = np.asarray(mask) & (why == "")
        why[sel] = text

    flag((tp < 1) | (ep < 1) | (pp < 1), "tp, ep and pp must be >= 1")
    flag(model.num_heads % np.maximum(tp, 1) != 0, f"tp must divide the {model.num_heads} attention heads")
    kv = model.num_kv_heads
    flag((kv % np.maximum(tp, 1) != 0) & (np.maximum(tp, 1) % kv != 0),
         f"tp must divide, or be a multiple of, the {kv} KV heads")
    la = model.linear_attention
    if la is not None:
        flag(la.num_value_heads % np.maximum(tp, 1) != 0,
             f"tp must divide the {la.num_value_heads} linear-attention heads")
    if model.moe is None:
        flag(ep != 1, "ep > 1 needs a mixture-of-experts model")
    else:
        # ep need not divide the experts: the fullest rank holds ceil(E / ep) (perf.ops._moe_ffn)
        flag(ep > model.moe.num_experts, f"ep cannot exceed the {model.moe.num_experts} experts")
    big, small = np.maximum(tp, ep), np.maximum(np.minimum(tp, ep), 1)
    flag(big % small != 0, "the larger of tp and ep must be a multiple of the smaller")
    flag(pp > model.num_layers, f"pp cannot exceed the {model.num_layers} layers")
    return why


def check_layout(model: ModelSpec, layout: Layout, hw: HardwareProfile | None = None) -> None:
    """Raise ``InputError`` for the first invalid candidate (scalar use: the CLI and ``estimate``);
    with ``hw``, the layout must also split over a multi-die package's dies."""
    why = layout_problems(model, layout) if hw is None else die_layout_problems(model, hw, layout)
    bad = np.flatnonzero(why != "")
    if bad.size:
        i = bad[0]
        tp, ep, pp = (int(np.ravel(x)[i]) for x in (layout.tp, layout.ep, layout.pp))
        raise InputError(f"invalid parallel layout tp={tp} ep={ep} pp={pp} for {model.name}: {np.ravel(why)[i]}")
