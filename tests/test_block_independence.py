"""A candidate's iteration time is its own, whatever else shares its block: searches evaluate
candidates as arrays (a block lists the operators of all of them), and the streaming search's
answer must not depend on its block size. Checked for every bundled engine on one of its vendor's
devices, for dense, MoE (with and without MTP drafts) and hybrid-attention models, decode-only,
prompt-only and mixed steps - exactly, float for float. Two engine features broke it before
(eager prompt launches counted every candidate's operators; CloudMatrix-Infer's shared-expert
placement was decided for the whole block)."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner.catalog.frameworks import _frameworks, as_run
from planner.perf.estimate import resolve_dtypes
from planner.perf.parallel import Layout, die_layout_problems
from planner.perf.speculation import Speculation
from planner.serving.batching import iteration

DEVICE = {"nvidia": "h100-sxm", "amd": "mi300x", "huawei": "ascend-910c"}
MODELS = ["deepseek-v3", "qwen3-30b-a3b", "llama-3.1-70b", "qwen3-next-80b-a3b"]
STEPS = [(8.0, 0.0), (0.0, 3000.0), (16.0, 700.0)]     # (decoding sequences, prompt tokens)


def _steps(m, hw, dtypes, tp, ep, n_decode, prompt, spec) -> np.ndarray:
    lay = Layout.of(tp, ep, np.ones_like(tp))
    return np.ravel(iteration(m, hw, lay, dtypes, np.array([[n_decode]]), 2000.0, prompt, 2000.0, spec,
                              power=False).time_s)


@pytest.mark.parametrize("engine", sorted(_frameworks()))
def test_a_candidates_step_is_the_same_in_a_block_and_alone(engine):
    hw = as_run(DEVICE[_frameworks()[engine].vendors[0]], engine)
    for name in MODELS:
        m = planner.model(name)
        dtypes = resolve_dtypes(m, "int8" if hw.vendor == "huawei" else "fp8", None)
        layouts = [(t, e) for t in (1, 2, 4, 8) for e in ((1, 2, 4, 8, 16) if m.moe else (1,))
                   if not str(die_layout_problems(m, hw, Layout.of(t, e, 1))[()])]
        tp, ep = (np.array([x[i] for x in layouts])[:, None] for i in (0, 1))
        # DeepSeek-V3 drafts with its own MTP module
        specs = [Speculation(), Speculation(draft_tokens=2, acceptance=0.7)] if name == "deepseek-v3" else \
            [Speculation()]
        for spec in specs:
            for n_decode, prompt in STEPS:
                together = _steps(m, hw, dtypes, tp, ep, n_decode, prompt, spec)
                for i in range(len(layouts)):
                    alone = _steps(m, hw, dtypes, tp[i:i + 1], ep[i:i + 1], n_decode, prompt, spec)[0]
                    assert together[i] == alone, (name, layouts[i], n_decode, prompt, spec.draft_tokens)
