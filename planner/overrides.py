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
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise InputError(f"--set {item}: {'.'.join(where)} is not a mapping or a list index in the scenario")


def _assign(node: Any, part: str, value: Any, item: str) -> None:
    if isinstance(node, dict):
        node[part] = value
    elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
        node[int(part)] = value
    else:
        raise InputError(f"--set {item}: cannot set {part!r} here")
