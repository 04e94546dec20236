"""The Splitwise search's front of (throughput, cost, power) over pool sizes: the O(P + T)
candidate splits give the same front as every pair, and a budget too large to enumerate is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.designs.splitwise_search import _front_candidates
from planner.search import pareto_front


def _front_values(n_p, n_t, prompt_rate, token_one, up, ut, lim):
    within = np.all(n_p[..., None] * up + n_t[..., None] * ut <= lim * (1 + 1e-9), axis=-1)
    rate = np.minimum(prompt_rate[n_p - 1], token_one * n_t)
    cost, power = n_p * up[0] + n_t * ut[0], n_p * up[1] + n_t * ut[1]
    keep = pareto_front(-rate[within], cost[within], power[within])
    return {(round(float(-x), 9), round(float(c), 9), round(float(w), 9))
            for x, c, w in zip(-rate[within][keep], cost[within][keep], power[within][keep], strict=True)}


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.floats(0, 3), min_size=1, max_size=30), token_one=st.floats(0.05, 5),
       max_t=st.integers(1, 30), up=st.tuples(st.floats(0.5, 4), st.floats(100, 900)),
       ut=st.tuples(st.floats(0.5, 4), st.floats(100, 900)), frac=st.floats(0.1, 1.0))
def test_candidate_splits_give_the_full_front(steps, token_one, max_t, up, ut, frac):
    prompt_rate = np.cumsum(steps) if steps[0] < 1.5 else np.array(steps)   # monotone, or not at all
    up, ut = np.array(up), np.array(ut)
    lim = frac * (len(prompt_rate) * up + max_t * ut)
    full_p, full_t = np.meshgrid(np.arange(1, len(prompt_rate) + 1), np.arange(1, max_t + 1), indexing="ij")
    cand_p, cand_t = _front_candidates(prompt_rate, token_one, max_t)
    assert len(cand_p) <= len(prompt_rate) + max_t
    assert _front_values(cand_p, cand_t, prompt_rate, token_one, up, ut, lim) == \
        _front_values(full_p.ravel(), full_t.ravel(), prompt_rate, token_one, up, ut, lim)


def test_a_budget_too_large_to_enumerate_is_refused():
    from planner.errors import InputError
    from planner.run import run_scenario
    from planner.scenario import load_scenario

    scn = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / "distserve-chatbot-splitwise.yaml",
                        ["design.search.limit=1000000000"])
    with pytest.raises(InputError, match=r"search\.limit allows 8,000,000,000 a100-80g prompt .* up to 1,000 "
                                         r"instances a pool"):
        run_scenario(scn)
