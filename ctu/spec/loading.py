"""From YAML files and command-line overrides to one plain dict, remembering where every value was written.

Order: each file is safe-loaded (dates stay strings, duplicate keys are errors); its `extends` files are loaded
first, relative to it, and deep-merged in order under it (mappings merge, lists and scalars are replaced, a key
written ``key: !delete`` is removed, except `imports`, which accumulate: a base's imports, then the file's own,
each file path resolved against the file that names it);
then `ctu.spec.overrides` applies `key=value` overrides and resolves `${...}` interpolations. Every problem is
collected as a `SpecIssue`; the caller raises one `SpecError` for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ctu.spec.errors import Location, SpecIssue

PathKey = tuple[str | int, ...]
"""A path into the spec: mapping keys and list indices."""


def dotted(path: Sequence[str | int]) -> str:
    """``("rewards", 1, "weight")`` -> ``"rewards.1.weight"``."""
    return ".".join(str(part) for part in path)


class _SpecYamlLoader(yaml.SafeLoader):
    """A safe loader that keeps dates as strings: a spec has no timestamps, and OmegaConf cannot hold them."""


_SpecYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _Delete:
    """The value of ``key: !delete``: the key is removed from what the spec inherits through `extends`."""

    def __repr__(self) -> str:
        return "!delete"


DELETE = _Delete()
"""`!delete`'s value while files are merged (`deep_merge` removes the key it marks; none is left in a valid spec)."""


def _construct_delete(loader: yaml.SafeLoader, node: yaml.Node) -> _Delete:
    if not isinstance(node, yaml.ScalarNode) or node.value not in ("", "~", "null"):
        raise yaml.constructor.ConstructorError(None, None, "!delete takes no value: write `key: !delete`", node.start_mark)
    return DELETE


_SpecYamlLoader.add_constructor("!delete", _construct_delete)


@dataclass
class Sources:
    """Where each value of a merged spec was written: path -> `Location`."""

    locations: dict[PathKey, Location] = field(default_factory=dict)

    def find(self, path: Sequence[str | int]) -> Location | None:
        """The location of `path`, else of its nearest ancestor that has one."""
        path = tuple(path)
        while True:
            if path in self.locations:
                return self.locations[path]
            if not path:
                return None
            path = path[:-1]

    def replace_subtree(self, prefix: PathKey, other: dict[PathKey, Location]) -> None:
        """Forget what was under `prefix` and take `other`'s locations under it."""
        for key in [key for key in self.locations if key[: len(prefix)] == prefix]:
            del self.locations[key]
        self.locations.update({key: loc for key, loc in other.items() if key[: len(prefix)] == prefix})


def _walk_nodes(
    node: yaml.Node, path: PathKey, file: str, locations: dict[PathKey, Location], issues: list[SpecIssue]
) -> None:
    locations.setdefault(path, Location(file, node.start_mark.line + 1))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            if key == "<<":
                continue
            child = (*path, key)
            if key in seen:
                issues.append(SpecIssue(dotted(child), "duplicate key", Location(file, key_node.start_mark.line + 1)))
            seen.add(key)
            locations[child] = Location(file, key_node.start_mark.line + 1)
            _walk_nodes(value_node, child, file, locations, issues)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk_nodes(item, (*path, index), file, locations, issues)


MAX_EXPANDED_NODES = 100_000
"""Most values a spec's YAML may expand to once anchors and aliases are followed (the largest shipped spec has a
few hundred). A few lines of nested aliases can expand to 10^9 ("billion laughs"), which would hang loading."""


def _expanded_size(node: yaml.Node, sizes: dict[int, int], limit: int) -> int:
    """How many nodes `node` stands for once aliases are expanded, counted up to just past `limit`."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = 1  # a node that contains itself (a recursive alias) counts once
    total = 1
    children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else (
        node.value if isinstance(node, yaml.SequenceNode) else [])
    for child in children:
        total += _expanded_size(child, sizes, limit)
        if total > limit:
            break
    sizes[id(node)] = total
    return total


def read_yaml(text: str, file: str) -> tuple[object, dict[PathKey, Location], list[SpecIssue]]:
    """Safe-load one YAML document.

    Returns:
        ``(data, locations, issues)``: data is None when the text is empty, not YAML or expands past
        `MAX_EXPANDED_NODES` through its aliases (then `issues` says why).
    """
    loader = _SpecYamlLoader(text)
    issues: list[SpecIssue] = []
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}, issues
        if _expanded_size(node, {}, MAX_EXPANDED_NODES) > MAX_EXPANDED_NODES:
            return None, {}, [SpecIssue("", f"the YAML expands to more than {MAX_EXPANDED_NODES:,} values through its "
                                            "anchors and aliases (&name / *name); a spec is far smaller: remove the "
                                            "aliases", Location(file, 1))]
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        line = mark.line + 1 if mark is not None else None
        return None, {}, [SpecIssue("", f"invalid YAML: {problem}", Location(file, line))]
    finally:
        loader.dispose()
    locations: dict[PathKey, Location] = {}
    _walk_nodes(node, (), file, locations, issues)
    return data, locations, issues


def check_plain_data(data: object, path: PathKey, sources: Sources) -> list[SpecIssue]:
    """Issues for anything a spec cannot hold: non-string keys, and values other than str, numbers, bools,
    null, lists and mappings (e.g. YAML's ``!!binary`` or ``!!set``)."""
    issues: list[SpecIssue] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                issues.append(
                    SpecIssue(dotted((*path, str(key))), f"keys must be strings, got {type(key).__name__} {key!r}",
                              sources.find((*path, str(key))))
                )
                continue
            issues += check_plain_data(value, (*path, key), sources)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            issues += check_plain_data(value, (*path, index), sources)
    elif data is DELETE:
        issues.append(SpecIssue(dotted(path), "!delete removes a key the spec inherits through `extends`, and no base "
                                              "spec sets this one", sources.find(path)))
    elif not (data is None or isinstance(data, (str, bool, int, float))):
        issues.append(SpecIssue(dotted(path), f"unsupported value of type {type(data).__name__}", sources.find(path)))
    return issues


def deep_merge(base: dict[str, object], top: dict[str, object], sources: Sources, top_sources: dict[PathKey, Location],
               prefix: PathKey = ()) -> dict[str, object]:
    """`top` merged over `base` (neither is modified): mappings merge key by key, anything else is replaced. A
    mapping that names another `type` than the one it lands on replaces it whole: a component's params belong to
    its type, and a child switching the type (or an override ``backend.type=skyrl``) would otherwise inherit
    params the new type rejects. A key whose value is `DELETE` (``key: !delete`` in YAML) is removed from `base`;
    one `base` does not hold stays, for `check_plain_data` to report.

    `sources` (base's locations) is updated to the merged result's locations.
    """
    merged = dict(base)
    for key, value in top.items():
        path = (*prefix, key)
        below = merged.get(key)
        if value is DELETE and key in merged:  # `key: !delete` removes what a base set
            del merged[key]
            sources.replace_subtree(path, {})
            continue
        retyped = isinstance(value, dict) and isinstance(below, dict) and "type" in value and "type" in below and value["type"] != below["type"]
        if isinstance(value, dict) and isinstance(below, dict) and not retyped:
            sources.locations[path] = top_sources.get(path, sources.locations.get(path))  # type: ignore[assignment]
            merged[key] = deep_merge(below, value, sources, top_sources, path)
        else:
            merged[key] = value
            sources.replace_subtree(path, top_sources)
    return merged


def empty_over_inherited(base: dict[str, object], top: dict[str, object], locations: dict[PathKey, Location],
                         prefix: PathKey = ()) -> list[SpecIssue]:
    """An issue for each empty mapping of `top` (a spec file's own data) that lands on a mapping its bases fill:
    mappings merge, so ``key: {}`` changes nothing there, though it reads as emptying it (``key: !delete`` does)."""
    found = []
    for key, value in top.items():
        below, path = base.get(key), (*prefix, key)
        if isinstance(value, dict) and isinstance(below, dict) and below:
            if not value:
                found.append(SpecIssue(dotted(path), f"`{{}}` merges into the {len(below)} key(s) the base sets "
                                                     f"({', '.join(map(str, below))}) and changes nothing: write "
                                                     f"`{key}: !delete` to drop them", locations.get(path)))
            else:
                found += empty_over_inherited(below, value, locations, path)
    return found


def load_file(path: Path, issues: list[SpecIssue], stack: tuple[Path, ...] = ()) -> tuple[dict[str, object], Sources]:
    """Load one spec file with its `extends` chain, merged. Problems are appended to `issues`.

    Returns:
        ``(data, sources)``; data is ``{}`` where the file could not be read.
    """
    read = _read_mapping(path, issues)
    if read is None:
        return {}, Sources()
    data, locations = read
    merged, sources, imports = _load_bases(data.pop("extends", None), path, stack, locations, issues)
    imports += _own_imports(data.pop("imports", None), path, locations, issues)
    locations = {key: loc for key, loc in locations.items() if not key or key[0] not in ("extends", "imports")}
    issues += empty_over_inherited(merged, data, locations)
    merged = deep_merge(merged, data, sources, locations)
    sources.replace_subtree(("imports",), {})
    kept: dict[str, Location | None] = {}
    for entry, where in imports:
        kept.setdefault(entry, where)
    if kept:
        merged["imports"] = list(kept)
        for index, where in enumerate(kept.values()):
            if where is not None:
                sources.locations[("imports", index)] = where
    sources.locations[()] = Location(str(path), 1)
    return merged, sources


def _read_mapping(path: Path, issues: list[SpecIssue]) -> tuple[dict[str, object], dict[PathKey, Location]] | None:
    """One file's YAML mapping and where each value is, or None (the problem appended to `issues`)."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        issues.append(SpecIssue("", f"cannot read spec file: {exc.strerror or exc}", Location(file)))
        return None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        issues.append(SpecIssue("", f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} "
                                    "(save the spec as UTF-8)", Location(file, line)))
        return None
    data, locations, read_issues = read_yaml(text, file)
    issues += read_issues
    if data is None:
        if not read_issues:
            issues.append(SpecIssue("", "the spec file is empty", Location(file)))
        return None
    if not isinstance(data, dict):
        issues.append(SpecIssue("", f"a spec must be a mapping, got {type(data).__name__}", Location(file, 1)))
        return None
    return data, locations


def _load_bases(extends: object, path: Path, stack: tuple[Path, ...], locations: dict[PathKey, Location],
                issues: list[SpecIssue]) -> tuple[dict[str, object], Sources, list[tuple[str, Location | None]]]:
    """The bases `extends` names (relative to `path`), loaded and merged in order: ``(data, sources, imports)``,
    their `imports:` entries with where each is written. A missing base or a cycle is an issue."""
    merged: dict[str, object] = {}
    sources = Sources()
    imports: list[tuple[str, Location | None]] = []
    if extends is None:
        return merged, sources, imports
    bases = [extends] if isinstance(extends, str) else extends
    if not isinstance(bases, list) or not all(isinstance(base, str) for base in bases):
        issues.append(SpecIssue("extends", "must be a file name or a list of file names", locations.get(("extends",))))
        bases = []
    for index, base in enumerate(bases):
        where = locations.get(("extends", index)) or locations.get(("extends",))
        base_path = (path.parent / base).resolve()
        if base_path in stack or base_path == path.resolve():
            chain = " -> ".join(str(p) for p in (*stack, base_path))
            issues.append(SpecIssue("extends", f"circular extends: {chain}", where))
            continue
        if not base_path.is_file():
            issues.append(SpecIssue("extends", f"base spec not found: {base} (looked for {base_path})", where))
            continue
        base_data, base_sources = load_file(base_path, issues, (*stack, path.resolve()))
        base_imports = base_data.pop("imports", [])
        imports += [(entry, base_sources.locations.get(("imports", i)))
                    for i, entry in enumerate(base_imports if isinstance(base_imports, list) else [])]
        merged = deep_merge(merged, base_data, sources, base_sources.locations)
    return merged, sources, imports


def _own_imports(value: Any, path: Path, locations: dict[PathKey, Location],
                 issues: list[SpecIssue]) -> list[tuple[str, Location | None]]:
    """One file's `imports`, file entries resolved against the file's folder (see `resolve_file_import`)."""
    from ctu.registry.imports import resolve_file_import

    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(entry, str) and entry.strip() for entry in value):
        issues.append(SpecIssue("imports", "must be a list of Python files (my_rewards.py, relative to this spec) "
                                           "or module names (my_pkg.parsers)", locations.get(("imports",))))
        return []
    return [(resolve_file_import(entry.strip(), path.parent), locations.get(("imports", index)))
            for index, entry in enumerate(value)]
