"""scipy's MILP (HiGHS) with the solver's own prints kept off stdout.

HiGHS writes some MIP diagnostics (e.g. ``HighsMipSolverData::transformNewIntegerFeasibleSolution``)
from C++ straight to file descriptor 1, whatever ``disp`` says, which corrupted ``--json`` output
for a few fleet mixes. During a solve descriptor 1 points at descriptor 2, so such lines reach
stderr and stdout carries only the planner's own answer.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def _stdout_fd_to_stderr() -> Iterator[None]:
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:                   # no descriptor 1 to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.dup2(saved, 1)
        os.close(saved)


def milp(*args: Any, **kwargs: Any):
    """``scipy.optimize.milp(*args, **kwargs)``, the solver's own prints sent to stderr."""
    from scipy.optimize import milp as scipy_milp

    with _stdout_fd_to_stderr():
        return scipy_milp(*args, **kwargs)
