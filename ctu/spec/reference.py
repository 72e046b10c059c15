"""SPEC_REFERENCE.md and the JSON schema, generated from the spec models and the registry (never hand-kept)."""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

from ctu.registry import KINDS, registry
from ctu.registry.config import ComponentMarker
from ctu.spec.models import Spec

_CONSTRAINTS = {
    annotated_types.Gt: ("> ", "gt"),
    annotated_types.Ge: (">= ", "ge"),
    annotated_types.Lt: ("< ", "lt"),
    annotated_types.Le: ("<= ", "le"),
    annotated_types.MinLen: ("min length ", "min_length"),
    annotated_types.MaxLen: ("max length ", "max_length"),
}


def _constraints(metadata: typing.Iterable[object]) -> list[str]:
    found = []
    for item in metadata:
        for cls, (label, attr) in _CONSTRAINTS.items():
            if isinstance(item, cls):
                found.append(f"{label}{getattr(item, attr)}")
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            found.append(f"matches `{pattern}`")
    return found


def type_label(annotation: object, metadata: typing.Iterable[object] = ()) -> str:
    """A short, readable type: ``int (> 0)``, ``list of trackers component``, ``"fsdp" | "fsdp2"``."""
    metadata = list(metadata)
    marker = next((m for m in metadata if isinstance(m, ComponentMarker)), None)
    if marker is not None:
        return f"{marker.kind} component"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return type_label(typing.get_args(annotation)[0], [*typing.get_args(annotation)[1:], *metadata])
    extra = _constraints(metadata)
    suffix = f" ({', '.join(extra)})" if extra else ""
    if origin is Literal:
        return " | ".join(json.dumps(arg) for arg in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        args = typing.get_args(annotation)
        labels = [type_label(arg) for arg in args if arg is not type(None)]
        tail = " or null" if type(None) in args else ""
        return " or ".join(labels) + tail + suffix
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return f"list of {type_label(item)}{suffix}"
    if origin is dict:
        _, value = typing.get_args(annotation) or (str, Any)
        return f"mapping of name to {type_label(value)}{suffix}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"section `{annotation.__name__}`"
    if annotation is Any or annotation is object:
        return "any"
    return f"{getattr(annotation, '__name__', str(annotation))}{suffix}"


def default_label(field: FieldInfo) -> str:
    """The field's default as YAML-ish text, "required" when it has none."""
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return "(see section)"
    text = json.dumps(to_jsonable_python(value))
    return f"`{text}`" if len(text) <= 60 else "(see SPEC defaults)"


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def fields_table(model: type[BaseModel]) -> list[str]:
    """A Markdown table of `model`'s fields: key, type, default, description."""
    if not model.model_fields:
        return ["No params."]
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        rows.append(
            f"| `{name}` | {_cell(type_label(field.annotation, field.metadata))} | {_cell(default_label(field))} "
            f"| {_cell(field.description)} |"
        )
    return rows


def _nested_models(annotation: object) -> list[tuple[str, type[BaseModel]]]:
    """(suffix, model) for every section model inside `annotation` ("" direct, "[]" list item, ".<name>" dict)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _nested_models(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [item for arg in typing.get_args(annotation) for item in _nested_models(arg)]
    if origin is list:
        return [("[]" + s, m) for s, m in _nested_models(typing.get_args(annotation)[0])]
    if origin is dict:
        return [(".<name>" + s, m) for s, m in _nested_models(typing.get_args(annotation)[1])]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    return []


def _sections(model: type[BaseModel], path: str, seen: set[type[BaseModel]]) -> list[tuple[str, type[BaseModel]]]:
    found = []
    for name, field in model.model_fields.items():
        for suffix, nested in _nested_models(field.annotation):
            if nested in seen:
                continue
            seen.add(nested)
            here = f"{path}.{name}{suffix}" if path else f"{name}{suffix}"
            if "type" in nested.model_fields and typing.get_origin(nested.model_fields["type"].annotation) is Literal:
                here += f" (type: {typing.get_args(nested.model_fields['type'].annotation)[0]})"
            found.append((here, nested))
            found += _sections(nested, here.split(" ")[0], seen)
    return found


def render_reference() -> str:
    """SPEC_REFERENCE.md's full text: every section with its fields, then every registered component."""
    lines = [
        "# Spec reference",
        "",
        "<!-- Generated by `ctu docs` from the spec models and the component registry. Do not edit by hand. -->",
        "",
        "A spec is one YAML file (see README.md). Every mapping rejects unknown keys. A component is written as",
        "its name (`parser: hermes`) or as a mapping with `type` and its params (`parser: {type: hermes}`).",
        "Paths below are dotted as in command-line overrides (`ctu run SPEC trainer.epochs=3`).",
        "",
        "## Top level",
        "",
        *fields_table(Spec),
        "",
    ]
    for path, model in _sections(Spec, "", {Spec}):
        doc = _cell(model.__doc__)
        lines += [f"## `{path}`", "", doc, "", *fields_table(model), ""]
    lines += ["# Components", ""]
    for kind in KINDS:
        lines += [f"## {kind}", ""]
        infos = list(registry[kind])
        if not infos:
            lines += ["None registered.", ""]
        for info in infos:
            lines += [f"### `{kind}: {info.name}`", "", _cell(info.description), "", *fields_table(info.params_model), ""]
            for path, model in _sections(info.params_model, "", {info.params_model}):  # its params' own sections
                lines += [f"#### `{kind}: {info.name}`, `{path}`", "", _cell(model.__doc__), "", *fields_table(model), ""]
    return "\n".join(lines).rstrip() + "\n"


def render_json_schema() -> dict[str, object]:
    """The spec's JSON schema (draft 2020-12), with every registered component's params, for editors."""
    schema = Spec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "ctu spec", **schema}
