"""One registry per component kind, filled by decorators and by entry points.

A component is a class (or factory) registered under a name in one kind's registry, with a pydantic params
model declared next to it::

    from ctu.registry import ComponentParams, registry

    @registry.rewards.register("length_penalty")
    class LengthPenalty:
        '''One line that `ctu components` shows.'''

        training_only = True       # the kind's contract: rewards say whether they apply in evaluation too
        needs_judge = False        # ... and whether the composition root must give them a judge

        class Params(ComponentParams):
            per_turn: float = 0.01
            '''Subtracted per policy turn.'''

        def __init__(self, params: Params) -> None:
            self.params = params

        async def apply(self, reward, context):   # the contract's method
            return reward - self.params.per_turn * context.result.turns

A spec then names it as ``rewards: [tau_outcome, {type: length_penalty, per_turn: 0.02}]``, and the params are
checked against ``LengthPenalty.Params`` like any other part of the spec. What a class of each kind must provide
is its kind's contract, declared by the module that owns the kind (`ComponentRegistry.declare_contract`) and
checked when a component is registered (`ctu.registry.contracts`). A spec names the file or module holding such
code in ``imports:`` (`ctu.registry.imports`).

Packages register through entry points, one group per kind, named ``ctu_<kind>`` (as catalogue names them), e.g.
in their ``pyproject.toml``::

    [project.entry-points.ctu_parsers]
    my_parser = "my_package.parsers:MyParser"

ctu's own built-in components are registered the same way, by ctu's ``pyproject.toml``; so the registry names no
module above it. Every entry point is loaded at the first lookup in a process (`populate_registry`, thread-safe
and once): no caller has to remember it, a Ray worker or a rollout worker process included. The idea of one
registry per kind with entry points follows spaCy's `registry` over catalogue (https://github.com/explosion/catalogue).
"""

from __future__ import annotations

import inspect
import logging
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import catalogue
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from ctu.errors import ComponentError, RegistryError, did_you_mean
from ctu.registry.contracts import Contract, adapt, contract_of, contract_problems, optional_problems

logger = logging.getLogger(__name__)

__all__ = [
    "KINDS",
    "ComponentInfo",
    "ComponentParams",
    "ComponentRegistry",
    "populate_registry",
    "registry",
]

KINDS: tuple[str, ...] = (
    "generators",
    "parsers",
    "rewards",
    "judges",
    "trackers",
    "chat_templates",
    "user_simulators",
    "user_fault_detectors",
    "domains",
    "task_generators",
    "backends",
)
"""Every component kind, in the order `ctu components` and SPEC_REFERENCE.md list them."""

T = TypeVar("T", bound=Callable[..., object])


def _is_number_type(annotation: object) -> bool:
    """Whether a field's annotation takes numbers and not booleans (``int``, ``float``, optional or in a union)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = {typing.get_args(kind)[0] if typing.get_origin(kind) is typing.Annotated else kind
             for kind in (typing.get_args(annotation) if union else (annotation,))}
    return bool(kinds & {int, float}) and bool not in kinds


def booleans_as_numbers(model: type[BaseModel], data: object) -> object:
    """A before-validator of a whole model: YAML's ``true``/``false`` given where a number belongs is an error at
    that field's path (pydantic would read 1 and 0). The model's other fields are then not checked in that pass.

    Raises:
        ValidationError: one error per such field.
    """
    if not isinstance(data, dict):
        return data
    fields = model.model_fields
    errors = [InitErrorDetails(type=PydanticCustomError("bool_as_number", "a number, not a boolean"), loc=(name,), input=value)
              for name, value in data.items()
              if isinstance(value, bool) and name in fields and _is_number_type(fields[name].annotation)]
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)
    return data


class ComponentParams(BaseModel):
    """Base of every component's params model: unknown keys are errors, infinities, NaN and booleans are not
    numbers, attribute docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: object) -> object:
        return booleans_as_numbers(cls, data)


class NoParams(ComponentParams):
    """Params of a component that takes none."""


@dataclass(frozen=True)
class ComponentInfo:
    """What the registry knows of one component.

    Attributes:
        kind: the registry it is in, one of `KINDS`.
        name: the name a spec's ``type`` uses.
        factory: the registered class or function, called as ``factory(params)`` to build the component.
        params_model: the `ComponentParams` subclass its params are validated against.
        origin: ``file:line`` of the registered object, or the entry point it came from.
    """

    kind: str
    name: str
    factory: Callable[..., object]
    params_model: type[ComponentParams]
    origin: str

    @property
    def description(self) -> str:
        """The first paragraph of the factory's own docstring, on one line ("" when it has none: a class that
        writes none does not get its base class's, which describes the base, not the component)."""
        own = self.factory.__dict__.get("__doc__") if isinstance(self.factory, type) else self.factory.__doc__
        doc = inspect.cleandoc(own) if isinstance(own, str) else ""
        return " ".join(doc.split("\n\n", 1)[0].split())

    def build(self, params: ComponentParams, **dependencies: object) -> object:
        """Build the component from validated params and what the composition root hands it:
        ``factory(params, **dependencies)`` (e.g. ``judge=`` for a reward that `needs_judge`).

        Raises:
            RegistryError: the factory is a function and what it built lacks the kind's contract (a class is
                checked when it is registered).
        """
        component = self.factory(params, **dependencies)
        wanted = registry[self.kind].contract
        if wanted is None:
            return component
        if not isinstance(self.factory, type):
            problems = contract_problems(wanted, component)
            if problems:
                raise RegistryError(_contract_message(self.kind, self.name, self.origin, problems))
        return adapt(wanted, component)


def _contract_message(kind: str, name: str, origin: str, problems: list[str]) -> str:
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return f"{kind} component {name!r} ({origin}) does not meet the contract of {kind}:\n{lines}"


def _origin(obj: Callable[..., object]) -> str:
    try:
        file = inspect.getsourcefile(obj) or "?"
        line = inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    return f"{file}:{line}"


def _params_model_of(kind: str, name: str, obj: Callable[..., object], params: type[BaseModel] | None) -> type[ComponentParams]:
    model = params if params is not None else getattr(obj, "Params", NoParams)
    if not (isinstance(model, type) and issubclass(model, ComponentParams)):
        raise RegistryError(
            f"{kind} component {name!r} ({_origin(obj)}): its params model must subclass "
            f"ctu.registry.ComponentParams, got {model!r}"
        )
    return model


class ComponentRegistry:
    """The components of one kind: registration, lookup with suggestions, and entry points.

    Backed by a catalogue registry (namespace ``("ctu", kind)``, entry-point group ``ctu_<kind>``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._catalogue = catalogue.create("ctu", kind, entry_points=True)
        self._infos: dict[str, ComponentInfo] = {}
        self.entry_point_group = self._catalogue.entry_point_namespace
        self.contract: Contract | None = None
        """The kind's contract, once its owner declared it (`declare_contract`); None before."""

    def declare_contract(self, source: type, *, dependencies: Mapping[str, tuple[str, ...]] | None = None,
                         check: Callable[[object], list[str]] | None = None) -> None:
        """Declare the kind's contract (`ctu.registry.contracts.contract_of`): called once by the module that owns
        the kind, with the Protocol (or base class) the rest of ctu is written against. A later declaration
        replaces it. The components registered before it are checked now.

        Args:
            source: the Protocol, or the base class every component must subclass.
            dependencies: the class flags asking the composition root for more than the params (see
                `ctu.registry.contracts.Contract`).
            check: a check of the owner's own, one line per problem.

        Raises:
            RegistryError: a component registered before lacks what the contract asks (it is unregistered).
        """
        self.contract = contract_of(source, dependencies, check)
        failing = {info.name: (info, problems) for info in self._infos.values()
                   if isinstance(info.factory, type) and (problems := contract_problems(self.contract, info.factory))}
        for name in failing:
            self.unregister(name)
        if failing:
            raise RegistryError("\n".join(_contract_message(self.kind, name, info.origin, problems)
                                          for name, (info, problems) in failing.items()))

    def register(self, name: str, *, params: type[ComponentParams] | None = None) -> Callable[[T], T]:
        """Decorator registering a class or factory under `name`.

        Args:
            name: the name specs use as ``type``; lowercase letters, digits, ``_``, ``-`` and ``.``.
            params: the params model; defaults to the object's ``Params`` attribute, else no params.

        Raises:
            RegistryError: `name` is taken by another object (a built-in, an entry point's or one registered
                before; the message names both places), the name is malformed, the params model is not a
                `ComponentParams`, or a class lacks what its kind's declared contract asks (`declare_contract`: a
                method, a signature ctu can call, a class attribute such as a reward's `training_only`); the
                message names the component, its file and line, and every missing piece.
        """

        def decorate(obj: T) -> T:
            populate_registry()  # the entry points first: a name one of them holds is then refused here
            self._add(name, obj, params, origin=_origin(obj))
            return obj

        return decorate

    def _add(self, name: str, obj: Callable[..., object], params: type[ComponentParams] | None, origin: str) -> None:
        if not name or not all(c.isalnum() or c in "_-." for c in name) or name != name.lower():
            raise RegistryError(f"{self.kind} component name {name!r} ({origin}): use lowercase a-z, 0-9, _ - .")
        existing = self._infos.get(name)
        if existing is not None:
            if existing.factory is obj:
                return
            raise RegistryError(
                f"{self.kind} component {name!r} is registered twice: at {existing.origin} and at {origin}"
            )
        params_model = _params_model_of(self.kind, name, obj, params)
        problems = contract_problems(self.contract, obj) if self.contract is not None else []
        if problems:
            raise RegistryError(_contract_message(self.kind, name, origin, problems))
        for line in optional_problems(self.contract, obj) if self.contract is not None else []:
            logger.warning("%s component %r (%s): %s", self.kind, name, origin, line)
        info = ComponentInfo(self.kind, name, obj, params_model, origin)
        self._infos[name] = info
        self._catalogue.register(name, func=obj)

    def load_entry_points(self) -> None:
        """Register every entry point of group ``ctu_<kind>`` (ctu's built-ins among them), each under its file and
        line.

        Raises:
            ComponentError: an entry point failed to load (the message names it and its error).
            RegistryError: an entry point's name is already taken by another object.
        """
        for entry_point in self._catalogue._get_entry_points():
            try:
                obj = entry_point.load()
            except Exception as exc:  # a broken plugin must not hide behind a traceback
                raise ComponentError(
                    f"entry point {entry_point.name!r} = {entry_point.value!r} in group {self.entry_point_group!r} "
                    f"failed to load: {type(exc).__name__}: {exc}"
                ) from exc
            self._add(entry_point.name, obj, None, origin=f"{_origin(obj)} (entry point {entry_point.value} of {self.entry_point_group})")

    def get(self, name: str) -> ComponentInfo:
        """The component registered as `name`.

        Raises:
            ComponentError: no such component; the message names the kind and the closest registered names.
        """
        populate_registry()
        try:
            return self._infos[name]
        except KeyError:
            raise ComponentError(self.unknown_message(name)) from None

    def unknown_message(self, name: object) -> str:
        """The message for an unknown `name`, with "did you mean" and the registered names."""
        populate_registry()
        known = ", ".join(sorted(self._infos)) or "none"
        return f"unknown {self.kind} component {name!r}{did_you_mean(str(name), self._infos)}; registered: {known}"

    def __contains__(self, name: object) -> bool:
        populate_registry()
        return name in self._infos

    def __iter__(self) -> Iterator[ComponentInfo]:
        populate_registry()
        return iter(sorted(self._infos.values(), key=lambda info: info.name))

    def names(self) -> list[str]:
        """Registered names, sorted."""
        populate_registry()
        return sorted(self._infos)

    def unregister(self, name: str) -> None:
        """Remove `name` (for tests that register throw-away components)."""
        self._infos.pop(name, None)
        catalogue.REGISTRY.pop(("ctu", self.kind, name), None)


class _Registries:
    """The registries, one attribute per kind: ``registry.parsers``, ``registry.rewards``, ..."""

    def __init__(self) -> None:
        self._by_kind = {kind: ComponentRegistry(kind) for kind in KINDS}
        for kind, kind_registry in self._by_kind.items():
            setattr(self, kind, kind_registry)

    generators: ComponentRegistry
    parsers: ComponentRegistry
    rewards: ComponentRegistry
    judges: ComponentRegistry
    trackers: ComponentRegistry
    chat_templates: ComponentRegistry
    user_simulators: ComponentRegistry
    user_fault_detectors: ComponentRegistry
    domains: ComponentRegistry
    task_generators: ComponentRegistry
    backends: ComponentRegistry

    def __getitem__(self, kind: str) -> ComponentRegistry:
        if kind not in KINDS:
            raise ComponentError(f"unknown component kind {kind!r}{did_you_mean(kind, KINDS)}; kinds: {', '.join(KINDS)}")
        return self._by_kind[kind]

    def __iter__(self) -> Iterator[ComponentRegistry]:
        return iter(self._by_kind.values())


registry = _Registries()
"""The process-wide registries, filled from the entry points at the first lookup (`populate_registry`)."""

_populated = False
_populate_lock = threading.RLock()


def populate_registry() -> None:
    """Register every entry point of every kind (ctu's built-ins and installed packages' components), once a
    process; the registry calls it at its first lookup, so no one else needs to. Thread-safe; a lookup made while
    the entry points load (by a component's module) sees those registered so far.

    Raises:
        RegistryError, ComponentError: as `ComponentRegistry.load_entry_points` does; the next lookup tries again.
    """
    global _populated
    if _populated:
        return
    with _populate_lock:
        if _populated:
            return
        _populated = True
        try:
            for kind_registry in registry:
                kind_registry.load_entry_points()
        except BaseException:
            _populated = False
            raise
