"""What each component kind must provide, checked when a component is registered.

A kind's contract is derived from the one class the rest of ctu is written against, declared by the module that
owns it (`ComponentRegistry.declare_contract`, e.g. ``registry.rewards.declare_contract(Reward, ...)`` at the end
of `ctu.components.rewards.base`): a Protocol, or a base class every component of the kind subclasses (domains:
`tau_bench_env.domains.Domain`). The registry itself names no kind's owner. A Protocol's methods are the calls ctu
makes: its positional parameters are passed positionally, its keyword-only ones by keyword, and an ``async def``
is awaited. A keyword-only parameter with a default is optional, as a contract's new arguments are: a component
written before it was added still registers, with a deprecation warning (`optional_problems`), and `adapt` makes
ctu's calls leave it out for that component; its ``ClassVar`` annotations are the class attributes ctu reads, with their types. The owner may add
what a constructor is handed besides its params (`Contract.dependencies`: a reward with ``needs_judge = True`` is
built as ``cls(params, judge=...)``) and a check of its own (`Contract.check`).

`contract_problems` checks a registered class (or, for a component registered as a factory function, the object
the factory built) and returns one line per thing missing; `ComponentRegistry.register` turns them into a
`RegistryError` naming the component and its file, so an incomplete component fails where it is declared instead
of turning every episode into an error record.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

__all__ = ["Contract", "Method", "adapt", "contract_of", "contract_problems", "dependencies", "optional_problems"]


@dataclass(frozen=True)
class Method:
    """One method ctu calls: ``name(*args, **{k: ... for k in kwargs + optional})``, awaited when `is_async`;
    `optional` are the keyword arguments added to the contract later, which an older component may not take."""

    name: str
    args: tuple[str, ...] = ()
    kwargs: tuple[str, ...] = ()
    is_async: bool = False
    optional: tuple[str, ...] = ()

    def __str__(self) -> str:
        shown = ", ".join((*self.args, *(f"{k}=..." for k in (*self.kwargs, *self.optional))))
        return f"{'async ' if self.is_async else ''}{self.name}({shown})"


@dataclass(frozen=True)
class Contract:
    """What a component of one kind must provide (`contract_of` derives it from the kind's class).

    Attributes:
        source: the class the contract is derived from, as ``module.Name`` (for messages).
        methods: the methods ctu calls.
        attributes: the class attributes ctu reads (name -> the type its value must have).
        base: a class every component of the kind must subclass, or None.
        dependencies: what the composition root hands a constructor besides its params: the class flag that asks
            for them -> the keyword arguments (``{"needs_judge": ("judge",)}`` for rewards).
        check: the owner's own check of a registered class, returning one line per problem.
    """

    source: str
    methods: tuple[Method, ...] = ()
    attributes: dict[str, type | tuple[type, ...]] = field(default_factory=dict)
    base: type | None = None
    dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    check: Callable[[Any], list[str]] | None = None


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
    keyword = [p for p in parameters if p.kind is p.KEYWORD_ONLY]
    return Method(name,
                  args=tuple(p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD),
                  kwargs=tuple(p.name for p in keyword if p.default is p.empty),
                  is_async=inspect.iscoroutinefunction(function),
                  optional=tuple(p.name for p in keyword if p.default is not p.empty))


def contract_of(source: type, dependencies: Mapping[str, tuple[str, ...]] | None = None,
                check: Callable[[Any], list[str]] | None = None) -> Contract:
    """The contract `source` states: its methods and class attributes if it is a Protocol (those of the Protocols
    it extends included), else subclassing it; with the owner's `dependencies` and `check` (see `Contract`)."""
    hints = typing.get_type_hints(source, include_extras=False)
    attributes = {name: _runtime_type(hint) for name, hint in hints.items()
                  if typing.get_origin(hint) is ClassVar and not name.startswith("_")}
    name = f"{source.__module__}.{source.__qualname__}"
    if not getattr(source, "_is_protocol", False):  # a base class: subclassing it is the contract
        return Contract(name, attributes=attributes, base=source, dependencies=dict(dependencies or {}), check=check)
    members: dict[str, Callable[..., object]] = {}
    for protocol in reversed(source.__mro__):  # a Protocol's own methods and those of the Protocols it extends
        if getattr(protocol, "_is_protocol", False) and protocol is not typing.Protocol:
            members.update((member_name, member) for member_name, member in vars(protocol).items()
                           if inspect.isfunction(member) and not member_name.startswith("_"))
    methods = tuple(_method(member_name, member) for member_name, member in members.items())
    return Contract(name, methods=methods, attributes=attributes, dependencies=dict(dependencies or {}), check=check)


def dependencies(wanted: Contract | None, obj: object) -> tuple[str, ...]:
    """The keyword arguments the composition root must pass when it builds `obj` (a registered class) under the
    contract `wanted`, besides its params: ``("judge",)`` for a reward with ``needs_judge = True``, else ()."""
    if wanted is None:
        return ()
    flag = next((flag for flag in wanted.dependencies if getattr(obj, flag, False) is True), None)
    return wanted.dependencies[flag] if flag is not None else ()


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


def _refused(value: Callable[..., object], names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of the keyword arguments `names` that the callable `value` does not take (no parameter of that name
    and no ``**kwargs``); () when it has no signature to read."""
    try:
        parameters = inspect.signature(value).parameters.values()
    except (TypeError, ValueError):
        return ()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return ()
    taken = {p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return tuple(name for name in names if name not in taken)


def _refusals(wanted: Contract, obj: object) -> Iterator[tuple[Method, Callable[..., Any], tuple[str, ...]]]:
    """Each of `wanted`'s methods whose implementation on `obj` does not take some of its optional keyword
    arguments: (the method, the implementation, the arguments it does not take)."""
    for method in wanted.methods:
        value = getattr(obj, method.name, None)
        missing = _refused(value, method.optional) if callable(value) else ()
        if value is not None and missing:
            yield method, value, missing


def optional_problems(wanted: Contract, obj: object) -> list[str]:
    """The optional keyword arguments of `wanted`'s methods (added to the contract after a component may have been
    written) that `obj`'s methods do not take, one line each for a deprecation warning; [] if none."""
    return [f"{method.name} takes no {', '.join(f'`{name}`' for name in missing)}: ctu calls it without (deprecated; "
            f"accept {', '.join(f'{name}=None' for name in missing)} as keyword-only arguments, as {method} does)"
            for method, _, missing in _refusals(wanted, obj)]


def adapt(wanted: Contract, component: object) -> object:
    """`component` (built), its methods that do not take some of `wanted`'s optional keyword arguments wrapped on the
    instance so that ctu's calls leave those out: an older component keeps working as it did. Returns `component`."""
    for method, value, missing in list(_refusals(wanted, component)):
        setattr(component, method.name, _without(value, missing))
    return component


def _without(value: Callable[..., Any], missing: tuple[str, ...]) -> Callable[..., Any]:
    """`value`, called without the keyword arguments `missing` (awaited alike when it is a coroutine function)."""
    if inspect.iscoroutinefunction(value):
        @functools.wraps(value)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await value(*args, **{k: v for k, v in kwargs.items() if k not in missing})
        return call_async

    @functools.wraps(value)
    def call(*args: Any, **kwargs: Any) -> Any:
        return value(*args, **{k: v for k, v in kwargs.items() if k not in missing})
    return call


def contract_problems(wanted: Contract, obj: object) -> list[str]:
    """What `obj` (a registered class, or an object a factory built) lacks of the contract `wanted`; [] if nothing.

    A class is also checked for a constructor ctu can call as ``cls(params)`` (with its `dependencies`). A plain
    function registered as a factory cannot be checked before it is called; `ComponentInfo.build` checks what it
    returns.
    """
    is_class = isinstance(obj, type)
    if not is_class and inspect.isroutine(obj):
        return []
    problems: list[str] = []
    base = wanted.base
    if base is not None and not (isinstance(obj, base) or (is_class and issubclass(obj, base))):  # type: ignore[arg-type]
        problems.append(f"must subclass {wanted.source}")
    elif wanted.check is not None:
        problems += wanted.check(obj)
    if isinstance(obj, type):
        given = dict.fromkeys(dependencies(wanted, obj))
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
