"""Command-line overrides and `${...}` interpolations, applied to a spec's merged plain data (`ctu.spec.loading`).

`key=value` overrides are applied in order (values parsed by OmegaConf's grammar; list items by index,
``rewards.0.weight=0.2``); then `${...}` interpolations are resolved by OmegaConf (`${oc.env:VAR}`,
`${oc.env:VAR,default}`, `${experiment.name}`). Every problem is a `SpecIssue`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml

from ctu.spec.errors import Location, SpecIssue
from ctu.spec.loading import PathKey, Sources, dotted
from ctu.spec.secrets import SECRET_NAME, redacted

_OVERRIDE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.([A-Za-z0-9_\-]+))*$")


def parse_override(item: str) -> tuple[PathKey, object] | SpecIssue:
    """``"trainer.epochs=3"`` -> ``(("trainer", "epochs"), 3)``, the value parsed by OmegaConf's grammar
    (numbers, bools, null, ``[a,b]``, ``{k: v}``, quoted strings); or the `SpecIssue` saying why not."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    where = Location(f"override {redacted(item)!r}")
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not _OVERRIDE_KEY.match(key):
        return SpecIssue(key or item, "an override must look like dotted.key=value", where)
    if key.split(".")[0] == "extends":
        return SpecIssue("extends", "`extends` cannot be overridden; name the base in the spec file", where)
    try:
        container: Any = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={raw}"]), resolve=False)
        value = container["value"]
    except (OmegaConfBaseException, yaml.YAMLError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split())
        return SpecIssue(key, f"cannot parse the override's value {raw!r}: {reason}", where)
    path = tuple(int(part) if part.isdigit() else part for part in key.split("."))
    return path, value


def apply_override(data: dict[str, object], path: PathKey, value: object, item: str) -> SpecIssue | None:
    """Set `path` in `data` (in place), creating missing mappings; list items are addressed by index.

    Returns:
        A `SpecIssue` when the path runs through a scalar or past the end of a list; else None.
    """
    where = Location(f"override {redacted(item)!r}")
    node: Any = data  # the YAML tree, walked and written
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        here = dotted(path[: depth + 1])
        if isinstance(node, list):
            if not isinstance(part, int) or not 0 <= part < len(node):
                return SpecIssue(here, f"no item {part} in a list of {len(node)}", where)
        elif isinstance(node, dict):
            part = str(part)
            if not last and not isinstance(node.get(part), (dict, list)):
                if part in node and node[part] is not None:
                    return SpecIssue(here, f"cannot set a key inside {type(node[part]).__name__} value", where)
                node[part] = {}
        else:
            return SpecIssue(here, "cannot set a key inside a scalar value", where)
        if last:
            node[part] = value
        else:
            node = node[part]
    return None


_ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:\s*([^,}\s]+)")


def _string_leaves(data: object, path: PathKey = ()) -> Iterator[tuple[PathKey, str]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _string_leaves(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _string_leaves(value, (*path, index))
    elif isinstance(data, str):
        yield path, data


def _set(data: Any, path: PathKey, value: object) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def resolve_interpolations(data: dict[str, object], sources: Sources) -> list[SpecIssue]:
    """Resolve every ``${...}`` in `data` in place with OmegaConf; one issue per value that fails.

    Secrets are never written into a spec: an ``${oc.env:...}`` of a variable whose name looks secret (KEY,
    TOKEN, SECRET, PASSWORD) is an error; components name such variables in an ``*_env`` field instead.
    """
    leaves = [(path, text) for path, text in _string_leaves(data) if "${" in text]
    if not leaves:
        return []
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    issues: list[SpecIssue] = []
    for path, text in leaves:
        for name in _ENV_INTERPOLATION.findall(text):
            if SECRET_NAME.search(name):
                issues.append(
                    SpecIssue(
                        dotted(path),
                        f"${{oc.env:{name}}} would write a secret into the resolved spec; "
                        "name the variable in the component's `api_key_env` instead",
                        sources.find(path),
                    )
                )
    if issues:
        return issues
    try:
        config = OmegaConf.create(data)
    except OmegaConfBaseException as exc:
        return [SpecIssue("", f"cannot interpolate: {exc}", sources.find(()))]
    resolved: list[tuple[PathKey, Any]] = []
    for path, _ in leaves:
        try:
            value = config  # walked key by key: keys may hold dots (`backend.skyrl_overrides` has dotted keys)
            for key in path:
                value = value[key]
        except (OmegaConfBaseException, ValueError, TypeError, KeyError) as exc:
            message = str(exc).split("\n")[0]
            issues.append(SpecIssue(dotted(path), f"cannot resolve interpolation: {message}", sources.find(path)))
            continue
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)  # type: ignore[assignment]
        resolved.append((path, value))
    for path, value in resolved:
        _set(data, path, value)
    return issues
