"""The base of every input and result model: immutable, and unknown keys are errors (so a typo in
a scenario or profile is reported, never silently ignored). ``true``/``false`` are not numbers:
pydantic would read ``rate: true`` as 1 request/s, so a boolean given for a numeric field (or
inside a numeric list or mapping) is reported as the field's type error."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

_NUMBER = (int, float)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not any(isinstance(v, (bool, dict, list)) for v in data.values()):
            return data
        shapes = _numeric_fields(cls)
        return {k: _unbool(v, shapes[k]) if k in shapes else v for k, v in data.items()}


_SHAPES: dict[type, dict[str, str]] = {}


def _numeric_fields(cls: type[BaseModel]) -> dict[str, str]:
    """Field name -> 'scalar' / 'list' / 'dict' for fields holding numbers (cached per class)."""
    if cls not in _SHAPES:
        _SHAPES[cls] = {name: shape for name, f in cls.model_fields.items()
                        if (shape := _shape(f.annotation)) is not None}
    return _SHAPES[cls]


def _shape(annotation: Any) -> str | None:
    options = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    for a in options:
        if a in _NUMBER:
            return "scalar"
        origin, args = typing.get_origin(a), typing.get_args(a)
        if origin in (list, tuple) and args and all(x in _NUMBER or x is Ellipsis for x in args):
            return "list"
        if origin is dict and len(args) == 2 and args[1] in _NUMBER:
            return "dict"
    return None


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _unbool(value: Any, shape: str) -> Any:
    """The value with booleans replaced by their YAML spelling, which the number parser rejects
    with the field's own location."""
    fix = (lambda x: ("true" if x else "false") if isinstance(x, bool) else x)  # noqa: E731
    if shape == "scalar":
        return fix(value)
    if shape == "list" and isinstance(value, (list, tuple)):
        return [fix(x) for x in value]
    if shape == "dict" and isinstance(value, dict):
        return {k: fix(x) for k, x in value.items()}
    return value
