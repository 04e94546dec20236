"""Block-level LRU prefix cache replayed over a session stream: the check of the analytic model.

Engines cache KV in fixed blocks (vLLM: 16 tokens), chained by prefix, and evict the least
recently used block; among blocks freed together the tail goes first (vLLM frees a request's
blocks in reverse order), so what survives of a session is a prefix of its history. All blocks of
a session are touched at each of its turns, so at any time the LRU stack, top down, is: the system
prompt, then each session's history in order of its last turn. A turn of a session whose blocks
were last touched at its previous turn therefore finds ``clip(C - S - D, 0, h)`` of its ``h``
history blocks, where ``D`` counts the blocks of the distinct sessions touched since - exactly the
LRU result, for every capacity ``C`` at once (LRU's inclusion property). ``D`` comes from a Fenwick
tree over the stream, O(turns log turns). ``tests/test_cache_sim.py`` checks it against a literal
block-by-block LRU. Stack depth also says which tier of a demoting hierarchy serves each hit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.serving.sessions import SessionStream

BLOCK_TOKENS = 16   # vLLM's default KV block size


@dataclass(frozen=True)
class Replay:
    """Per turn: blocks above the session's history in the stack (``depth``), its cached-history
    blocks at its previous turn (``history``), and its prompt tokens. Measured turns only."""

    depth: np.ndarray
    history: np.ndarray
    prompt_tokens: np.ndarray
    system_blocks: int
    block_tokens: int

    def hit_rate(self, capacity_tokens) -> np.ndarray:
        """Token hit rate at each capacity (tokens, array)."""
        c = np.atleast_1d(np.asarray(capacity_tokens, float)) // self.block_tokens
        sys_hit = np.minimum(c, self.system_blocks)
        hist = np.clip(c[:, None] - self.system_blocks - self.depth[None, :], 0, self.history[None, :])
        hits = (sys_hit * len(self.depth) + hist.sum(axis=1)) * self.block_tokens
        return hits / self.prompt_tokens.sum()

    def tier_hit_rates(self, bounds_tokens) -> np.ndarray:
        """Hits per tier, given where each tier's reach ends in the stack (``prefix_cache.tier_bounds``)."""
        return np.diff(np.concatenate([[0.0], self.hit_rate(np.asarray(bounds_tokens, float))]))


def replay(stream: SessionStream, block_tokens: int = BLOCK_TOKENS, warmup_frac: float = 0.2) -> Replay:
    """Replay the stream's turns through the LRU stack. Measured: every turn of the sessions that
    start after the first ``warmup_frac`` of the span of session starts (the cache is filling
    before); whole sessions, so late turns (high hit rates) are not over-represented."""
    n = len(stream.session)
    blocks_after = stream.history_after // block_tokens      # full blocks only are cached
    tree = np.zeros(n + 1, dtype=np.int64)                  # Fenwick tree over turn positions
    last_pos: dict[int, int] = {}
    depth = np.zeros(n, dtype=np.int64)
    history = np.zeros(n, dtype=np.int64)
    total = 0
    for i, s in enumerate(stream.session.tolist()):
        p = last_pos.get(s)
        if p is not None:
            size = int(_value_at(tree, p))
            depth[i] = total - _prefix(tree, p + 1)          # blocks touched after position p
            history[i] = size
            _add(tree, p + 1, -size)
            total -= size
        b = int(blocks_after[i])
        _add(tree, i + 1, b)
        total += b
        last_pos[s] = i
    starts = np.full(int(stream.session.max()) + 1, np.inf)
    np.minimum.at(starts, stream.session, stream.arrival_s)
    first, last = starts[np.isfinite(starts)].min(), starts[np.isfinite(starts)].max()
    keep = starts[stream.session] >= first + warmup_frac * (last - first)
    return Replay(depth[keep], history[keep], stream.input_len[keep].astype(float),
                  stream.system_prompt // block_tokens, block_tokens)


def _value_at(tree: np.ndarray, p: int) -> int:
    """The value stored at position ``p`` (0-based)."""
    return _prefix(tree, p + 1) - _prefix(tree, p)


def _add(tree: np.ndarray, i: int, v: int) -> None:
    n = len(tree)
    while i < n:
        tree[i] += v
        i += i & -i


def _prefix(tree: np.ndarray, i: int) -> int:
    s = 0
    while i > 0:
        s += int(tree[i])
        i -= i & -i
    return s
