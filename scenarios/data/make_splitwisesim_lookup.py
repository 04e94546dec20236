"""Write BLOOM-176B step-time tables that reproduce SplitwiseSim's own performance lookup.

SplitwiseSim (Mutinifni/splitwise-sim @ 8f99e7dc, ``performance_model.py``) times an iteration by
interpolating its profiled medians against ``batch_tokens = prompt_size x batch_size`` (scipy
``interp1d``, linear, extrapolated). A prefill iteration of ``b`` prompts of ``t`` tokens takes
``f(b t)``. A decode-only iteration of ``n`` sequences is looked up at ``batch_tokens = n``, on a
predictor built from rows whose ``batch_tokens`` start at 128 (batch-1 prompts of 128-8192 tokens,
512-token prompts at batch 2-64): every decode batch up to 512 lands on the batch-1 rows, so a
decode step costs the batch-1 time whatever the batch (BLOOM A100 48.8 ms; the same database's
batch sweep measures 96.6 ms at batch 64). These tables let the Splitwise design run on that lookup
(``measured:`` in ``scenarios/splitwise-iso-*-simlookup.yaml``) to separate what the design model
does from what the performance model says.

Grids (``planner/perf/measured.py``): prefill over batch 1-512 x tokens 1-8192 with seconds
``f(batch x tokens)`` (bilinear between grid points, not exactly ``f`` of the product); decode flat at
the batch-1 time over batch 1-512 and context 1-131,072. Data: the ``splitwisesim`` points of
``validation/`` (medians per ``batch_tokens`` where two sweeps meet). Run from the repository root:
``python scenarios/data/make_splitwisesim_lookup.py``; ``tests/test_splitwise.py`` checks the
files are what this writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKENS = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
CONTEXTS = (1, 131_072)
HARDWARE = ("a100-80g", "h100-sxm")


def path(hardware: str) -> Path:
    return HERE / f"splitwisesim-lookup-bloom-176b-{hardware}-tp8.csv"


def table(hardware: str) -> str:
    from planner.validate import load_points

    points = [p for p in load_points().points
              if p.source == "splitwisesim" and p.model == "bloom-176b" and p.hardware == hardware]
    by_tokens: dict[int, list[float]] = {}
    tbt = None
    for p in points:
        if p.metric == "prefill_s":
            by_tokens.setdefault(p.input_len * (p.batch or 1), []).append(p.value)
        elif p.metric == "decode_step_s" and (p.batch or 1) == 1:
            tbt = p.value
    assert tbt is not None and len(by_tokens) >= 2
    x = np.array(sorted(by_tokens), float)
    y = np.array([np.median(by_tokens[int(k)]) for k in x])

    def lookup(q: float) -> float:                     # interp1d(x, y, fill_value="extrapolate")
        i = int(np.clip(np.searchsorted(x, q) - 1, 0, len(x) - 2))
        return float(y[i] + (y[i + 1] - y[i]) * (q - x[i]) / (x[i + 1] - x[i]))

    lines = [f"# SplitwiseSim's lookup for bloom-176b on {hardware} TP8 (scenarios/data/make_splitwisesim_lookup.py;",
             "# data: SplitwiseSim perf_model.csv medians, Mutinifni/splitwise-sim @ 8f99e7dc, MIT)",
             "phase,batch,tokens,context,seconds,tp"]
    for b in BATCHES:
        for t in TOKENS:       # the extrapolation goes negative below the smallest profile: floor it
            lines.append(f"prefill,{b},{t},0,{max(lookup(b * t), 0.5 * y[0]):.6g},8")
    for b in (BATCHES[0], BATCHES[-1]):
        for c in CONTEXTS:
            lines.append(f"decode,{b},1,{c},{tbt:.6g},8")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    for hw in HARDWARE:
        path(hw).write_text(table(hw))
        print(path(hw))
