"""Cross-field checks: what the schema alone cannot see, learnt from crashes of the system ctu replaces.

Each check returns `SpecIssue`s; errors make the spec invalid, warnings are printed and the spec stays valid.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from ctu.errors import did_you_mean
from ctu.registry import registry
from ctu.spec.backend_rules import backend_rules
from ctu.spec.errors import SpecIssue
from ctu.spec.held_out import check_held_out
from ctu.spec.models import Spec
from ctu.spec.prompt_fit import check_first_prompt
from ctu.spec.turn_checks import check_native_tool_calling, check_thinking, check_trajectory

Check = Callable[[Spec], Iterator[SpecIssue]]


def check_batch_sizes(spec: Spec) -> Iterator[SpecIssue]:
    """Batch sizes divide as the trainer needs (SkyRL's `validate_batch_sizes` rules, checked before launch)."""
    trainer = spec.trainer
    if trainer.train_batch_size % trainer.policy_mini_batch_size:
        yield SpecIssue(
            "trainer.policy_mini_batch_size",
            f"must divide trainer.train_batch_size ({trainer.train_batch_size}); got {trainer.policy_mini_batch_size}",
        )


def check_listed_once(spec: Spec) -> Iterator[SpecIssue]:
    """A reward listed twice with the same params (it would count twice; the same kind with other params, e.g.
    taxonomy feedback from two judges, is fine), a tracker kind listed twice (every line written twice), or a
    domain's split listed twice for training (its tasks trained twice as often as the others)."""
    lists: tuple[tuple[str, list[tuple[str, ...] | str]], ...] = (
             ("rewards", [(reward.type, reward.params.model_dump_json()) for reward in spec.rewards]),
             ("tracking.trackers", [tracker.type for tracker in spec.tracking.trackers]),
             ("data.train", [(source.domain.type, source.domain.params.model_dump_json(), source.split)
                             for source in spec.data.train]))
    for path, keys in lists:
        for index, key in enumerate(keys):
            if key in keys[:index]:
                first = keys.index(key)
                name = (f"{key[0]} split {key[2]!r}" if path == "data.train" else f"{key[0]!r} with the same params"
                        if path == "rewards" else repr(key))
                yield SpecIssue(f"{path}.{index}", f"{name} is already {path}.{first}: list it once (merge their params)")


def check_output_dir(spec: Spec) -> Iterator[SpecIssue]:
    """`experiment.output_dir` is a directory, or does not exist yet."""
    from pathlib import Path

    if Path(spec.experiment.output_dir).exists() and not Path(spec.experiment.output_dir).is_dir():
        yield SpecIssue("experiment.output_dir", f"{spec.experiment.output_dir!r} is a file; runs are written to a directory")


def check_builtin_model(spec: Spec) -> Iterator[SpecIssue]:
    """A ``builtin:`` model path must name a built-in model that is built, or can be built here."""
    from ctu.models.builtin import BUILTIN_PREFIX, builtin_models

    path = spec.model.path
    models = builtin_models()
    names = [BUILTIN_PREFIX + name for name in models]
    if path.startswith(BUILTIN_PREFIX) and path not in names:
        yield SpecIssue("model.path", f"unknown built-in model {path!r}{did_you_mean(path, names)}; built-in: {', '.join(names)}")
    elif path.startswith(BUILTIN_PREFIX):
        model = models[path.removeprefix(BUILTIN_PREFIX)]
        why = None if model.is_built() else model.unbuildable()
        if why is not None:
            yield SpecIssue("model.path", why)


def check_grpo_group(spec: Spec) -> Iterator[SpecIssue]:
    """GRPO's advantage is a reward's distance from its group's mean: a group of one has none to learn from."""
    if spec.algorithm.advantage_estimator == "grpo" and spec.rollout.n_samples_per_prompt < 2:
        yield SpecIssue(
            "rollout.n_samples_per_prompt",
            "GRPO normalises each reward within its task's group of samples: with 1 sample per task every "
            "advantage is 0 and nothing is learned; use 2 or more (the default is 5)",
        )


def check_context(spec: Spec) -> Iterator[SpecIssue]:
    """A policy turn must fit in the model's context."""
    if spec.model.max_model_len < spec.rollout.max_tokens_per_turn:
        yield SpecIssue(
            "model.max_model_len",
            f"{spec.model.max_model_len} tokens of context cannot hold one policy turn of "
            f"rollout.max_tokens_per_turn={spec.rollout.max_tokens_per_turn}, let alone the prompt: raise it to the "
            "model's context length, or lower max_tokens_per_turn",
        )


def check_eval_samples(spec: Spec) -> Iterator[SpecIssue]:
    """Warn when pass^k would count near-identical samples: several samples per test task, greedy decoding
    (eval temperature 0), so a task's samples differ only where the user simulator differs (a warning: an LLM
    user at a temperature still varies them, as in tau-bench's own pass^k runs)."""
    rollout = spec.rollout
    if rollout.eval_n_samples_per_prompt > 1 and rollout.eval_temperature == 0.0:
        yield SpecIssue(
            "rollout.eval_n_samples_per_prompt",
            f"{rollout.eval_n_samples_per_prompt} samples per test task at rollout.eval_temperature 0: the policy "
            "decodes greedily, so a task's samples differ only through the user simulator and pass^k for k > 1 "
            "measures little more than pass^1. Set rollout.eval_temperature above 0 (each sample gets its own seed)",
        )


def check_judges(spec: Spec) -> Iterator[SpecIssue]:
    """Every reward that needs a judge has one: its own `judge` param or the spec's top-level `judge`."""
    for index, reward in enumerate(spec.rewards):
        factory = registry.rewards.get(reward.type).factory
        own_judge = getattr(reward.params, "judge", None)
        if getattr(factory, "needs_judge", False) and own_judge is None and spec.judge is None:
            yield SpecIssue(
                f"rewards.{index}.judge",
                f"reward {reward.type!r} needs a judge: set its `judge`, or the top-level `judge`",
            )
    if spec.environment.evaluate_nl_assertions and spec.judge is None:
        yield SpecIssue("environment.evaluate_nl_assertions", "scoring NL assertions needs the top-level `judge`")


def check_domains(spec: Spec) -> Iterator[SpecIssue]:
    """Every data source (training, validation, test sets) names a split its domain offers; task files (`tasks_file`, `split_file`)
    exist, are JSON of tau2's shapes, and hold the split, with at least one task (`ctu.spec.schedule.task_file_ids`)."""
    from ctu.spec.schedule import TaskFileError, task_file_ids

    for path, source in spec.data.sources():
        if getattr(source.domain.params, "tasks_file", None) is not None or getattr(source.domain.params, "split_file", None) is not None:
            try:
                ids = task_file_ids(source.domain.params, source.split)
            except TaskFileError as error:
                for where, message in error.faults:
                    yield SpecIssue(f"{path}.{where}", message)
                continue
            if not ids:
                named = getattr(source.domain.params, "split_file", None)
                yield SpecIssue(f"{path}.split", f"split {source.split!r} of {named!r} holds no task: the source would "
                                                 "run nothing")
            continue
        splits = getattr(registry.domains.get(source.domain.type).factory, "splits", ())
        for part in source.split.split("+"):
            if splits and part not in splits:
                yield SpecIssue(
                    f"{path}.split",
                    f"domain {source.domain.type!r} has no split {part!r}; its splits: {', '.join(splits)}",
                )


def check_gold_solutions(spec: Spec) -> Iterator[SpecIssue]:
    """Warn when a training or test source holds tasks whose gold solution takes more policy turns than
    `environment.max_turns` or as many errors as `environment.max_errors` (`tau_bench_env.gold_limits`; built-in
    domains with default params). A warning: a policy making several tool calls in one turn needs fewer turns.
    Off with `environment.warn_unsolvable_tasks: false`."""
    from tau_bench_env.gold_limits import gold_needs

    environment = spec.environment
    if not environment.warn_unsolvable_tasks:
        return
    sources = [(f"data.train.{i}", source) for i, source in enumerate(spec.data.train)]
    sources += [(f"data.test_sets.{name}", source) for name, source in spec.data.test_sets.items()]
    for path, source in sources:
        params = source.domain.params
        if params.model_dump() != type(params)().model_dump():
            continue
        needs = gold_needs(source.domain.type, source.split, source.max_tasks)
        over = [(task, turns, errors) for task, turns, errors in needs or ()
                if turns > environment.max_turns or errors >= environment.max_errors]
        if over:
            def need(turns: int, errors: int) -> str:
                return f"{turns} turns" + (f", {errors} errors" if errors >= environment.max_errors else "")

            shown = ", ".join(f"{task} ({need(turns, errors)})" for task, turns, errors in over[:5])
            more = f" and {len(over) - 5} more" if len(over) > 5 else ""
            yield SpecIssue(
                path,
                f"{len(over)} of {len(needs or ())} tasks cannot be solved one tool call a turn within "
                f"environment.max_turns {environment.max_turns} and max_errors {environment.max_errors} (their gold "
                f"solution takes more): {shown}{more}",
            )


def check_schedule(spec: Spec) -> Iterator[SpecIssue]:
    """Warn when the schedule (`ctu.spec.schedule`) wastes the run: warm-up as long as the run or longer (the
    learning rate never reaches `lr`), or tasks left out of every epoch by the last short batch."""
    from ctu.spec.schedule import schedule

    plan = schedule(spec)
    if plan is None or plan.steps_per_epoch == 0:
        return
    if plan.warmup_steps >= plan.optimizer_steps:
        yield SpecIssue(
            "trainer.optimizer.warmup_steps",
            f"{plan.warmup_steps} optimizer steps of warm-up, and the run has {plan.optimizer_steps} "
            f"({plan.total_steps} GRPO steps x {plan.optimizer_steps_per_step}): the learning rate never reaches "
            f"trainer.optimizer.lr. {plan.describe()}",
        )
    if plan.dropped_per_epoch:
        yield SpecIssue(
            "trainer.train_batch_size",
            f"{plan.train_tasks} {'SFT conversations' if plan.sft else 'training tasks'} at {plan.batch_size} a step: "
            f"the last {plan.dropped_per_epoch} of each "
            f"epoch's shuffled order are left out (drop_last); a batch size dividing {plan.train_tasks} uses them all",
        )


def check_backend_errors(spec: Spec) -> Iterator[SpecIssue]:
    """What the spec's backend cannot run (`BackendRules.spec_errors`: e.g. SkyRL's placement rules, Tinker's
    missing KL loss)."""
    yield from backend_rules(spec).spec_errors(spec)


def check_backend_warnings(spec: Spec) -> Iterator[SpecIssue]:
    """What the spec's backend runs, but likely not as meant (`BackendRules.spec_warnings`)."""
    yield from backend_rules(spec).spec_warnings(spec)


def check_batch_fits(spec: Spec) -> Iterator[SpecIssue]:
    """On SkyRL an epoch with fewer training tasks than `train_batch_size` has no step (its dataloader drops the
    short batch)."""
    from ctu.spec.schedule import schedule

    plan = schedule(spec)
    if plan is not None and plan.steps_per_epoch == 0:
        yield SpecIssue(
            "trainer.train_batch_size",
            f"{plan.batch_size} tasks a step, and training has {plan.train_tasks}: SkyRL drops an epoch's last short "
            "batch, so the run would train nothing; lower train_batch_size or add tasks",
        )


def check_validation_name(spec: Spec) -> Iterator[SpecIssue]:
    """No test set is named ``validation``: the validation set (`data.validation`) is evaluated under that name."""
    if "validation" in spec.data.test_sets:
        yield SpecIssue("data.test_sets.validation", "`validation` is the validation set's name (data.validation); "
                                                     "name this test set otherwise")


def _shared_tasks(first, second) -> int:
    """How many tasks two data sources share: by task id where `ctu.spec.schedule.source_task_ids` knows them;
    otherwise sources of the same domain, params and split share at least one."""
    from ctu.spec.schedule import source_task_ids

    def key(source) -> tuple[str, str]:
        return source.domain.type, source.domain.params.model_dump_json()

    if key(first) != key(second):
        return 0
    first_ids, second_ids = source_task_ids(first), source_task_ids(second)
    if first_ids is not None and second_ids is not None:
        return len(set(first_ids) & set(second_ids))
    return min(first.max_tasks or 1, second.max_tasks or 1) if first.split == second.split else 0


def check_test_sets(spec: Spec) -> Iterator[SpecIssue]:
    """Warn when an evaluation set may share tasks with the training set where their task ids are not known without
    loading a domain (its scores would then measure recall of trained tasks, not generalisation; where the ids are
    known, `check_held_out` refuses the spec), or the validation set shares tasks with a test set (the step chosen on
    it would be chosen on the test set)."""
    from ctu.spec.schedule import source_task_ids

    data = spec.data
    for name, held_out in data.evaluation_sets().items():
        path = "data.validation" if held_out is data.validation else f"data.test_sets.{name}"
        for index, train in enumerate(data.train):
            if source_task_ids(held_out) is not None and source_task_ids(train) is not None:
                continue
            if shared := _shared_tasks(held_out, train):
                yield SpecIssue(
                    path,
                    f"{shared} of its tasks are also training tasks (data.train.{index}: {train.domain.type}, split "
                    f"{train.split!r}): its scores measure recall of trained tasks; evaluate on a held-out split",
                )
    if data.validation is not None:
        for name, test in data.test_sets.items():
            if shared := _shared_tasks(data.validation, test):
                yield SpecIssue(
                    "data.validation",
                    f"{shared} of its tasks are also in test set {name!r}: the best step would be chosen on the test "
                    "set; validate on tasks the test sets do not hold",
                )


def check_task_generation(spec: Spec) -> Iterator[SpecIssue]:
    """The `task_generation` section's generator can write tasks of its domain: a generator with a
    ``spec_problems(domain_type)`` method (the `template` generator: its template set exists, parses, and is for
    that domain) lists what stops it."""
    generation = spec.task_generation
    if generation is None:
        return
    problems = getattr(generation.generator.build(), "spec_problems", None)
    for where, message in problems(generation.domain.type) if problems is not None else ():
        yield SpecIssue(f"task_generation.generator{'.' + where if where else ''}", message)


RUN_EXPORT = re.compile(r"(^|/)exports/global_step_\d+/policy/?$")
"""A run directory's Hugging Face export (`RunDir.hf_export`), as `model.path` names it to start GRPO from SFT."""


def check_model_exports(spec: Spec) -> Iterator[SpecIssue]:
    """A model path naming a run's export (GRPO from an SFT run's policy) exists; and GRPO from one with a KL loss
    names its reference model explicitly (`model.reference_path`): the base model, as CTU-Agent-v0's 3B scripts
    did (an SFT checkpoint with Qwen2.5-3B-Instruct as the reference), or the export itself."""
    from pathlib import Path

    for field, path in (("model.path", spec.model.path), ("model.reference_path", spec.model.reference_path)):
        if path is not None and RUN_EXPORT.search(path) and not (Path(path) / "config.json").is_file():
            yield SpecIssue(field, f"{path!r} names a run's export that does not exist: run the spec that writes it "
                                   "first (the SFT stage, `ctu run SFT_SPEC`), or name the step it exported")
    if RUN_EXPORT.search(spec.model.path) and spec.algorithm.use_kl_loss and spec.model.reference_path is None:
        yield SpecIssue("model.reference_path", "GRPO from a run's export with a KL loss: name the reference model "
                                                "explicitly, the base model (as CTU-Agent-v0's 3B scripts did) or "
                                                "this export (a KL to the SFT policy)")


def check_sft_data(spec: Spec) -> Iterator[SpecIssue]:
    """`data.sft` names `ctu data sft`'s output: a ``train.parquet`` (or its folder) with a ``messages`` column."""
    from ctu.spec.schedule import sft_row_count

    if spec.data.sft is not None and not sft_row_count(spec.data.sft):
        yield SpecIssue("data.sft", f"{spec.data.sft!r} is not SFT data `ctu data sft` wrote (a train.parquet, or its "
                                    "folder, holding conversations in a `messages` column)")


def check_user_fault_retries(spec: Spec) -> Iterator[SpecIssue]:
    """`retry` replays an episode to draw another customer; a user simulator that answers a replay as it answered
    before (an LLM customer sampled at temperature 0; one whose class says ``replays_identically``, as the scripted
    one does) repeats the fault, and the episode is then excluded after every retry."""
    faults, user = spec.environment.user_faults, spec.environment.user_simulator
    if not faults.detectors or faults.action != "retry":
        return
    if user.type == "llm" and getattr(user.params, "temperature", 1.0) == 0:
        yield SpecIssue("environment.user_faults.action", "`retry` plays an episode again to draw another customer, but "
                        "the llm user simulator samples at temperature 0 and will answer a replay as before: set "
                        "environment.user_simulator.temperature above 0, or use `exclude`")
    elif getattr(user.factory, "replays_identically", False):
        yield SpecIssue("environment.user_faults.action", f"`retry` plays an episode again to draw another customer, but "
                        f"the {user.type} user simulator answers a replay exactly as before, so every retry repeats the "
                        "fault: use `exclude`, or a user simulator that samples")


def check_dynamic_sampling(spec: Spec) -> Iterator[SpecIssue]:
    """`min_replace_ratio` away from its default only with the `replace` dynamic sampling that reads it."""
    sampling = spec.algorithm.dynamic_sampling
    if sampling is not None and sampling.type != "replace" and sampling.min_replace_ratio != type(sampling).model_fields["min_replace_ratio"].default:
        yield SpecIssue("algorithm.dynamic_sampling.min_replace_ratio", f"only dynamic sampling's `replace` reads it; with "
                        f"`{sampling.type}` it changes nothing: remove it, or use type: replace (skyrl)")


def check_secrets(spec: Spec) -> Iterator[SpecIssue]:
    """No key in the spec: ``*_env`` fields name variables, `backend.runtime_env.env_vars` holds no secret
    (`ctu.spec.secrets.secret_issues`)."""
    from ctu.spec.secrets import secret_issues

    yield from secret_issues(spec)


ERROR_CHECKS: tuple[Check, ...] = (
    check_secrets,
    check_batch_sizes,
    check_builtin_model,
    check_grpo_group,
    check_context,
    check_native_tool_calling,
    check_trajectory,
    check_judges,
    check_domains,
    check_backend_errors,
    check_batch_fits,
    check_listed_once,
    check_output_dir,
    check_validation_name,
    check_task_generation,
    check_sft_data,
    check_held_out,
    check_model_exports,
    check_dynamic_sampling,
)
WARNING_CHECKS: tuple[Check, ...] = (check_thinking, check_eval_samples, check_gold_solutions, check_schedule, check_test_sets,
                                     check_backend_warnings, check_user_fault_retries, check_first_prompt)


def run_checks(spec: Spec) -> tuple[list[SpecIssue], list[SpecIssue]]:
    """Run every check. Returns ``(errors, warnings)``."""
    errors = [issue for check in ERROR_CHECKS for issue in check(spec)]
    warnings = [issue for check in WARNING_CHECKS for issue in check(spec)]
    return errors, warnings
