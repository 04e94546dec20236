"""YAML reading with line numbers, so a bad file gets ``file:line field: problem`` errors."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import InputError

try:  # the C loader is ~10x faster; fall back when libyaml is absent
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

Lines = dict[tuple[str, ...], int]


def load_yaml(path: Path) -> tuple[Any, Lines]:
    """Parse ``path``; return the data and a map from key path to 1-based line number."""
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"{where}: YAML syntax error: {problem}") from None
    lines: Lines = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def _walk(node: yaml.Node, prefix: tuple[str, ...], lines: Lines) -> None:
    lines.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = (*prefix, str(key.value))
            lines[path] = key.start_mark.line + 1
            _walk(value, path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*prefix, str(i)), lines)


def validation_error(path: Path | str, err: ValidationError, lines: Lines, model: type[BaseModel]) -> InputError:
    """One-line ``InputError`` for the first problem pydantic found, located in the file."""
    e = err.errors()[0]
    loc = _file_path(tuple(str(p) for p in e["loc"]), lines)
    line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), None)
    field = ".".join(loc) or "(top level)"
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        close = difflib.get_close_matches(loc[-1], sorted(_field_names(model)), n=1, cutoff=0.6)
        msg = "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
    elif e["type"] == "missing":
        msg = "required field is missing"
    elif "input" in e and not isinstance(e["input"], (dict, list)):
        msg = f"{msg}, got {e['input']!r}"
    where = f"{path}:{line}" if line else str(path)
    return InputError(f"{where} {field}: {msg}")


def _file_path(loc: tuple[str, ...], lines: Lines) -> tuple[str, ...]:
    """Drop the parts of a pydantic location the file does not contain (union discriminator tags,
    e.g. ``design.prfaas.link`` -> ``design.link``)."""
    out: tuple[str, ...] = ()
    for i, part in enumerate(loc):
        if (*out, part) not in lines and i + 1 < len(loc) and (*out, loc[i + 1]) in lines:
            continue
        out = (*out, part)
    return out


def _field_names(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    names = set(model.model_fields)
    for f in model.model_fields.values():
        for t in _types_in(f.annotation):
            names |= _field_names(t, seen)
    return names


def _types_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [t for a in getattr(annotation, "__args__", ()) for t in _types_in(a)]
