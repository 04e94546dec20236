"""``--set key.path=value``: change one field of a scenario from the command line.

The value is read as YAML (``40`` is a number, ``[1, 2]`` a list, ``fp8`` a string), the path
walks mappings by key and lists by index, creating missing mappings. An error in an overridden
value names ``--set key.path`` instead of a file line.
"""

from __future__ import annotations

from typing import Any

from planner.errors import InputError


def parse_set(item: str) -> tuple[tuple[str, ...], Any]:
    """``"workload.rate=40"`` -> ``(("workload", "rate"), 40)``."""
    import yaml

    key, sep, text = item.partition("=")
    path = tuple(p.strip() for p in key.split("."))
    if not sep or not all(path):
        raise InputError(f"--set {item!r}: expected key.path=value, e.g. --set workload.rate=40")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text                               # not YAML: keep the text (validation judges it)
    except (ValueError, OverflowError) as e:       # a number past Python's 4,300 digits, a date like 2024-13-45
        shown = text if len(text) <= 40 else f"{text[:20]}...({len(text):,} characters)"
        raise InputError(f"--set {key}={shown}: {str(e).split(';')[0]}; expected a number of at most 4,300 "
                         "digits, text, a list or a mapping") from None
    return path, value


def apply_sets(data: dict, items: list[str]) -> tuple[dict, list[tuple[str, ...]]]:
    """A copy of ``data`` with every ``--set`` applied, and the paths set."""
    import copy

    data = copy.deepcopy(data)
    paths = []
    for item in items:
        path, value = parse_set(item)
        node: Any = data
        for i, part in enumerate(path[:-1]):
            node = _child(node, part, path[:i + 1], item)
        _assign(node, path[-1], value, item)
        paths.append(path)
    return data, paths


def _child(node: Any, part: str, where: tuple[str, ...], item: str) -> Any:
    if isinstance(node, dict):
        if not isinstance(node.get(part), (dict, list)):
            node[part] = {}
        return node[part]
    if isinstance(node, list) and (i := _index(part, node)) is not None:
        return node[i]
    raise InputError(f"--set {item}: {'.'.join(where)} is not a mapping or a list index in the scenario")


def _assign(node: Any, part: str, value: Any, item: str) -> None:
    if isinstance(node, dict):
        node[part] = value
    elif isinstance(node, list) and (i := _index(part, node)) is not None:
        node[i] = value
    else:
        want = f" (expected a list index below {len(node)})" if isinstance(node, list) else ""
        raise InputError(f"--set {item}: cannot set {part!r} here{want}")


def _index(part: str, node: list) -> int | None:
    """``part`` as an index of ``node`` (ASCII digits, in range), else None."""
    return int(part) if part.isascii() and part.isdigit() and len(part) < 19 and int(part) < len(node) else None
