"""`EpisodeRequest`: one episode a rollout batch asks for, the typed input of `ctu.rollout.records.Rollout`.

A request names its task (`tau_bench_env.data.TaskRow`: domain, params, task id), the prompt, and the sample it is
of that task. A GRPO group is the requests of one task in a batch; their sample indices tell the episodes apart
(evaluation seeds the k-th sample of a task with `ctu.rollout.generator.episode_seed`).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctu.components.rewards.base import Phase
from tau_bench_env.data import TaskRow

__all__ = ["EpisodeRequest", "TaskRow", "older_batch", "older_episode", "requests_for", "sample_indices"]

logger = logging.getLogger(__name__)

OLDER_CONTRACT = ("ctu's rollout was called with the contract before EpisodeRequest ({call}); it still works, "
                  "deprecated: pass EpisodeRequest objects (ctu.rollout.requests), {now}")
"""The deprecation message of a call written to the older rollout contract."""


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to play.

    Attributes:
        task: the task (domain, params, id, split, evaluation set).
        prompt: the prompt messages (OpenAI format), None to have the environment write its own (tau2's agent
            system prompt with the domain's policy, the greeting, the customer's opening line).
        sample: which sample of its task this episode is (0-based), None to count it from the batch: the k-th
            request of a task in a batch is its sample k.
    """

    task: TaskRow
    prompt: list[dict[str, object]] | None = None
    sample: int | None = None

    @property
    def task_key(self) -> str:
        """``domain/task_id``: the samples of one task (a GRPO group) share it (`task_key`)."""
        return task_key(self.task.domain, self.task.task_id)


def task_key(domain: object, task_id: object) -> str:
    """``domain/task_id``, the one name of a task within a batch: the samples of one task (a GRPO group) share it,
    whether read from a request or from a finished episode's extras."""
    return f"{domain}/{task_id}"


def requests_for(rows: Sequence[TaskRow], samples: int) -> list[EpisodeRequest]:
    """`samples` requests for each of `rows`, a task's samples consecutive (a GRPO group each), numbered 0..samples-1."""
    return [EpisodeRequest(row, row.prompt, k) for row in rows for k in range(samples)]


def sample_indices(requests: Sequence[EpisodeRequest]) -> list[int]:
    """Each request's sample index: its own, or, where it has none, how many requests of its task came before it
    in `requests`."""
    seen: Counter[str] = Counter()
    indices = []
    for request in requests:
        indices.append(seen[request.task_key] if request.sample is None else request.sample)
        seen[request.task_key] += 1
    return indices


def _deprecated(call: str, now: str) -> None:
    message = OLDER_CONTRACT.format(call=call, now=now)
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    logger.warning(message)


def older_batch(prompts: Sequence[list[dict[str, object]] | None], extras: Sequence[Mapping[str, object]],
                phase: Phase, step: int) -> tuple[list[EpisodeRequest], Phase, int]:
    """A `run_batch(prompts, extras, phase, step)` call of the older contract as ``(requests, phase, step)``, with
    a deprecation warning (a task's k-th episode in the batch stays its sample k).

    Raises:
        ValueError: `prompts` and `extras` differ in length.
        KeyError: an extras mapping names no domain or task id.
    """
    _deprecated("run_batch(prompts, extras, phase, step)", "run_batch(requests, phase, step)")
    if len(prompts) != len(extras):
        raise ValueError(f"a batch of {len(prompts)} prompts and {len(extras)} tasks' extras: one of each an episode")
    return [EpisodeRequest(TaskRow.from_extras(extra), prompt) for prompt, extra in zip(prompts, extras, strict=True)], phase, step


def older_episode(prompt: list[dict[str, object]] | None, extras: Mapping[str, object], phase: Phase,
                  repetition: int = 0) -> tuple[EpisodeRequest, Phase]:
    """A `run_episode(prompt, extras, phase, repetition)` call of the older contract as ``(request, phase)``, with a
    deprecation warning.

    Raises:
        KeyError: `extras` names no domain or task id.
    """
    _deprecated("run_episode(prompt, extras, phase, repetition)", "run_episode(request, phase)")
    return EpisodeRequest(TaskRow.from_extras(extras), prompt, repetition), phase
