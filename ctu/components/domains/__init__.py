"""Domains: `Domain`, the base of a domain of one's own, the kind's contract (a domain subclasses
`tau_bench_env.domains.Domain`), and tau2's retail, airline, telecom and mock with params a spec sets (`Retail`,
`Airline`, `Telecom`, `Mock`: registered under their names by ctu's entry points).

A custom domain is a `Domain` subclass registered under its own name; specs then name it in `data.train` and
`data.test_sets` like any other::

    from ctu.components.domains import Domain
    from ctu.registry import registry

    @registry.domains.register("healthcare")
    class Healthcare(Domain):
        '''Clinic scheduling and billing.'''

        splits = ("train", "test", "base")

        def make_environment(self):          # -> tau2.environment.environment.Environment
            return build_healthcare_environment()   # your tools (a tau2 ToolKitBase), database and policy

        def load_tasks(self, split):         # -> list[tau2.data_model.tasks.Task]
            return my_tasks_by_split[split]

"""

from __future__ import annotations

from typing import Any

from ctu.registry import ComponentParams, registry
from ctu.registry.config import ComponentConfig
from tau_bench_env import domains as environment_domains


class Domain(environment_domains.Domain):
    """Base of a custom domain (`tau_bench_env.domains.Domain` with params a spec can set and check)."""

    class Params(ComponentParams):
        pass


class TaskSetParams(ComponentParams, environment_domains.TaskSetParams):
    """tau2's domains' params as a spec sets them (`tau_bench_env.domains.TaskSetParams`): `tasks_file` and
    `split_file` name a task set in tau2's format, e.g. `{domain: {type: retail, tasks_file: tasks.json,
    split_file: split_tasks.json}, split: train}`."""


def _own_environment_and_tasks(cls: object) -> list[str]:
    """A domain that loads no tau2 domain (no `tau2_name`) must write how it builds its environment and tasks: the
    base's versions load tau2's."""
    if getattr(cls, "tau2_name", None) is not None:
        return []
    owner = cls if isinstance(cls, type) else type(cls)
    base = environment_domains.Domain
    return [f"must define {name}() (the base's loads a tau2 domain; this one has no `tau2_name`)"
            for name in ("make_environment", "load_tasks") if getattr(owner, name) is getattr(base, name)]


registry.domains.declare_contract(environment_domains.Domain, check=_own_environment_and_tasks)


class Retail(environment_domains.RetailDomain):
    __doc__ = environment_domains.RetailDomain.__doc__
    Params = TaskSetParams


class Airline(environment_domains.AirlineDomain):
    __doc__ = environment_domains.AirlineDomain.__doc__
    Params = TaskSetParams


class Telecom(environment_domains.TelecomDomain):
    __doc__ = environment_domains.TelecomDomain.__doc__
    Params = TaskSetParams


class Mock(environment_domains.MockDomain):
    __doc__ = environment_domains.MockDomain.__doc__
    Params = TaskSetParams


def build_domain(name: str, params: dict[str, object]) -> environment_domains.Domain:
    """The registered domain `name` built with `params`, named as registered.

    Raises:
        ComponentError: no such domain. pydantic.ValidationError: bad params.
    """
    domain = ComponentConfig[environment_domains.Domain].named("domains", name, params).build()
    domain.name = name
    return domain


def domain_mismatch(domain: environment_domains.Domain, tasks: list[Any]) -> str | None:
    """Why `tasks` (tau2 `Task`s) are not of `domain`, when more than half of those with gold actions call a tool the
    domain does not have (its agent's or, for tau2's telecom, its user's): the unknown tools, and the registered
    domains that have them all; None when they are of it (a few unknown tools are each task's own fault,
    `ctu.tasks.check.replay_gold`). Used by `ctu tasks check` and `ctu eval --regrade`."""

    def tools(of: environment_domains.Domain) -> set[str]:
        names = {schema["function"]["name"] for schema in of.tool_schemas}  # type: ignore[index]
        return names | {tool.name for tool in of.user_tools or ()}

    known = tools(domain)
    acting = [task for task in tasks if task.evaluation_criteria and task.evaluation_criteria.actions]
    foreign = [task for task in acting if any(a.name not in known for a in task.evaluation_criteria.actions)]
    if not acting or len(foreign) * 2 <= len(acting):
        return None
    unknown = sorted({a.name for task in foreign for a in task.evaluation_criteria.actions if a.name not in known})
    fits = []
    for name in registry.domains.names():
        if name == domain.name:
            continue
        try:
            if set(unknown) <= tools(build_domain(name, {})):
                fits.append(name)
        except Exception:  # a domain that cannot be built with default params suggests nothing
            continue
    return (f"{len(foreign)} of its {len(acting)} tasks with gold actions call tools it lacks ({', '.join(unknown[:8])}"
            f"{' ...' if len(unknown) > 8 else ''}); " + (f"they are tools of {' and '.join(fits)}: --domain {fits[0]}?"
                                                           if fits else "no registered domain has them all"))
