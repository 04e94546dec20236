"""Typed errors. The CLI maps `InputError` to exit code 2 and `InfeasibleError` to exit code 1."""

from __future__ import annotations

import difflib


class PlannerError(Exception):
    """Base class of every error the planner raises on purpose."""

    exit_code = 2


class InputError(PlannerError, ValueError):
    """The user gave something malformed or unknown (bad name, size, file)."""

    exit_code = 2


class InfeasibleError(PlannerError):
    """The request was understood but cannot be met (model does not fit, SLO unreachable)."""

    exit_code = 1


def unknown_name(kind: str, name: str, known: list[str]) -> InputError:
    """An `InputError` for an unknown catalog name, with a did-you-mean when one is close."""
    key = name.lower()
    prefixed = [k for k in known if k.startswith(key) or key.startswith(k)]
    close = list(dict.fromkeys(prefixed + difflib.get_close_matches(key, known, n=3, cutoff=0.5)))[:3]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return InputError(f"unknown {kind} {name!r}{hint} (known: {', '.join(sorted(known))})")


def count(n: float) -> str:
    """A whole count as a message shows it: 1,234, and 3.42e+17 past a trillion (not 300 digits)."""
    return f"{int(n):,}" if n < 1e12 else f"{float(n):.3g}"
