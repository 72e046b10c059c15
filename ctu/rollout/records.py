"""ctu's rollout contract and its records: `Rollout` (a batch of tasks in, `TrajectoryRecord`s out, the interface
every backend uses of a built generator), `RolloutBatch`, `TrajectoryRecord` (one trajectory's tokens, reward and
episode facts), `infrastructure_error` and the batch metrics (`rollout_metrics`). No trainer's types: a backend
turns records into its own (the SkyRL backend's adapter, `SkyRLGenerator`, in `ctu.backends`).
"""

from __future__ import annotations

import struct
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ctu.components.rewards.base import Phase
from ctu.components.user_fault_detectors.base import UserFault
from ctu.metrics import ENVIRONMENT, GENERATION, JUDGE, REWARD, USER, is_success, mean, metric
from ctu.rollout.requests import EpisodeRequest
from tau_bench_env.outcome import EpisodeResult


@dataclass
class TurnSample:
    """One policy turn of a step-wise trajectory as a training sample (``rollout.trajectory: step_wise``).

    Attributes:
        prompt_ids: the exact ids the turn was sampled from.
        response_ids: the ids the policy sampled.
        logprobs: the sampler's logprob of each id in `response_ids`.
        loss_mask: one per id in `response_ids`: all 1, or all 0 for an episode trained on none of its tokens.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]


@dataclass
class TrajectoryRecord:
    """One trajectory's tokens, reward and episode facts.

    Attributes:
        result: how the episode went; an episode that could not run has an empty one (its domain and task only).
        verdict: the judge's verdict (``categories``, ``score``, ``error``) when a judge-based reward ran.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    reward: float
    stop_reason: str
    result: EpisodeResult
    reward_metrics: dict[str, float] = field(default_factory=dict)
    extras: dict[str, object] = field(default_factory=dict)
    policy_turns: int = 0
    error: str | None = None
    seconds: float = 0.0
    infra_error: str | None = None
    """Why the episode says nothing about the policy (see `infrastructure_error`), else None. Such an episode is
    left out of its GRPO group, the loss, success rates and pass^k."""
    verdict: dict[str, object] | None = None
    user_fault: UserFault | None = None
    """The fault when a user-fault detector flagged the episode (`environment.user_faults`), else None; with the action `exclude` (or `retry` once the replays are spent) the episode is an infrastructure
    error too (`infra_error`)."""
    user_fault_retries: int = 0
    """Times the episode was played again because of a user fault (action `retry`)."""
    rerendered_turns: int = 0
    """Policy turns whose ids are the chat template's rendering of the answer, not ids the sampler returned (a
    chat-only sampler that returns none; such an episode has no rollout logprobs). 0 on token samplers."""
    off_template_turns: list[int] = field(default_factory=list)
    """The policy turns (numbered from 1) sampled after ids that differ from what the chat template renders for the
    conversation so far (`ctu.rollout.generator`): an earlier turn's sampled ids are not the template's tokenisation
    of its text (a tokenizer samples a word in pieces it would not encode it in; decoding cleaned its spaces), the
    template renders a past turn otherwise than it was sampled (Qwen3's empty thinking block, dropped from past
    turns; structured tool calls rendered in another layout than the policy wrote them), or a turn cut by the token
    limit. The policy trains on what it was sampled after; these are the turns a fresh rendering would show it
    differently. Empty under a thinking template (each prompt is rendered anew) and for a chat sampler."""
    reasoning: list[str] = field(default_factory=list)
    """What each policy turn reasoned before its answer, in order ("" for a turn that did not), under a thinking
    template (`qwen3_thinking`) or when a chat server returned reasoning apart (`SampleResult.reasoning`); empty
    otherwise. Never part of the conversation."""
    turn_samples: list[TurnSample] = field(default_factory=list)
    """A training episode's policy turns, each its own sample, in order, when ``rollout.trajectory`` is
    ``step_wise``; empty otherwise (the episode trains as one sample: `prompt_ids`, `response_ids`, `loss_mask`).
    The fields above always describe the whole episode (the trajectory logs', `ctu view`'s)."""

    def train_none(self) -> None:
        """Zero the loss mask of the episode and of each of its turn samples: none of its tokens is trained on."""
        self.loss_mask = [0] * len(self.loss_mask)
        for sample in self.turn_samples:
            sample.loss_mask = [0] * len(sample.loss_mask)

    def training_samples(self, turn_discount: float = 1.0, whole_logprobs: list[float] | None = None) -> list[tuple[TurnSample, float]]:
        """What a trainer trains of the episode: ``(sample, weight)`` pairs, the episode's advantage times the weight
        on each. Whole: one sample of the whole episode, weight 1, its logprobs `whole_logprobs` where given (a
        trainer takes a batch's sampler logprobs for all its episodes or for none: `RolloutBatch.sampled_logprobs`),
        else the record's own ([] when the sampler gave none). Step-wise: each policy turn's sample with its own
        logprobs, turn t of T weighed ``turn_discount ** (T - 1 - t)`` (AReaL's turn discount; 1.0 gives every turn
        the episode's advantage, as SkyRL's step-wise trajectories do)."""
        if not self.turn_samples:
            logprobs = self.logprobs if whole_logprobs is None else whole_logprobs
            return [(TurnSample(self.prompt_ids, self.response_ids, logprobs, self.loss_mask), 1.0)]
        last = len(self.turn_samples) - 1
        return [(sample, turn_discount ** (last - t)) for t, sample in enumerate(self.turn_samples)]

    def __getstate__(self) -> dict[str, object]:
        """Pickled with its token lists as packed C values (`PACKED_LISTS`), made lists again when loaded: records
        cross from rollout worker processes (`ctu.rollout.processes`), and a list pickles one opcode per item.
        Measured on 5,000 token ids: packed 0.05 ms and loaded 0.08 ms, against 0.16 and 0.25 ms as a list."""
        state = dict(self.__dict__)
        for name, code in PACKED_LISTS.items():
            values = state[name]
            assert isinstance(values, list)
            state[name] = struct.pack(f"{len(values)}{code}", *values)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, code in PACKED_LISTS.items():
            packed = state[name]
            assert isinstance(packed, bytes)
            state[name] = array(code, packed).tolist()
        self.__dict__.update(state)

    @property
    def raw_reward(self) -> float:
        """tau2's reward, before the reward chain."""
        return self.result.reward

    @property
    def success(self) -> bool:
        """tau2 scored the episode 1.0 (`ctu.metrics.is_success`)."""
        return is_success(self.raw_reward)


PACKED_LISTS = {"prompt_ids": "i", "response_ids": "i", "loss_mask": "b", "logprobs": "d"}
"""A record's lists pickled packed, with their type codes (`struct`'s and `array`'s, native): token ids as C ints
(32 bits), the loss mask as bytes, logprobs as doubles (Python's floats, exactly)."""


def _by_domain(records: list[TrajectoryRecord]) -> dict[str, list[TrajectoryRecord]]:
    groups: dict[str, list[TrajectoryRecord]] = {}
    for record in records:
        groups.setdefault(record.result.domain, []).append(record)
    return groups


def infrastructure_error(result: EpisodeResult, judge_error: str | None = None) -> str | None:
    """Why a finished episode is an infrastructure error, or None when it measures the policy.

    An episode is one when its user simulator failed (an endpoint that stayed down, a reply that is no valid
    message, a user stuck in tool calls), when scoring it failed for a reason outside it (`EpisodeResult.
    evaluator_fault`: tau2's NL-assertion judge, the task's gold outcome), or when a judge the spec marks fatal
    failed (`judge_error`). An exception tau2's evaluator raised on the episode's own state is not one: tau2 scores
    such a simulation 0 and keeps it in every average and pass^k (`tau2.run.run_task` with
    ``skip_failed_samples``; `tau_bench_env.evaluation_faults`). An episode the generator could not run at all (its
    `TrajectoryRecord.error`) is one as well; `TauGenerator.run_episode` marks it.
    """
    if result.user_error:
        return f"user simulator: {result.user_error}"
    if result.evaluator_fault:
        return f"evaluator: {result.evaluator_fault}"
    if judge_error:
        return f"judge: {judge_error}"
    return None


@dataclass
class RolloutBatch:
    """One batch of episodes (`Rollout.run_batch`).

    Attributes:
        records: one per episode asked for, in input order (a failed episode's is an infrastructure error).
        metrics: the batch's metrics: `rollout_metrics` of the records, ``timing/generate`` (seconds the batch
            took) and ``timing/rollout_loop_busy`` (the most loaded event loop's busy fraction, 0-1) when measured.
    """

    records: list[TrajectoryRecord]
    metrics: dict[str, float]

    @property
    def sampled_logprobs(self) -> list[list[float]] | None:
        """Each trajectory's sampled logprobs (one per response token), or None unless every trajectory has them: a
        trainer takes rollout logprobs for the whole batch or not at all (0.0 for a token would be trained against
        as a logprob)."""
        logprobs = [r.logprobs for r in self.records]
        complete = bool(self.records) and all(len(p) == len(r.response_ids) for p, r in zip(logprobs, self.records))
        return logprobs if complete else None


@runtime_checkable
class Rollout(Protocol):
    """ctu's rollout contract: what every backend uses of a built generator (`ctu.rollout.build.build_generator`
    checks it). A batch of tasks in, one `TrajectoryRecord` per episode out; nothing of a trainer's types. The
    Tinker loop and the toy backend call `run_batch` directly, SkyRL's trainer through its adapter
    (`SkyRLGenerator`, the SkyRL backend's), `ctu eval` runs single episodes (`run_episode`).
    `TauGenerator` is ctu's; a generator component of one's own returns it wrapped, or another object with these
    two methods.
    """

    async def run_batch(self, requests: Sequence[EpisodeRequest], phase: Phase, step: int) -> RolloutBatch:
        """One episode per request, concurrently, one record each in input order; never raises for an episode's
        own failure.

        Args:
            requests: the episodes: each one's task, prompt and sample index (`EpisodeRequest`); a task's requests
                in a batch are a GRPO group's members, consecutive or not.
            phase: ``train`` or ``eval``: which reward chain scores the episodes and which sampling params apply.
            step: the global training step (0 before the first), for trajectory logs.
        """
        ...

    async def run_episode(self, request: EpisodeRequest, phase: Phase) -> TrajectoryRecord:
        """One episode (its sample index `request.sample`, 0 when None); never raises for the episode's own
        failure."""
        ...


def rollout_metrics(records: list[TrajectoryRecord]) -> dict[str, float]:
    """The batch's metrics, named by `ctu.metrics`, with `sample_metrics`; zeros (never NaN) for an empty batch.

    Rewards, success and parse failures are over the episodes that measure the policy: an infrastructure error
    (`TrajectoryRecord.infra_error`) is counted in ``environment/infra_errors`` and its rate, and left out of the
    rest. A rate over no episode (every one an infrastructure error, or none evaluated) is absent, not 0.
    """
    count = len(records)
    valid = [r for r in records if r.infra_error is None]
    turns = sum(r.policy_turns for r in valid)
    failures = sum(r.result.failed_turns for r in valid)
    metrics: dict[str, float] = {
        metric(GENERATION, "num_trajectories"): float(count),
        metric(GENERATION, "avg_response_length"): mean(float(sum(r.loss_mask)) for r in records),
        metric(GENERATION, "episode_errors"): float(sum(r.error is not None for r in records)),
        metric(GENERATION, "length_stops"): float(sum(r.stop_reason == "length" for r in records)),
        **template_metrics(records),
        **sample_metrics(records),
        metric(REWARD, "parse_failure_rate"): failures / turns if turns else 0.0,
        metric(ENVIRONMENT, "avg_turns"): mean(float(r.result.turns) for r in records),
        metric(ENVIRONMENT, "avg_tool_errors"): mean(float(r.result.tool_errors) for r in records),
        metric(ENVIRONMENT, "evaluation_errors"): float(sum(bool(r.result.evaluation_error) for r in records)),
        metric(ENVIRONMENT, "infra_errors"): float(count - len(valid)),
        metric(ENVIRONMENT, "infra_error_rate"): (count - len(valid)) / count if count else 0.0,
        metric(USER, "errors"): float(sum(bool(r.result.user_error) for r in records)),
        metric(USER, "faults"): float(sum(r.user_fault is not None for r in records)),
        metric(USER, "fault_rate"): sum(r.user_fault is not None for r in records) / count if count else 0.0,
        metric(USER, "fault_retries"): float(sum(r.user_fault_retries for r in records)),
    }
    for kind, n in Counter(r.user_fault.kind for r in records if r.user_fault).items():
        metrics[metric(USER, f"faults/{kind}")] = float(n)
    if any(r.user_fault for r in records):
        for domain, group in _by_domain(records).items():
            metrics[metric(USER, f"fault_rate/{domain}")] = sum(r.user_fault is not None for r in group) / len(group)
    if valid or not records:
        metrics.update({
            metric(GENERATION, "avg_reward"): mean(r.reward for r in valid),
            metric(GENERATION, "success_rate"): mean(float(r.success) for r in valid),
            # tau2's own reward before the spec's reward wrappers. Not `reward/avg_raw_reward`: SkyRL's trainer
            # writes that name with the mean final reward of every trajectory after the generator returns.
            metric(REWARD, "avg_outcome_reward"): mean(r.raw_reward for r in valid),
            metric(REWARD, "avg_final_reward"): mean(r.reward for r in valid),
        })
    evaluated = [r for r in valid if r.result.reward_path]
    if evaluated:  # a rate over no evaluated episode is absent, not 0
        metrics[metric(ENVIRONMENT, "fast_reward_rate")] = mean(float(r.result.reward_path == "fast") for r in evaluated)
    terminations = Counter(r.result.termination or "none" for r in records)
    for reason, n in terminations.items():
        metrics[metric(ENVIRONMENT, f"termination/{reason}")] = n / count
    counts: dict[str, float] = {}  # judge calls and failures: over every episode
    values: dict[str, list[float]] = {}  # means (contributions, judge score): over the episodes that measure the policy
    for record in records:
        for name, value in record.reward_metrics.items():
            if name.startswith(f"{JUDGE}/") and name != metric(JUDGE, "score"):
                counts[name] = counts.get(name, 0.0) + value
            elif record.infra_error is None:
                values.setdefault(name, []).append(value)
    metrics.update(counts)
    metrics.update({name: mean(v) for name, v in values.items()})
    return metrics


def template_metrics(records: list[TrajectoryRecord]) -> dict[str, float]:
    """How the ids trained on relate to the chat template's rendering: ``generation/rerendered_turns`` (turns trained
    on the template's ids, the sampler having returned none) and ``generation/off_template_turns`` (turns sampled
    after ids the template would render otherwise, `TrajectoryRecord.off_template_turns`), over the batch."""
    return {
        metric(GENERATION, "rerendered_turns"): float(sum(r.rerendered_turns for r in records)),
        metric(GENERATION, "off_template_turns"): float(sum(len(r.off_template_turns) for r in records)),
    }


def sample_metrics(records: list[TrajectoryRecord]) -> dict[str, float]:
    """What training reads of a batch: ``generation/turn_samples``, the policy turns given as samples of their own
    (``rollout.trajectory: step_wise``; 0 for whole trajectories), and ``generation/sample_tokens_per_episode``, the
    prompt and response tokens of an episode's training samples (`TrajectoryRecord.training_samples`), what a
    trainer's forward pass reads of it: a step-wise episode reads each turn's prompt again (0 for no episode)."""
    return {
        metric(GENERATION, "turn_samples"): float(sum(len(r.turn_samples) for r in records)),
        metric(GENERATION, "sample_tokens_per_episode"): mean(
            float(sum(len(s.prompt_ids) + len(s.response_ids) for s, _ in r.training_samples())) for r in records),
    }
