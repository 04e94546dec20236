"""YAML reading with line numbers, so a bad file gets ``file:line field: problem`` errors."""

from __future__ import annotations

import collections.abc
import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from planner.checks import split_located
from planner.errors import InputError

try:  # the C loader is ~10x faster; fall back when libyaml is absent
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

Lines = dict[tuple[str, ...], int]


# Limits far above any real scenario or profile (the bundled ones nest <= 6 deep, hold < 2,000
# nodes): a document past them is an accident or an attack (an alias "billion laughs" bomb).
MAX_BYTES = 20_000_000
MAX_DEPTH = 64
MAX_NODES = 200_000           # after expanding aliases

_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
         (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def read_text(path: Path | str, what: str = "file") -> str:
    """The UTF-8 text of ``path``; unreadable, binary or non-UTF-8 files are an ``InputError``
    naming the file (and the line of the first bad byte)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputError(f"{path}: {what} is larger than {MAX_BYTES // 1_000_000} MB")
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise InputError(f"{path}:1: {what} is {name} text; save it as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise InputError(f"{path}:{line}: {what} is binary (NUL byte), expected UTF-8 text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(f"{path}:{line}: {what} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset "
                         f"{e.start}); save it as UTF-8") from None


def load_yaml(path: Path) -> tuple[Any, Lines]:
    """Parse ``path`` safely; return the data and a map from key path to 1-based line number.

    Rejected with ``file:line``: non-UTF-8 text, nesting deeper than ``MAX_DEPTH``, aliases that
    expand past ``MAX_NODES`` nodes, duplicate keys in a mapping (YAML would silently keep the
    last), and ``.inf`` / ``.nan`` values (no planner quantity is infinite or undefined)."""
    text = read_text(path, "YAML file")
    loader = _Loader(text)
    try:
        _check_events(path, text)
        node = loader.get_single_node()
        if node is not None:
            _check_nodes(path, node)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"{where}: YAML syntax error: {problem}") from None
    except InputError:
        raise
    except (ValueError, OverflowError, TypeError) as e:     # e.g. a timestamp like 2024-13-45
        raise InputError(f"{path}: YAML value error: {e}") from None
    finally:
        loader.dispose()
    lines: Lines = {}
    if node is not None:
        _walk(node, (), lines, path)
    return data, lines


def _check_events(path: Path, text: str) -> None:
    """Nesting depth from the event stream (flat: the composer would recurse and can crash)."""
    depth = 0
    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise InputError(f"{path}:{ev.start_mark.line + 1}: nesting deeper than {MAX_DEPTH} levels "
                                 "(no scenario or profile needs that)")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _check_nodes(path: Path, root: yaml.Node) -> None:
    """Alias expansion size (memoized per node, so a bomb costs its size, not its expansion) and
    duplicate keys."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()            # the nodes being sized: the path from the root

    def size(node: yaml.Node) -> int:
        if id(node) in open_nodes:
            raise InputError(f"{path}:{node.start_mark.line + 1}: an alias (*name) refers to a node that contains "
                             "it: a recursive structure no planner input has")
        if id(node) in sizes:
            return sizes[id(node)]
        open_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            _no_duplicates(path, node)
            n = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(size(v) for v in node.value)
        else:
            n = 1
        open_nodes.discard(id(node))
        sizes[id(node)] = n
        return n

    total = size(root)
    if total > MAX_NODES:
        raise InputError(f"{path}:1: the document expands to {total:,} nodes (more than {MAX_NODES:,}); "
                         "an alias (*name) repeats a large anchor")


def _no_duplicates(path: Path, node: yaml.MappingNode) -> None:
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            raise InputError(f"{path}:{line} {key.value}: duplicate key {key.value!r} (also on line "
                             f"{seen[key.value]}); YAML would silently keep only the last")
        seen[key.value] = line


_NON_FINITE = {".inf", "+.inf", "-.inf", ".nan"}


def _finite(path: Path, node: yaml.ScalarNode, field: tuple[str, ...]) -> None:
    if node.tag == "tag:yaml.org,2002:float" and node.value.lower() in _NON_FINITE:
        raise InputError(f"{path}:{node.start_mark.line + 1} {'.'.join(field) or '(top level)'}: {node.value} is "
                         "not a finite number (no planner quantity is infinite or undefined)")


def _walk(node: yaml.Node, prefix: tuple[str, ...], lines: Lines, file: Path) -> None:
    lines.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = (*prefix, str(key.value))
            lines[path] = key.start_mark.line + 1
            _walk(value, path, lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*prefix, str(i)), lines, file)
    else:
        _finite(file, node, prefix)


def validation_error(path: Path | str, err: ValidationError, lines: Lines, model: type[BaseModel]) -> InputError:
    """One-line ``InputError`` for the first problem pydantic found, located in the file."""
    e = err.errors()[0]
    tagged = len(e["loc"])                    # pydantic's own parts, which name union members' tags
    below, text = split_located(e["msg"].removeprefix("Value error, "))
    if below:
        e = {**e, "msg": text, "loc": (*e["loc"], *below)}
    loc = _file_path(_follow(model, tuple(str(p) for p in e["loc"]), tagged)[0], lines)
    line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), None)
    field = ".".join(loc) or "(top level)"
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        key = loc[-1]
        here = _fields_at(model, tuple(str(p) for p in e["loc"][:-1])) or _fields_at(model, loc[:-1])
        close = [c for c in difflib.get_close_matches(key, sorted(here or _field_names(model)), n=2, cutoff=0.6)
                 if c != key][:1]
        msg = "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
        elsewhere = [p for p in _paths_of(model, key) if p != field][:3]    # a real key, in another section
        if not close and elsewhere:
            msg += (f" in this section (its keys: {', '.join(sorted(here))})" if here else " here") + \
                f"; {key!r} belongs in {' or '.join(elsewhere)}"
    elif e["type"] == "missing":
        msg = "required field is missing"
    elif e["type"] == "union_tag_not_found":   # pydantic: "Unable to extract tag using discriminator 'x'"
        key = str(e.get("ctx", {}).get("discriminator", "type")).strip("'\"")
        msg = f"no {key!r} key: give {loc[-1] if loc else 'it'}.{key} to say which kind this is"
    elif "input" in e and not isinstance(e["input"], (dict, list)) and ", got " not in msg:
        msg = f"{msg}, got {e['input']!r}"      # (a validator's own message may already say it)
    where = f"{path}:{line}" if line else (f"{path} --set" if line == 0 else str(path))
    return InputError(f"{where} {field}: {msg}")


def _follow(model: type[BaseModel], loc: tuple[str, ...],
            tagged: int | None = None) -> tuple[tuple[str, ...], list[type[BaseModel]]]:
    """Walk pydantic location ``loc`` down ``model``'s sections: (``loc`` without the union tags
    pydantic puts in it, ``design.polca.brake_mhz`` -> ``design.brake_mhz``; the section models
    at its end, none where it cannot be followed). A tag is a part that is no field of the section
    there but the ``type`` of one of its members, or (a callable discriminator's) names a member
    holding the next part; among the first ``tagged`` parts (pydantic's location, default all), a
    ``Tag`` of a callable discriminator's member (``Scenario.workload``: requests / sessions).
    A path a validator wrote (``located``) has no tags."""
    tagged = len(loc) if tagged is None else tagged
    models: list[type[BaseModel]] = [model]
    out: tuple[str, ...] = ()
    keyed = False                         # the part before was a mapping field: this part is its key
    tags: dict[str, type[BaseModel]] = {}   # the members of a tagged union the part before opened
    for j, part in enumerate(loc):
        if part in tags and j < tagged:   # pydantic's Tag of the member it validated: dropped
            models, tags = [tags[part]], {}
            continue
        tags = {}
        if part.isdigit() or not models or keyed:  # a list item or a mapping key: the value type is held
            out, keyed = (*out, part), False
            continue
        nxt = [t for m in models if part in m.model_fields for t in _types_in(m.model_fields[part].annotation)]
        if nxt or any(part in m.model_fields for m in models):
            keyed = any(_is_mapping(m.model_fields[part].annotation) for m in models if part in m.model_fields)
            tags = {k: v for m in models if part in m.model_fields
                    for k, v in _tagged_members(m.model_fields[part].annotation).items()}
            models, out = nxt, (*out, part)
            continue
        tagged = [m for m in models if "type" in m.model_fields and m.model_fields["type"].default == part]
        after = loc[j + 1] if j + 1 < len(loc) else None
        if not tagged and after is not None:
            tagged = [m for m in models if after in m.model_fields]
        if tagged:
            models = tagged                 # the tag: dropped, the section narrowed to its member
        else:
            models, out = [], (*out, part)
    return out, models


def _file_path(loc: tuple[str, ...], lines: Lines) -> tuple[str, ...]:
    """Drop the parts of a pydantic location the file does not contain (union discriminator tags,
    e.g. ``design.prfaas.link`` -> ``design.link``)."""
    out: tuple[str, ...] = ()
    for i, part in enumerate(loc):
        if (*out, part) not in lines and i + 1 < len(loc) and (*out, loc[i + 1]) in lines:
            continue
        out = (*out, part)
    return out


def _fields_at(model: type[BaseModel], path: tuple[str, ...]) -> set[str]:
    """Field names of the section at ``path`` (``_follow``), so an unknown key is matched against
    its own section's names; empty where the path cannot be followed (then the caller takes every
    name)."""
    return {name for m in _follow(model, path)[1] for name in m.model_fields}


def _paths_of(model: type[BaseModel], key: str, depth: int = 3) -> list[str]:
    """Dotted paths (shortest first) at which ``key`` is a field of ``model``'s sections, down to
    ``depth`` levels: where a key given in the wrong section belongs."""
    found: list[str] = []

    def walk(m: type[BaseModel], prefix: tuple[str, ...], seen: frozenset) -> None:
        if m in seen or len(prefix) >= depth:
            return
        for name, f in m.model_fields.items():
            if name == key:
                found.append(".".join((*prefix, name)))
            for t in _types_in(f.annotation):
                walk(t, (*prefix, name), seen | {m})

    walk(model, (), frozenset())
    return sorted(dict.fromkeys(found), key=lambda p: (p.count("."), p))


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


def _is_mapping(annotation: Any) -> bool:
    """Whether a field's annotation is a mapping (``dict[K, V]``, optionally ``| None``): the next
    part of a location in it is a key, not a field or a union tag."""
    origin = typing.get_origin(annotation)
    if origin in (dict, collections.abc.Mapping):
        return True
    return origin in (typing.Union, types.UnionType) and any(map(_is_mapping, typing.get_args(annotation)))


def _tagged_members(annotation: Any) -> dict[str, type[BaseModel]]:
    """``{tag: member}`` of a union whose members are ``Annotated[Model, Tag(tag)]`` (a callable
    discriminator's: ``Scenario.workload``), which pydantic names in an error's location."""
    from pydantic import Tag

    out = {}
    for a in getattr(annotation, "__args__", ()):
        for meta in getattr(a, "__metadata__", ()):
            members = _types_in(a)
            if isinstance(meta, Tag) and members:
                out[meta.tag] = members[0]
    return out


def _types_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [t for a in getattr(annotation, "__args__", ()) for t in _types_in(a)]
