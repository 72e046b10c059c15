"""Domains: tau2's retail, airline, telecom and mock registered under their names, and `Domain`, the base of a
domain of one's own.

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


for _name, _domain in environment_domains.TAU2_DOMAINS.items():
    registry.domains.register(_name, params=TaskSetParams)(_domain)


def build_domain(name: str, params: dict[str, object]) -> environment_domains.Domain:
    """The registered domain `name` built with `params`, named as registered.

    Raises:
        ComponentError: no such domain. pydantic.ValidationError: bad params.
    """
    domain = ComponentConfig[environment_domains.Domain].named("domains", name, params).build()
    domain.name = name
    return domain

