"""Reusable value checks for the input models: finite-and-positive number types, errors located
at a field below the validator that raises them, and the model's context window.

A validator on a parent model (e.g. the whole scenario) can blame a nested field with
``located("cost.usd_per_h.h100", "...")``: ``yamlio.validation_error`` moves the error to that
field's ``file:line``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from planner.errors import InputError
from planner.units import MAX_DEGREE

LOCATED = "@"      # prefix of a located message: "@a.b.c: problem"


def located(field: str, message: str) -> ValueError:
    """A ``ValueError`` for a validator that blames ``field`` (dotted, relative to the model)."""
    return ValueError(f"{LOCATED}{field}: {message}")


def split_located(message: str) -> tuple[tuple[str, ...], str]:
    """``"@a.b: text"`` -> ``(("a", "b"), "text")``; any other message -> ``((), message)``."""
    if message.startswith(LOCATED) and ": " in message:
        field, text = message[len(LOCATED):].split(": ", 1)
        return tuple(field.split(".")), text
    return (), message


def as_path(value: object, what: str) -> Path:
    """``value`` as a ``Path``; anything that is not a str or path-like is an ``InputError``."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise InputError(f"{what} must be a file path, got {type(value).__name__} {value!r:.60}")
    return Path(value)


def is_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names an existing file; a name the system cannot hold (too long, a NUL
    byte) names none, instead of raising as ``Path.is_file`` does."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` names an existing folder (False for a name the system cannot hold)."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"must be a finite number, got {v}")
    return v


PositiveFinite = Annotated[float, Field(gt=0), AfterValidator(_finite)]
NonNegativeFinite = Annotated[float, Field(ge=0), AfterValidator(_finite)]


Degree = Annotated[int, Field(ge=1, le=MAX_DEGREE)]
"""One parallel degree: 1 to ``MAX_DEGREE`` devices."""


def _positive_ints(v: list[int]) -> list[int]:
    if not v or any(x < 1 for x in v):
        raise ValueError(f"must be a non-empty list of positive integers, got {v}")
    big = [x for x in v if x > MAX_DEGREE]
    if big:
        raise ValueError(f"a parallel degree is at most {MAX_DEGREE:,} devices, got {big[0]:.3g}")
    return v


Degrees = Annotated[list[int], AfterValidator(_positive_ints)]


def _framework_choice(v):
    """``frameworks.checked_choice``, the catalog imported only where a framework is given."""
    if v is None:
        return v
    from planner.catalog.frameworks import checked_choice

    return checked_choice(v)


def _framework_shape(v):
    """One message for a value of neither shape (pydantic's names each branch of the union)."""
    if v is None or (isinstance(v, str) and v.strip()) or (isinstance(v, dict) and all(
            isinstance(k, str) and isinstance(x, str) and x.strip() for k, x in v.items())):
        return v
    raise ValueError(f"expected a framework name (or file), or a mapping from vendor or hardware names to "
                     f"framework names, got {v!r:.80}")


# an engine as a scenario names it (engine.framework, a design's framework): one framework entry
# (catalog name or YAML path) for every device, or a mapping from a vendor or a hardware name to one
FrameworkChoice = Annotated[str | dict[str, str] | None, BeforeValidator(_framework_shape),
                            AfterValidator(_framework_choice)]
"""Parallel degrees to try (TP, EP or PP of a search): a non-empty list of 1 to ``MAX_DEGREE``."""


def check_context(model, tokens: float, what: str = "input + output") -> None:
    """Prompt + output must fit the model's context window (``max_position_embeddings``): an engine
    rejects longer requests (vLLM: ``max_model_len``), so planning them is planning nonsense."""
    window = getattr(model, "max_context", None)
    if window and tokens > window:
        raise InputError(f"{what} = {int(tokens):,} tokens exceeds {model.name}'s context window of "
                         f"{window} tokens")
