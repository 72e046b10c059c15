"""Pydantic's errors as `SpecIssue`s: clean dotted paths, plain messages, "did you mean" for unknown keys."""

from __future__ import annotations

import types
import typing
from typing import Literal, Union

from pydantic import BaseModel, ValidationError

from ctu.errors import closest
from ctu.registry import registry
from ctu.registry.config import ComponentMarker
from ctu.spec.errors import SpecIssue
from ctu.spec.loading import PathKey, Sources, dotted

_NONE = type(None)


def _unwrap(annotation: object, metadata: list[object] | None = None) -> tuple[object, ComponentMarker | None]:
    """Strip Annotated and Optional; return the core type and its component marker, if any."""
    marker = next((m for m in metadata or () if isinstance(m, ComponentMarker)), None)
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            extra = typing.get_args(annotation)[1:]
            marker = marker or next((m for m in extra if isinstance(m, ComponentMarker)), None)
            annotation = typing.get_args(annotation)[0]
            continue
        origin = typing.get_origin(annotation)
        if origin in (Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not _NONE]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation, marker


def _union_member_for(members: list[object], tag: object) -> type[BaseModel] | None:
    for member in members:
        member, _ = _unwrap(member)
        if isinstance(member, type) and issubclass(member, BaseModel) and "type" in member.model_fields:
            literal = member.model_fields["type"].annotation
            if typing.get_origin(literal) is Literal and tag in typing.get_args(literal):
                return member
    return None


def _child(value: object, part: str | int) -> object:
    if isinstance(value, dict):
        return value.get(part)
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return value[part]
    return None


def walk_error_location(model: type[BaseModel], data: object, loc: tuple[str | int, ...]) -> tuple[PathKey, list[str]]:
    """Map a pydantic error location onto the spec.

    Returns:
        ``(path, keys)``: the path without pydantic's internal segments (union tags, ``[key]``), and the keys
        allowed in the mapping that holds the last segment ("" where unknown), for "did you mean".
    """
    annotation: object = model
    marker: ComponentMarker | None = None
    value = data
    path: list[str | int] = []
    allowed: list[str] = []
    in_component = False
    for part in loc:
        if part == "[key]":
            continue
        annotation, found = _unwrap(annotation)
        marker = found or marker
        if marker is not None:
            annotation = _component_params(marker, value)
            in_component = annotation is not None
            marker = None
            if part == "type":
                path.append(part)
                allowed = []
                annotation = None
                continue
        origin = typing.get_origin(annotation)
        if origin in (Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not _NONE]
            tagged = _union_member_for(members, part)
            if tagged is not None:  # pydantic's discriminator tag: not part of the spec's path
                annotation = tagged
                continue
            if isinstance(part, str) and not (isinstance(value, dict) and part in value):
                continue  # a union member's label, e.g. "list[str]"
            annotation = _union_member_for(members, value.get("type") if isinstance(value, dict) else None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            allowed = sorted(annotation.model_fields) + (["type"] if in_component else [])
            in_component = False
        else:
            allowed = []
        path.append(part)
        annotation, marker = _child_annotation(annotation, part)
        value = _child(value, part)
    return tuple(path), allowed


def _component_params(marker: ComponentMarker, value: object) -> type[BaseModel] | None:
    """The params model of the component `value` names (a name, or a mapping with `type`), if registered."""
    name = value.get("type") if isinstance(value, dict) else value if isinstance(value, str) else None
    if isinstance(name, str) and name in registry[marker.kind]:
        return registry[marker.kind].get(name).params_model
    return None


def _child_annotation(annotation: object, part: str | int) -> tuple[object, ComponentMarker | None]:
    """The annotation (and component marker) of `part` inside a value of `annotation`: a model's field, a
    collection's item; None where unknown."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        info = annotation.model_fields.get(part) if isinstance(part, str) else None
        return _unwrap(info.annotation, info.metadata) if info is not None else (None, None)
    if typing.get_origin(annotation) in (list, tuple, dict):
        args = typing.get_args(annotation)
        return (args[-1] if args else None), None
    return None, None


_MESSAGES = {
    "missing": "required key is missing",
    "extra_forbidden": "unknown key",
}


def issues_from_validation_error(
    error: ValidationError, model: type[BaseModel], data: object, sources: Sources
) -> list[SpecIssue]:
    """One `SpecIssue` per distinct path in `error` (a union's alternatives are joined with "or"); a value given is
    repeated in the message when short, unless it looks like a key (`ctu.spec.secrets.looks_like_secret`)."""
    from ctu.spec.secrets import looks_like_secret

    by_path: dict[PathKey, list[str]] = {}
    for item in error.errors(include_url=False):
        path, allowed = walk_error_location(model, data, tuple(item["loc"]))
        kind = item["type"]
        message = _MESSAGES.get(kind, item["msg"])
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            context = item.get("ctx", {})
            path = (*path, context.get("discriminator", "type").strip("'"))
            if kind == "union_tag_not_found":
                message = _MESSAGES["missing"]
            else:
                tags = [tag.strip().strip("'") for tag in str(context.get("expected_tags", "")).split(",")]
                tag = str(context.get("tag", ""))
                suggestion = closest(tag, tags)
                hint = f" (did you mean {suggestion[0]!r}?)" if suggestion else ""
                message = f"unknown {path[-2] if len(path) > 1 else 'type'} type {tag!r}{hint}; expected one of: " + ", ".join(
                    repr(t) for t in tags
                )
        elif kind.startswith("value_error"):
            message = item["msg"].removeprefix("Value error, ")
        if kind == "extra_forbidden" and path:
            key = str(path[-1])
            suggestions = closest(key, allowed)
            if suggestions:
                message += " (did you mean " + " or ".join(repr(s) for s in suggestions) + "?)"
            elif allowed:
                message += "; allowed here: " + ", ".join(allowed)
        elif kind not in ("missing", "unknown_component", "extra_forbidden", "union_tag_invalid") and "input" in item:
            shown = repr(item["input"])
            if len(shown) <= 60 and not isinstance(item["input"], dict) and not looks_like_secret(item["input"]):
                message += f" (got {shown})"
        messages = by_path.setdefault(path, [])
        if message not in messages:
            messages.append(message)
    issues = []
    for path, messages in by_path.items():
        issues.append(SpecIssue(dotted(path), "; or ".join(messages), sources.find(path)))
    return issues
