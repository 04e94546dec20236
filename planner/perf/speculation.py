"""Multi-token prediction / speculative decoding as the roofline sees it.

A decode step with ``k`` draft tokens runs the draft module ``k`` times (one token per sequence
each) and verifies ``1 + k`` tokens per sequence in one pass of the main model. If each draft
token is accepted with probability ``p`` given its predecessor was (DeepSeek-V3 reports ~0.85-0.9
for its MTP module, CloudMatrix-Infer ~0.7 on DeepSeek-R1), a step yields on average
``1 + p + ... + p^k = (1 - p^(k+1)) / (1 - p)`` tokens per sequence.

That is the engine's aggregate. Requests differ: each has its own acceptance probability
``p_i`` (prompts and answers differ in how predictable they are), so its own tokens per step
``L_i = 1 + p_i + ... + p_i^k``, and the aggregate an engine prints (SGLang's accept length:
accepted tokens over verify passes, summed over requests) is their harmonic mean, weighted by
output length. Mean TPOT depends only on that mean, but the requests that accept least set a
batch's makespan and the TPOT tail. ``p_i`` is Beta-distributed; its default concentration
reproduces the per-request spread aiperf's SPEED-Bench run measured on vLLM
(ai-dynamo/aiperf docs/tutorials/speed-bench.md, per-request spec-decode metrics: Llama-3.1-8B
with a Llama-3.2-1B draft, k = 5, greedy, 880 prompts of 11 categories): the draft acceptance
rate ``(L_i - 1) / k`` of a request is 63.8% on average with a standard deviation of 16.2 points
(acceptance length 4.19 +- 0.81, minimum 1.83, P90 5.35). A mean ``p`` of 0.843 and a
concentration of 15.72 give exactly those two moments (and a minimum of 1.7, a P90 of 5.24);
through the chain, the same spread in ``p_i`` spreads ``L_i`` more where acceptance is high.
A second public per-request distribution agrees: TensorRT-LLM issue #9208 (Qwen3-235B-A22B with
an EAGLE-3 draft, k = 3, ShareGPT-derived prompts; trtllm-bench's per-request acceptance length:
min 1.04, P50 1.78, mean 1.86, P90 2.44, P99 3.20) and the SPEED-Bench run, fitted together with
one concentration and a mean each, give 14.0. Fits to their quantiles alone give 7.8 and 10.1
(a Beta only approximates either shape); the default keeps the moments' 15.72.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.catalog.draft import DraftSpec

REFERENCE_CONCENTRATION = 15.72
# most draft tokens a decode step verifies: EAGLE-2/3 dynamic trees verify up to 60 (their papers'
# total_token), chains far fewer; beyond this a step is no longer a decode step
MAX_DRAFT_TOKENS = 64
"""Beta concentration of the per-request acceptance probability that reproduces aiperf's SPEED-Bench
per-request acceptance rate, 63.8% +- 16.2 points at k = 5 (see above; a test re-derives it)."""


@dataclass(frozen=True)
class Speculation:
    """``draft_tokens`` per decode step, each accepted with probability ``acceptance``."""

    draft_tokens: int = 0
    acceptance: float = 0.0
    request_sd: float | None = None
    """standard deviation across requests of a request's acceptance probability; None: the
    reference concentration (``REFERENCE_CONCENTRATION``) at this engine's mean; 0: none."""
    draft: DraftSpec | None = None
    """the draft model (``catalog.draft``: EAGLE-3); None: the target's own MTP module."""

    def __post_init__(self) -> None:
        k, p = self.draft_tokens, self.acceptance
        if (isinstance(k, bool) or not isinstance(k, Integral) or isinstance(p, bool) or not isinstance(p, Real)
                or not 0 <= k <= MAX_DRAFT_TOKENS or not 0.0 <= p < 1.0):
            raise InputError(f"MTP needs draft_tokens in [0, {MAX_DRAFT_TOKENS}] and acceptance in [0, 1), got "
                             f"{self.draft_tokens} and {self.acceptance}")
        sd = self.request_sd
        if sd is not None and (isinstance(sd, bool) or not isinstance(sd, Real) or not 0.0 <= sd < 0.5):
            raise InputError(f"the per-request acceptance spread must be in [0, 0.5), got {sd}")

    @property
    def tokens_per_step(self) -> float:
        return float(chain_tokens(self.acceptance, self.draft_tokens))

    @property
    def spread(self) -> bool:
        """Requests differ in their acceptance (drafts, a non-zero acceptance and spread)."""
        return self.draft_tokens > 0 and self.acceptance > 0.0 and self.request_sd != 0.0

    def quantile_tokens(self, q) -> np.ndarray:
        """Tokens per verify step at quantiles ``q`` of the requests (``request_distribution``;
        ``L`` rises with ``p``); the aggregate everywhere without spread."""
        q = np.asarray(q, dtype=float)
        if not self.spread:
            return np.full(q.shape, self.tokens_per_step)
        p, w = request_distribution(self.draft_tokens, self.acceptance, self.request_sd)
        return chain_tokens(np.interp(q, np.cumsum(w) - w / 2, p), self.draft_tokens)

    def per_request(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Tokens per verify step of each of ``n`` requests: evenly spaced quantiles of the
        per-request distribution in a random order (``rng``). All equal without drafts or spread."""
        if not self.spread or n == 0:
            return np.full(n, self.tokens_per_step)
        return self.quantile_tokens((rng.permutation(n) + 0.5) / n)

    @property
    def inverse_cv(self) -> float:
        """Coefficient of variation across requests of ``1 / L_i``, the factor a request's TPOT
        carries (0 without spread)."""
        if not self.spread:
            return 0.0
        p, w = request_distribution(self.draft_tokens, self.acceptance, self.request_sd)
        inv = 1.0 / chain_tokens(p, self.draft_tokens)
        mean = float(w @ inv)
        return float(np.sqrt(w @ (inv - mean) ** 2)) / mean


_GRID = (np.arange(4096) + 0.5) / 4096


@lru_cache(maxsize=128)
def request_distribution(k: int, acceptance: float, sd: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(acceptance probabilities, weights): the per-request Beta distribution on a grid of 4,096
    midpoints (numpy only: no inverse incomplete beta on the planning path), its mean found by
    bisection so that the mean of ``1 / chain_tokens(p_i, k)`` is ``1 / chain_tokens(acceptance, k)``
    (the aggregate is the requests' harmonic mean). Where the grid cannot hold the default spread
    (an acceptance within ~1e-3 of 0, or one so close to 1 that the chain's tokens need it), all
    requests take the aggregate; a spread the user gave that cannot keep it is an input error."""
    target = 1.0 / chain_tokens(acceptance, k)
    log_p, log_q = np.log(_GRID), np.log1p(-_GRID)
    inv = 1.0 / chain_tokens(_GRID, k)

    def weights(mean: float) -> np.ndarray:
        # a concentration below 2 would pile the requests at 0 and 1: the spread is capped there
        kappa = REFERENCE_CONCENTRATION if sd is None else max(mean * (1 - mean) / sd**2 - 1, 2.0)
        log_w = (mean * kappa - 1) * log_p + ((1 - mean) * kappa - 1) * log_q
        w = np.exp(log_w - log_w.max())
        return w / w.sum()

    lo, hi = 1e-4, 1 - 1e-4                  # the mean of 1 / L_i falls as the mean probability rises
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if weights(mid) @ inv > target:
            lo = mid
        else:
            hi = mid
    w = weights(0.5 * (lo + hi))
    if abs(w @ inv / target - 1) > 1e-3:
        if sd is None:       # the default spread at an acceptance the grid cannot resolve (near 0 or 1): none
            return np.array([acceptance]), np.array([1.0])
        raise InputError(f"no spread of {sd} across requests around an acceptance of {acceptance} with {k} draft "
                         f"tokens keeps the engine's tokens per step; give a smaller mtp_acceptance_sd")
    w.flags.writeable = False                # cached: shared by every caller
    return _GRID, w


def chain_tokens(p, k: int):
    """Tokens a verify step yields with ``k`` chained drafts each accepted with probability ``p``
    given its predecessor was: ``1 + p + ... + p^k`` (finite at p = 1)."""
    total = 1.0
    for _ in range(k):
        total = 1.0 + p * total          # Horner: 1 + p (1 + p (1 + ...))
    return total


NO_SPECULATION = Speculation()
