"""`template`: tasks written from templates whose slots are filled from the domain's database, offline and seeded.

A template set is a YAML file (the built-in sets are named by domain: ``templates: mock``, ``templates: retail``;
anything else is a path)::

    domain: retail                       # the domain the set is written for (checked against the generation's)
    pools:                               # named lists of values a slot may draw from
      reasons: [no longer needed, ordered by mistake]
    templates:
      - name: cancel_pending_order       # the intent; recorded in each task's description
        weight: 1                        # how often it is drawn relative to the others (default 1)
        train_share: 1                   # the share of its tasks the `train` split keeps (default 1; see below)
        train_only: false                # its tasks go to the `train` split alone (default false; see below)
        slots:                           # filled in order; later slots may name earlier ones
          order: {table: orders, where: {status: pending}}   # a record of a database table (fields equal to values)
          user: {table: users, key: "{order.user_id}"}       # the record under a key
          reason: {pool: reasons}                            # a value of a pool
          tag: {choice: [a, b]}                              # a value of a list given here
          n: {range: [2, 9]}                                 # an integer in [low, high]
        user_scenario: {...}             # tau2's user scenario (persona, instructions)
        initial_state: {...}             # optional: tau2's initial state (e.g. records the task adds)
        actions:                         # the gold actions, in order
          - {name: cancel_pending_order, arguments: {order_id: "{order.order_id}", reason: "{reason}"}}
        nl_assertions: [...]             # optional, as tau2's evaluation criteria
        communicate_info: [...]          # optional
        reward_basis: [DB]               # optional; default [DB]

Every string of the scenario, the initial state (keys included) and the actions is filled from the slots:
``{slot}`` or ``{slot.field.subfield}`` (a record's fields, as tau2's database model dumps them, plus ``_key``,
the record's key in its table); a string that is one placeholder and nothing else takes the value itself (a
number, a list, a mapping). Records are drawn from the domain's own database (`Domain.base_database`), so gold
actions name records that exist; the verification (`ctu.tasks.verify`) still replays every task.

`train_share` below 1 keeps a template's tasks out of the ``train`` split (the one `ctu data sft` reads by default):
they are drawn into the held-out ``validation`` split and the generation's other `splits` as any task is, and of those
left for ``train`` each stays with this probability (seeded by the task), the rest are in ``base`` alone: a task
family the SFT data shows rarely, left for RL to learn (at 0 a policy may never try it, and RL cannot find it either:
docs/learning-checks.md measures both on the chain's reopen tasks).

`train_only: true` puts all of a template's tasks in ``train`` and none in ``validation`` or another split (whose
shares are then of the other templates' tasks): demonstrations for the SFT data whose gold must never score an RL
or a held-out episode, such as a teacher's slips (the learning chain's SFT data writes the other status in about a
quarter of its conversations, for GRPO to correct: docs/learning-checks.md). It does not go with a `train_share`
below 1.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ctu.components.task_generators.base import GenerationContext, Proposal
from ctu.errors import CtuError
from ctu.registry import ComponentParams

if TYPE_CHECKING:
    import random

    from tau2.data_model.tasks import Task

BUILTIN_SETS = Path(__file__).parent / "templates"
"""Where the built-in template sets are: ``<domain>.yaml``."""

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\}")
"""``{slot}`` or ``{slot.field.subfield}``."""


class TemplateError(CtuError):
    """A template set that cannot be used: unreadable, malformed, or a slot that names what does not exist."""


class Slot(BaseModel):
    """One slot: exactly one of `table`, `pool`, `choice`, `range`."""

    model_config = ConfigDict(extra="forbid")

    table: str | None = None
    where: dict[str, Any] = {}
    key: str | None = None
    pool: str | None = None
    choice: list[Any] | None = None
    range: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Slot:
        sources = [name for name in ("table", "pool", "choice", "range") if getattr(self, name) is not None]
        if len(sources) != 1:
            raise ValueError(f"a slot takes exactly one of table, pool, choice, range (got {sources or 'none'})")
        if (self.where or self.key is not None) and self.table is None:
            raise ValueError("`where` and `key` go with `table`")
        return self


class Template(BaseModel):
    """One task template (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0)
    train_share: float = Field(1.0, ge=0.0, le=1.0)
    train_only: bool = False
    slots: dict[str, Slot] = {}
    user_scenario: dict[str, Any]
    initial_state: dict[str, Any] | None = None
    actions: list[dict[str, Any]] = Field(min_length=1)
    nl_assertions: list[str] | None = None
    communicate_info: list[str] | None = None
    reward_basis: list[str] = ["DB"]

    @model_validator(mode="after")
    def _train_only_keeps_all(self) -> Template:
        if self.train_only and self.train_share < 1.0:
            raise ValueError(f"template {self.name!r}: train_only puts every task in `train`; a train_share below 1 "
                             "would keep some out (set one of them)")
        return self


class TemplateSet(BaseModel):
    """A template set file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    domain: str
    pools: dict[str, list[Any]] = {}
    templates: list[Template] = Field(min_length=1)

    @model_validator(mode="after")
    def _pools_exist(self) -> TemplateSet:
        for template in self.templates:
            for name, slot in template.slots.items():
                if slot.pool is not None and slot.pool not in self.pools:
                    raise ValueError(f"template {template.name!r} slot {name!r}: no pool {slot.pool!r}")
        return self


PURPOSE_PREFIX = "template "
"""What starts the description purpose of every task a template writes (`purpose`)."""


def purpose(template_set: str, name: str) -> str:
    """The description purpose a task of template `name` of `template_set` (as the spec names the set) carries:
    ``template <set>:<name>``; read back by `written_by`."""
    return f"{PURPOSE_PREFIX}{template_set}:{name}"


def written_by(task_purpose: str | None) -> tuple[str, str] | None:
    """``(template set, template name)`` of a task's description purpose (`purpose`), or None for a task no
    template wrote (another generator's, or a hand-written one)."""
    if not task_purpose or not task_purpose.startswith(PURPOSE_PREFIX) or ":" not in task_purpose:
        return None
    template_set, name = task_purpose[len(PURPOSE_PREFIX):].rsplit(":", 1)
    return template_set, name


def load_template_set(name_or_path: str) -> TemplateSet:
    """The template set `name_or_path` names: a built-in set (``mock``, ``retail``) or a YAML file.

    Raises:
        TemplateError: no such set or file, or one that does not parse as a `TemplateSet`.
    """
    builtin = BUILTIN_SETS / f"{name_or_path}.yaml"
    path = builtin if builtin.exists() else Path(name_or_path)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in BUILTIN_SETS.glob("*.yaml")))
        raise TemplateError(f"no template set {name_or_path!r}: not a built-in set ({known}) nor a file")
    try:
        return TemplateSet.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValueError) as error:
        raise TemplateError(f"{path}: {error}") from None


def lookup(values: dict[str, Any], dotted: str) -> Any:
    """The value at `dotted` (``slot.field.subfield``) among the filled slots.

    Raises:
        KeyError: a part names nothing.
    """
    value: Any = values
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(f"{{{dotted}}}: no {part!r}")
    return value


def fill(template: Any, values: dict[str, Any]) -> Any:
    """`template` with every placeholder filled from `values` (strings, mapping keys, lists, recursively); a
    string that is one placeholder alone becomes the value itself.

    Raises:
        KeyError: a placeholder names nothing.
    """
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template)
        if whole:
            return lookup(values, whole.group(1))
        return PLACEHOLDER.sub(lambda match: str(lookup(values, match.group(1))), template)
    if isinstance(template, dict):
        return {str(fill(key, values)): fill(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(item, values) for item in template]
    return template


class TemplateTaskGenerator:
    """Tasks from a YAML template set, slots filled from the domain's database with the generation's seed:
    deterministic and offline (built-in sets: `mock`, `retail`)."""

    class Params(ComponentParams):
        templates: str = Field(min_length=1)
        """A built-in template set (`mock`, `retail`) or the path of a YAML template set (see the `template`
        generator's docstring for the format)."""
        only: list[str] | None = None
        """Only these templates of the set, by name (default: all of them)."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self._dumped_domain: object = None
        self._dumped: dict[str, dict[str, Any]] = {}

    def _unknown_only(self, loaded: TemplateSet) -> str | None:
        """The message for `only` naming templates `loaded` lacks, or None."""
        names = {template.name for template in loaded.templates}
        missing = sorted(set(self.params.only or ()) - names)
        if not missing:
            return None
        return f"template set {self.params.templates!r} has no template {', '.join(missing)}; it has {', '.join(sorted(names))}"

    @cached_property
    def template_set(self) -> TemplateSet:
        """The set, loaded on first use (`load_template_set`), narrowed to `only`.

        Raises:
            TemplateError: as `load_template_set`, or `only` names a template the set lacks.
        """
        loaded = load_template_set(self.params.templates)
        unknown = self._unknown_only(loaded)
        if unknown is not None:
            raise TemplateError(unknown)
        if self.params.only is not None:
            loaded = loaded.model_copy(update={"templates": [t for t in loaded.templates if t.name in self.params.only]})
        return loaded

    def train_share(self, task: Task) -> float:
        """The share of tasks like `task` the ``train`` split keeps: its template's `train_share` (1.0 for a task
        this set did not write). Read from the task's description (``template <set>:<name>``), so a resumed
        generation decides as the first run did.

        Raises:
            TemplateError: as `template_set`."""
        template = self._template_of(task)
        return template.train_share if template is not None else 1.0

    def train_only(self, task: Task) -> bool:
        """Whether `task` goes to the ``train`` split alone: its template's `train_only` (False for a task this set
        did not write), read as `train_share` reads it.

        Raises:
            TemplateError: as `template_set`."""
        template = self._template_of(task)
        return template.train_only if template is not None else False

    def _template_of(self, task: Task) -> Template | None:
        """The template of this set that wrote `task` (from its description's purpose: `written_by`), or None."""
        written = written_by(getattr(getattr(task, "description", None), "purpose", None))
        if written is None or written[0] != self.params.templates:
            return None
        return next((t for t in self.template_set.templates if t.name == written[1]), None)

    def inputs_fingerprint(self) -> str:
        """SHA-256 of the template set as loaded (narrowed to `only`): an edited template file is another generation.

        Raises:
            TemplateError: as `template_set`."""
        import hashlib
        import json

        return hashlib.sha256(json.dumps(self.template_set.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()

    def spec_problems(self, domain_type: str) -> list[tuple[str, str]]:
        """``(param, message)`` of what stops this generator writing tasks of `domain_type` (`ctu validate`): a
        template set that cannot be loaded, names in `only` that it lacks, or a set for another domain."""
        try:
            loaded = load_template_set(self.params.templates)
        except TemplateError as error:
            return [("templates", str(error))]
        problems = []
        unknown = self._unknown_only(loaded)
        if unknown is not None:
            problems.append(("only", unknown))
        if loaded.domain != domain_type:
            problems.append(("templates", f"template set {self.params.templates!r} is for domain {loaded.domain!r}, "
                                          f"not {domain_type!r}"))
        return problems

    def _records(self, context: GenerationContext, table: str) -> dict[str, Any]:
        """A table of the domain's database as ``key -> record dict`` (each with ``_key``), dumped once per domain
        object."""
        if self._dumped_domain is not context.domain:
            self._dumped_domain, self._dumped = context.domain, {}
        tables = self._dumped
        if table not in tables:
            database = context.domain.base_database
            if table not in database.tables:
                raise TemplateError(f"the {context.domain_type} database has no table {table!r}; "
                                    f"it has {', '.join(sorted(database.tables))}")
            rows = database.tables[table]
            tables[table] = {key: {**_as_dict(row), "_key": key} for key, row in sorted(rows.items())}
        return tables[table]

    def _slot_value(self, context: GenerationContext, slot: Slot, values: dict[str, Any], rng: random.Random) -> Any:
        """A value for `slot`, or None when no record matches."""
        if slot.pool is not None:
            return rng.choice(self.template_set.pools[slot.pool])
        if slot.choice is not None:
            return rng.choice(slot.choice)
        if slot.range is not None:
            return rng.randint(*slot.range)
        records = self._records(context, str(slot.table))
        if slot.key is not None:
            return records.get(str(fill(slot.key, values)))
        wanted = {field: fill(value, values) for field, value in slot.where.items()}
        matching = [record for record in records.values()
                    if all(_field(record, field) == value for field, value in wanted.items())]
        return rng.choice(matching) if matching else None

    async def propose(self, context: GenerationContext) -> list[Proposal]:
        """One task: a template drawn by weight, its slots filled in order (see the module docstring)."""
        rng = context.rng()
        templates = self.template_set.templates
        if self.template_set.domain != context.domain_type:
            raise TemplateError(f"template set {self.params.templates!r} is for domain {self.template_set.domain!r}, "
                                f"not {context.domain_type!r}")
        template = rng.choices(templates, weights=[t.weight for t in templates])[0]
        values: dict[str, Any] = {}
        for name, slot in template.slots.items():
            value = self._slot_value(context, slot, values, rng)
            if value is None:
                return [Proposal(None, "no_record", f"template {template.name}: no record for slot {name!r}")]
            values[name] = value
        try:
            actions = [{"action_id": f"{template.name}_{i}", "requestor": "assistant", **fill(action, values)}
                       for i, action in enumerate(template.actions)]
            task: dict[str, Any] = {
                "id": "",
                "description": {"purpose": purpose(self.params.templates, template.name)},
                "user_scenario": fill(template.user_scenario, values),
                "evaluation_criteria": {"actions": actions, "reward_basis": template.reward_basis},
            }
            if template.initial_state is not None:
                task["initial_state"] = fill(template.initial_state, values)
            for name in ("nl_assertions", "communicate_info"):
                if getattr(template, name) is not None:
                    task["evaluation_criteria"][name] = fill(getattr(template, name), values)
        except KeyError as error:
            raise TemplateError(f"template {template.name!r}: {error.args[0]}") from None
        return [Proposal(task)]


def _field(record: dict[str, Any], dotted: str) -> Any:
    """A record's field at `dotted` (``address.zip``), or None."""
    try:
        return lookup(record, dotted)
    except KeyError:
        return None


def _as_dict(record: Any) -> dict[str, Any]:
    """A database record as JSON-ready data (a pydantic model dumped; a mapping as it is)."""
    return record.model_dump(mode="json") if hasattr(record, "model_dump") else dict(record)
