"""What each component kind must provide, checked when a component is registered.

A kind's contract is derived from the one class the rest of ctu is written against (`CONTRACTS`): its Protocol
(`tau_bench_env.interfaces.Parser` and `UserSimulator`, `ctu.components.rewards.base.Reward`,
`ctu.components.judges.base.Judge`, `ctu.components.trackers.base.Tracker`,
`ctu.components.chat_templates.base.ChatTemplate`, `ctu.components.generators.base.GeneratorComponent`,
`ctu.components.task_generators.base.TaskGenerator`,
`ctu.runners.backend.Backend`), or, for
domains, the base class every domain subclasses (`tau_bench_env.domains.Domain`). A Protocol's methods are the
calls ctu makes: its positional parameters are passed positionally, its keyword-only ones by keyword, and an
``async def`` is awaited; its ``ClassVar`` annotations are the class attributes ctu reads, with their types.

`contract_problems` checks a registered class (or, for a component registered as a factory function, the object
the factory built) and returns one line per thing missing; `ComponentRegistry.register` turns them into a
`RegistryError` naming the component and its file, so an incomplete component fails where it is declared instead
of turning every episode into an error record.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Union

__all__ = ["CONTRACTS", "Contract", "Method", "contract", "contract_problems"]


@dataclass(frozen=True)
class Method:
    """One method ctu calls: ``name(*args, **{k: ... for k in kwargs})``, awaited when `is_async`."""

    name: str
    args: tuple[str, ...] = ()
    kwargs: tuple[str, ...] = ()
    is_async: bool = False

    def __str__(self) -> str:
        shown = ", ".join((*self.args, *(f"{k}=..." for k in self.kwargs)))
        return f"{'async ' if self.is_async else ''}{self.name}({shown})"


@dataclass(frozen=True)
class Contract:
    """The methods and class attributes of one kind (attribute name -> the type its value must have)."""

    methods: tuple[Method, ...] = ()
    attributes: dict[str, type | tuple[type, ...]] = field(default_factory=dict)
    base: str | None = None
    """Dotted name of a class every component of the kind must subclass (imported on demand)."""


CONTRACTS: dict[str, str] = {
    "parsers": "tau_bench_env.interfaces.Parser",
    "rewards": "ctu.components.rewards.base.Reward",
    "judges": "ctu.components.judges.base.Judge",
    "trackers": "ctu.components.trackers.base.Tracker",
    "chat_templates": "ctu.components.chat_templates.base.ChatTemplate",
    "user_simulators": "tau_bench_env.interfaces.UserSimulator",
    "user_fault_detectors": "ctu.components.user_fault_detectors.base.UserFaultDetector",
    "domains": "tau_bench_env.domains.Domain",
    "task_generators": "ctu.components.task_generators.base.TaskGenerator",
    "generators": "ctu.components.generators.base.GeneratorComponent",
    "backends": "ctu.runners.backend.Backend",
}
"""The class each kind of `ctu.registry.KINDS` is written against (dotted name, imported on demand: the
components' modules import the registry)."""


def _import(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _runtime_type(annotation: Any) -> type | tuple[type, ...]:
    """What `isinstance` checks for an annotation: ``ClassVar[X]`` -> X, ``dict[str, object]`` -> dict,
    ``str | None`` -> (str, NoneType)."""
    origin = typing.get_origin(annotation)
    if origin is ClassVar:
        return _runtime_type(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        found: list[type] = []
        for arg in typing.get_args(annotation):
            part = _runtime_type(arg)
            found += part if isinstance(part, tuple) else [part]
        return tuple(found)
    if annotation is None:
        return type(None)
    return origin if isinstance(origin, type) else annotation


def _method(name: str, function: Callable[..., object]) -> Method:
    parameters = list(inspect.signature(function).parameters.values())[1:]  # after self
    return Method(name,
                  args=tuple(p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD),
                  kwargs=tuple(p.name for p in parameters if p.kind is p.KEYWORD_ONLY),
                  is_async=inspect.iscoroutinefunction(function))


@cache
def contract(kind: str) -> Contract:
    """`kind`'s contract, derived from its class in `CONTRACTS` (imported here).

    Raises:
        KeyError: `kind` is not a kind.
    """
    source = _import(CONTRACTS[kind])
    hints = typing.get_type_hints(source, include_extras=False)
    attributes = {name: _runtime_type(hint) for name, hint in hints.items()
                  if typing.get_origin(hint) is ClassVar and not name.startswith("_")}
    if not getattr(source, "_is_protocol", False):  # a base class: subclassing it is the contract
        return Contract(attributes=attributes, base=CONTRACTS[kind])
    members: dict[str, Callable[..., object]] = {}
    for protocol in reversed(source.__mro__):  # a Protocol's own methods and those of the Protocols it extends
        if getattr(protocol, "_is_protocol", False) and protocol is not typing.Protocol:
            members.update((name, member) for name, member in vars(protocol).items()
                           if inspect.isfunction(member) and not name.startswith("_"))
    methods = tuple(_method(name, member) for name, member in members.items())
    return Contract(methods=methods, attributes=attributes)


DEPENDENCIES: dict[str, dict[str, tuple[str, ...]]] = {"rewards": {"needs_judge": ("judge",)}}
"""What the composition root hands a constructor besides its params: kind -> the class flag that asks for them ->
the keyword arguments (a reward with ``needs_judge = True`` is built as ``cls(params, judge=...)``)."""


def dependencies(kind: str, obj: object) -> tuple[str, ...]:
    """The keyword arguments the composition root must pass when it builds `obj` (a registered class) of `kind`,
    besides its params (`DEPENDENCIES`): ``("judge",)`` for a reward with ``needs_judge = True``, else ()."""
    flag = _flag(obj, kind)
    return DEPENDENCIES[kind][flag] if flag is not None else ()


def _flag(obj: object, kind: str) -> str | None:
    """The first of `kind`'s dependency flags `obj` sets to True, if any."""
    return next((flag for flag in DEPENDENCIES.get(kind, {}) if getattr(obj, flag, False) is True), None)


def _method_problem(owner: object, method: Method, is_class: bool) -> str | None:
    try:
        raw = inspect.getattr_static(owner, method.name)
    except AttributeError:
        return f"no method {method}"
    value = getattr(owner, method.name)
    if not callable(value):
        return f"{method.name} is not a method (ctu calls {method})"
    takes_self = is_class and not isinstance(raw, (staticmethod, classmethod)) and inspect.isfunction(raw)
    placeholders = [None] * (len(method.args) + takes_self)
    try:
        inspect.signature(value).bind(*placeholders, **dict.fromkeys(method.kwargs))
    except TypeError as exc:
        return f"{method.name}{inspect.signature(value)} cannot be called as {method} ({exc})"
    except ValueError:  # a builtin without a signature: nothing to check
        pass
    if method.is_async and not inspect.iscoroutinefunction(value):
        return f"{method.name} must be `async def` (ctu awaits {method})"
    return None


def contract_problems(kind: str, obj: object) -> list[str]:
    """What `obj` (a registered class, or an object a factory built) lacks of `kind`'s contract; [] if nothing.

    A class is also checked for a constructor ctu can call as ``cls(params)``. A plain function registered as a
    factory cannot be checked before it is called; `ComponentInfo.build` checks what it returns.
    """
    if kind not in CONTRACTS:
        return []
    wanted = contract(kind)
    is_class = isinstance(obj, type)
    if not is_class and inspect.isroutine(obj):
        return []
    problems: list[str] = []
    if wanted.base is not None:
        base = _import(wanted.base)
        if not (isinstance(obj, base) or (isinstance(obj, type) and issubclass(obj, base))):
            problems.append(f"must subclass {wanted.base}")
        elif kind == "domains" and getattr(obj, "tau2_name", None) is None:  # the base's versions load tau2's
            cls = obj if is_class else type(obj)
            problems += [f"must define {name}() (the base's loads a tau2 domain; this one has no `tau2_name`)"
                         for name in ("make_environment", "load_tasks") if getattr(cls, name) is getattr(base, name)]
    if isinstance(obj, type):
        given = dict.fromkeys(dependencies(kind, obj))
        try:
            inspect.signature(obj).bind(None, **given)
        except TypeError:
            shown = "".join(f", {name}=..." for name in given)
            problems.append(f"its constructor {obj.__name__}{inspect.signature(obj)} cannot be called as "
                            f"{obj.__name__}(params{shown})")
        except ValueError:
            pass
    for method in wanted.methods:
        problem = _method_problem(obj, method, is_class)
        if problem is not None:
            problems.append(problem)
    for attribute, expected in wanted.attributes.items():
        if not hasattr(obj, attribute):
            names = expected.__name__ if isinstance(expected, type) else " or ".join(t.__name__ for t in expected)
            problems.append(f"no class attribute `{attribute}` ({names})")
        elif not isinstance(getattr(obj, attribute), expected):
            names = expected.__name__ if isinstance(expected, type) else " or ".join(t.__name__ for t in expected)
            problems.append(f"class attribute `{attribute}` must be a {names}, got {getattr(obj, attribute)!r}")
    return problems
