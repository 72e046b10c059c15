"""The spec's reference to a registered component: ``{type: NAME, ...params}`` or just ``NAME``.

``Annotated[ComponentConfig, ComponentMarker("parsers")]`` is the annotation of a spec field that holds a parser
(`ctu.spec.models` declares one alias per kind, and `ComponentConfig[Parser]` for the type checker). Validation looks the name up in
the registry at validation time (so components registered after the schema was built are seen) and validates
the remaining keys against that component's params model, so a typo inside a component's params is reported
at its own dotted path, like any other. The JSON schema lists every registered component of the kind as a
``oneOf`` of objects with a constant ``type``, which editors (yaml-language-server) use for completion.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Self, cast

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

from ctu.errors import closest
from ctu.registry import ComponentParams, registry


class ComponentConfig[T]:
    """A validated component reference: its `kind`, its registered `type` name and its validated `params`;
    generic over what it builds (the kind's Protocol: ``ComponentConfig[Parser]``, as the spec's fields declare).

    Equal when kind, type and params are equal; dumps as ``{"type": type, **params}``.
    """

    __slots__ = ("kind", "params", "type")

    def __init__(self, kind: str, type: str, params: ComponentParams) -> None:
        self.kind = kind
        self.type = type
        self.params = params

    def build(self, **dependencies: object) -> T:
        """Build the component: the registered factory called with the validated params and `dependencies` (what
        the composition root hands it, e.g. ``judge=``). It is a `T`: the registry checked the kind's contract
        when the class was registered (and checks a factory function's result in `ComponentInfo.build`).

        Raises:
            ComponentError: the component is no longer registered.
        """
        return cast(T, registry[self.kind].get(self.type).build(self.params, **dependencies))

    @classmethod
    def named(cls, kind: str, name: str, params: Mapping[str, object] | None = None) -> Self:
        """A reference to the registered component `name` of `kind`, `params` validated by its params model (the
        same check as a spec's); ``ComponentConfig[Parser].named("parsers", "hermes")`` builds a `Parser`.

        Raises:
            ComponentError: no such component. pydantic.ValidationError: bad params.
        """
        return cls(kind, name, registry[kind].get(name).params_model.model_validate(dict(params or {})))

    @property
    def factory(self) -> Callable[..., object]:
        """The registered class (or function) the component is built with.

        Raises:
            ComponentError: the component is no longer registered.
        """
        return registry[self.kind].get(self.type).factory

    def to_dict(self) -> dict[str, object]:
        """``{"type": ..., **params}`` in JSON-compatible form (nested components as mappings too)."""
        return {"type": self.type, **self.params.model_dump(mode="json")}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ComponentConfig):
            return NotImplemented
        return (self.kind, self.type, self.params) == (other.kind, other.type, other.params)

    def __hash__(self) -> int:
        return hash((self.kind, self.type))

    def __repr__(self) -> str:
        return f"ComponentConfig({self.kind}:{self.type}, {self.params!r})"


def _error(error_type: str, message: str, loc: tuple[str | int, ...], value: object) -> ValidationError:
    details = InitErrorDetails(type=PydanticCustomError(error_type, message), loc=loc, input=value)
    return ValidationError.from_exception_data("component", [details])


class ComponentMarker:
    """Annotation metadata that makes a field hold a component of one `kind` (see `Component`)."""

    def __init__(self, kind: str) -> None:
        registry[kind]  # fail early on a misspelt kind
        self.kind = kind

    def validate(self, value: object) -> ComponentConfig[object]:
        """Turn a name or a ``{type: ..., ...}`` mapping into a `ComponentConfig`.

        Raises:
            ValidationError: with errors located relative to the field (``type`` for an unknown name, each
                param's own key for bad params).
        """
        if isinstance(value, ComponentConfig):
            if value.kind != self.kind:
                raise _error("component_kind", f"expected a {self.kind} component, got a {value.kind} one", (), value)
            return value
        if isinstance(value, str):
            value = {"type": value}
        if not isinstance(value, dict):
            raise _error(
                "component_form",
                f"expected a {self.kind} component: a name, or a mapping with `type` and its params",
                (),
                value,
            )
        if "type" not in value:
            near = [key for key in value if isinstance(key, str) and closest(key, ["type"])]
            if near:  # `tyype: hermes`: name the misspelt key, not only the missing one
                raise _error("unknown_component_key", f"unknown key {near[0]!r} (did you mean 'type'?): a {self.kind} "
                             "component names its kind in `type`", (near[0],), value)
            raise _error("missing", f"a {self.kind} component needs `type`", ("type",), value)
        name = value["type"]
        kind_registry = registry[self.kind]
        if not isinstance(name, str) or name not in kind_registry:
            raise _error("unknown_component", kind_registry.unknown_message(name), ("type",), name)
        info = kind_registry.get(name)
        params = info.params_model.model_validate({k: v for k, v in value.items() if k != "type"})
        return ComponentConfig[object](self.kind, name, params)

    def __get_pydantic_core_schema__(self, source: object, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self.validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.to_dict(), when_used="always"
            ),
        )

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, object]:
        options: list[dict[str, object]] = []
        names = registry[self.kind].names()
        for info in registry[self.kind]:
            params_schema = handler.resolve_ref_schema(handler(info.params_model.__pydantic_core_schema__))
            options.append(
                {
                    "type": "object",
                    "title": f"{self.kind}.{info.name}",
                    "description": info.description,
                    "properties": {"type": {"const": info.name}, **params_schema.get("properties", {})},
                    "required": ["type", *params_schema.get("required", [])],
                    "additionalProperties": False,
                }
            )
        shorthand = {"type": "string", "enum": names, "description": f"a {self.kind} component by name, default params"}
        return {"oneOf": [shorthand, *options]} if names else {"type": ["object", "string"]}
