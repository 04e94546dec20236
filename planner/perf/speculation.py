"""Multi-token prediction / speculative decoding as the roofline sees it.

A decode step with ``k`` draft tokens runs the draft module ``k`` times (one token per sequence
each) and verifies ``1 + k`` tokens per sequence in one pass of the main model. If each draft
token is accepted with probability ``p`` given its predecessor was (DeepSeek-V3 reports ~0.85-0.9
for its MTP module, CloudMatrix-Infer ~0.7 on DeepSeek-R1), a step yields on average
``1 + p + ... + p^k = (1 - p^(k+1)) / (1 - p)`` tokens per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from planner.errors import InputError


@dataclass(frozen=True)
class Speculation:
    """``draft_tokens`` per decode step, each accepted with probability ``acceptance``."""

    draft_tokens: int = 0
    acceptance: float = 0.0

    def __post_init__(self) -> None:
        k, p = self.draft_tokens, self.acceptance
        if (isinstance(k, bool) or not isinstance(k, Integral) or isinstance(p, bool) or not isinstance(p, Real)
                or k < 0 or not 0.0 <= p < 1.0):
            raise InputError(f"MTP needs draft_tokens >= 0 and acceptance in [0, 1), got "
                             f"{self.draft_tokens} and {self.acceptance}")

    @property
    def tokens_per_step(self) -> float:
        p = self.acceptance
        return (1.0 - p ** (self.draft_tokens + 1)) / (1.0 - p)


NO_SPECULATION = Speculation()
