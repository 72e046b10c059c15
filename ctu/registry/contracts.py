"""What each component kind must provide, checked when a component is registered.

A contract lists the methods ctu calls on a built component (with the arguments it passes, and whether it
awaits the call) and the class attributes it reads. `contract_problems` checks a registered class (or, for a
component registered as a factory function, the object the factory built) and returns one line per thing
missing; `ComponentRegistry.register` turns them into a `RegistryError` naming the component and its file, so
an incomplete component fails where it is declared instead of turning every episode into an error record.

The contracts mirror the protocols the rest of ctu is written against: `tau_bench_env.interfaces.Parser` and
`UserSimulator`, `ctu.components.judges.base.Judge`, `ctu.components.trackers.base.Tracker`, the reward chain
(`ctu.components.rewards.chain`), the token accounting (`ctu.rollout.tokens`) and `tau_bench_env.domains.Domain`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CONTRACTS", "Contract", "Method", "contract_problems"]


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


CONTRACTS: dict[str, Contract] = {
    "parsers": Contract(methods=(Method("parse", ("text",)), Method("render_tools", ("tools",)))),
    "rewards": Contract(
        methods=(Method("apply", ("reward", "context"), is_async=True),),
        attributes={"training_only": bool, "needs_judge": bool},
    ),
    "judges": Contract(methods=(Method("judge", ("episode",), is_async=True),)),
    "trackers": Contract(
        methods=(
            Method("start", ("run_dir", "run_name", "project", "config"), ("resume_step",)),
            Method("log", ("metrics", "step")),
            Method("finish"),
        )
    ),
    "chat_templates": Contract(
        methods=(
            Method("render", ("tokenizer", "messages", "tools"), ("add_generation_prompt",)),
            Method("encode_text", ("tokenizer", "text")),
            Method("decode", ("tokenizer", "ids")),
        ),
        attributes={"template_kwargs": dict},
    ),
    "user_simulators": Contract(methods=(Method("session", ("task", "user_tools", "trajectory")),)),
    "domains": Contract(
        methods=(Method("make_environment"), Method("load_tasks", ("split",))),
        attributes={"splits": tuple},
        base="tau_bench_env.domains.Domain",
    ),
    "generators": Contract(methods=(Method("build", ("setup",)),)),
}
"""The contract of each kind in `ctu.registry.KINDS`."""


def _method_problem(owner: Any, method: Method, is_class: bool) -> str | None:
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


def contract_problems(kind: str, obj: Any) -> list[str]:
    """What `obj` (a registered class, or an object a factory built) lacks of `kind`'s contract; [] if nothing.

    A class is also checked for a constructor ctu can call as ``cls(params)``. A plain function registered as a
    factory cannot be checked before it is called; `ComponentInfo.build` checks what it returns.
    """
    contract = CONTRACTS.get(kind)
    if contract is None:
        return []
    is_class = isinstance(obj, type)
    if not is_class and inspect.isroutine(obj):
        return []
    problems: list[str] = []
    if contract.base is not None:
        import importlib

        module, _, name = contract.base.rpartition(".")
        base = getattr(importlib.import_module(module), name)
        if not (isinstance(obj, base) or (is_class and issubclass(obj, base))):
            problems.append(f"must subclass {contract.base}")
        elif kind == "domains" and getattr(obj, "tau2_name", None) is None:  # the base's versions load tau2's
            cls = obj if is_class else type(obj)
            problems += [f"must define {name}() (the base's loads a tau2 domain; this one has no `tau2_name`)"
                         for name in ("make_environment", "load_tasks") if getattr(cls, name) is getattr(base, name)]
    if is_class:
        try:
            inspect.signature(obj).bind(None)
        except TypeError:
            problems.append(f"its constructor {obj.__name__}{inspect.signature(obj)} cannot be called as "
                            f"{obj.__name__}(params)")
        except ValueError:
            pass
    for method in contract.methods:
        problem = _method_problem(obj, method, is_class)
        if problem is not None:
            problems.append(problem)
    for attribute, expected in contract.attributes.items():
        if not hasattr(obj, attribute):
            names = expected.__name__ if isinstance(expected, type) else " or ".join(t.__name__ for t in expected)
            problems.append(f"no class attribute `{attribute}` ({names})")
        elif not isinstance(getattr(obj, attribute), expected):
            names = expected.__name__ if isinstance(expected, type) else " or ".join(t.__name__ for t in expected)
            problems.append(f"class attribute `{attribute}` must be a {names}, got {getattr(obj, attribute)!r}")
    return problems
