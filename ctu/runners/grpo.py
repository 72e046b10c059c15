"""GRPO's arithmetic: group-normalised advantages with infrastructure errors left out, which groups have no reward
spread (zero-variance filtering and dynamic sampling), the rule that skips a step with too many infrastructure errors
(both backends), how far the sampler's log-probabilities are from the trainer's (both backends), and the Tinker
loop's per-token training data and learning rate.

Advantages follow GRPO (Shao et al. 2024, arXiv:2402.03300): each trajectory's reward minus its group's mean,
divided by the group's standard deviation (plus 1e-6) when `norm_by_std` (Dr. GRPO, Liu et al. 2025,
arXiv:2503.20783, leaves the division out). A group is the `n_samples_per_prompt` trajectories of one task.
Negative advantages can then be weighed down (`weigh_negative`), toward reinforcing successes only. The
shuffled-reward control (`shuffle_group_rewards`) trains on each group's rewards dealt out at random among its
trajectories.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctu.errors import NothingMeasuredError
from ctu.metrics import TRAIN, metric

if TYPE_CHECKING:
    from ctu.rollout.records import TrajectoryRecord

logger = logging.getLogger(__name__)

EPSILON = 1e-6
SPREAD_TOLERANCE = 1e-6
"""Two rewards this close are equal when looking for a group's spread (SkyRL's `zero_variance_filter_tol`)."""


def group_advantages(rewards: Sequence[float], group_size: int, norm_by_std: bool = True,
                     excluded: Sequence[bool] | None = None) -> list[float]:
    """One advantage per reward; `rewards` are consecutive groups of `group_size`.

    `excluded` (one flag per reward) marks infrastructure errors: they get advantage 0 and are left out of
    their group's mean and standard deviation. A group with fewer than two rewards left has no baseline: its
    advantages are 0.

    Raises:
        ValueError: the rewards do not split into whole groups, or `excluded` has another length.
    """
    if group_size <= 0 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    if excluded is None:
        excluded = [False] * len(rewards)
    if len(excluded) != len(rewards):
        raise ValueError(f"{len(excluded)} exclusion flags for {len(rewards)} rewards")
    advantages: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = range(start, start + group_size)
        kept = [rewards[i] for i in group if not excluded[i]]
        if len(kept) < 2:
            advantages += [0.0] * group_size
            continue
        mean = sum(kept) / len(kept)
        std = math.sqrt(sum((r - mean) ** 2 for r in kept) / (len(kept) - 1))
        for i in group:
            centred = 0.0 if excluded[i] else rewards[i] - mean
            advantages.append(centred / (std + EPSILON) if norm_by_std else centred)
    return advantages


def weigh_negative(advantages: Any, weight: float) -> Any:
    """`advantages` with each negative one multiplied by `weight` (in [0, 1]); positive ones unchanged.

    `advantages` is a sequence of floats (returned as a list) or a tensor of any shape (a tensor is returned; torch
    arithmetic, so the caller's device and dtype are kept). A weight of 1 is GRPO; 0 trains on the group's
    better-than-average episodes only (positive sample reinforcement, PSR, in Zhu et al. 2025, "The Surprising
    Effectiveness of Negative Reinforcement in LLM Reasoning", arXiv:2506.01347, which finds PSR raises pass@1 and
    lowers the policy's entropy, while negative samples keep it high). In ctu's learning chain GRPO's negative
    samples, most of a group's episodes when the policy rarely succeeds, raised the policy's entropy step by step,
    and its calls broke (docs/learning-checks.md).

    Raises:
        ValueError: `weight` is outside [0, 1].
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the weight of negative advantages must be in [0, 1], not {weight}")
    if weight == 1.0:
        return advantages if not isinstance(advantages, Sequence) else list(advantages)
    if isinstance(advantages, Sequence):
        return [a * weight if a < 0 else a for a in advantages]
    return advantages - (1.0 - weight) * advantages.clamp(max=0.0)


def groups_without_spread(rewards: Sequence[float], groups: Sequence[str], excluded: Sequence[bool]) -> set[str]:
    """The groups (trajectories sharing a name in `groups`) without a reward spread: fewer than two of their kept
    rewards (those not `excluded`) differ by more than `SPREAD_TOLERANCE`. GRPO gives such a group zero advantages
    (a group left with fewer than two has no baseline): nothing to learn from it. An excluded trajectory adds no
    spread."""
    kept: dict[str, list[float]] = {group: [] for group in groups}
    for group, reward, out in zip(groups, rewards, excluded, strict=True):
        if not out:
            kept[group].append(float(reward))
    return {group for group, values in kept.items() if len(values) < 2 or max(values) - min(values) <= SPREAD_TOLERANCE}


SHUFFLED_REWARDS = metric(TRAIN, "shuffled_rewards")
"""The share of a step's kept trajectories (0-1) trained with another trajectory's reward than their own, under
``algorithm.shuffle_rewards``."""


def shuffle_group_rewards(rewards: Sequence[float], groups: Sequence[str], excluded: Sequence[bool],
                          seed: str) -> list[float]:
    """The shuffled-reward control: `rewards` with each group's kept rewards (those not `excluded`) dealt out among
    the group's kept trajectories in a random order; an excluded trajectory keeps its own.

    Everything GRPO sees of a group but which trajectory earned which reward stays: the group's rewards as a
    multiset, hence its mean, spread and advantage magnitudes, so the same groups train (or are filtered out) with
    the same step sizes; a gain the policy still shows over this control comes from the reward's information, not
    from the pipeline, the learning rate or sharpening toward the policy's own samples (random rewards have raised
    held-out scores: Shao et al. 2025, "Spurious rewards: rethinking training signals in RLVR",
    arXiv:2506.10947).

    Args:
        rewards: one reward per trajectory.
        groups: each trajectory's group (its task), aligned with `rewards`; a group's members need not be adjacent.
        excluded: each trajectory's flag: an infrastructure error, out of its group.
        seed: the permutation's seed (e.g. the experiment's seed and the step), so a resumed step deals the same.

    Returns:
        The rewards to train on, aligned with `rewards`.
    """
    dealt = [float(reward) for reward in rewards]
    members: dict[str, list[int]] = {}
    for index, (group, out) in enumerate(zip(groups, excluded, strict=True)):
        if not out:
            members.setdefault(group, []).append(index)
    generator = random.Random(seed)
    for group in sorted(members):
        indices = members[group]
        values = [dealt[i] for i in indices]
        generator.shuffle(values)
        for index, value in zip(indices, values, strict=True):
            dealt[index] = value
    return dealt


def shuffle_record_rewards(records: Sequence[TrajectoryRecord], seed: str) -> dict[str, float]:
    """`shuffle_group_rewards` on a batch's records, in place: each record's ``reward`` becomes the one it trains
    with; a group is a task (its domain and id). What was logged of the episodes before (trajectory lines, rollout
    metrics: means over groups, which a shuffle leaves alike) keeps each episode's own reward.

    Returns:
        `SHUFFLED_REWARDS` over the batch's kept records (empty when none is kept).
    """
    excluded = [record.infra_error is not None for record in records]
    groups = [f"{record.result.domain}/{record.result.task_id}" for record in records]
    dealt = shuffle_group_rewards([record.reward for record in records], groups, excluded, seed)
    moved = [abs(record.reward - reward) > SPREAD_TOLERANCE for record, reward, out in zip(records, dealt, excluded, strict=True)
             if not out]
    for record, reward in zip(records, dealt, strict=True):
        record.reward = reward
    return {SHUFFLED_REWARDS: sum(moved) / len(moved)} if moved else {}


def skip_step(excluded: Sequence[bool], max_infra_error_rate: float) -> bool:
    """Whether a training step is skipped (no update): more than `max_infra_error_rate` of its episodes
    (`excluded`, one flag each) ended by an infrastructure error, so what is left is too little to learn from
    and the outage, not the policy, decided which episodes remain."""
    return bool(excluded) and sum(excluded) / len(excluded) > max_infra_error_rate


def skipped_step_message(step: int, infra_errors: Sequence[str | None], max_infra_error_rate: float) -> str:
    """The warning both backends log for a step `skip_step` skipped: how many of its episodes (`infra_errors`,
    one entry each, None for an episode without one) ended by an infrastructure error, and the first error."""
    errors = [error for error in infra_errors if error]
    first = errors[0] if errors else None
    return (f"step {step} skipped: {len(errors)} of {len(infra_errors)} episodes ended by an infrastructure error "
            f"(more than trainer.max_infra_error_rate = {max_infra_error_rate}); first: {first}")


def unplayed_step(step: int, records: Sequence[TrajectoryRecord]) -> NothingMeasuredError | None:
    """The error both backends raise for training step `step` when none of its finished episodes (`records`
    without an infrastructure error, at least one) reached a policy turn (none counts one, none holds a policy
    token): nothing of the policy was sampled, there
    is nothing to train on, and every later step would start the same way (a first prompt the context cannot hold:
    every episode ``context_overflow`` before the policy spoke; `ctu validate` counts that prompt). None when a
    policy turn was played, or when no episode finished (`skip_step` says why)."""
    finished = [record for record in records if record.infra_error is None]
    if not finished or any(record.policy_turns > 0 or any(record.loss_mask) for record in finished):
        return None
    ended = Counter(str(record.result.termination) for record in finished)
    how = ", ".join(f"{reason} {count}" for reason, count in ended.most_common())
    return NothingMeasuredError(f"training step {step}: none of its {len(finished)} finished episode(s) reached a policy "
                                f"turn (they ended: {how}), so there is nothing to train on; with context_overflow, the "
                                "first prompt (system prompt, tools, first user turn) does not fit model.max_model_len "
                                "(`ctu validate` warns of it)")


LOGPROB_GAP_MEAN = metric(TRAIN, "logprob_gap_mean")
LOGPROB_GAP_MAX = metric(TRAIN, "logprob_gap_max")
LOGPROB_GAP_OVER = metric(TRAIN, "logprob_gap_frac_over")
LOGPROB_GAP_TOKENS = metric(TRAIN, "logprob_gap_tokens")


def logprob_gap(sampled: Sequence[float], trained: Sequence[float], token_threshold: float) -> dict[str, float]:
    """How far the policy sampled is from the policy trained, on the tokens a step trains on: for each sampled token,
    the absolute difference between the sampler's log-probability and the trainer's, before the update.

    On-policy training has only numerical noise here (bf16 against fp32, kernels): a mean of ~0.005-0.02 nats on GPUs
    (SkyRL's `rollout_train_logprobs_abs_diff`, Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"), plus up to ``-log(top_p)`` where the sampler reports the nucleus-renormalised
    distribution. A larger gap means the sampler serves other weights (a weight sync that missed a parameter, tied
    embeddings untied), another temperature, or other tokens (a chat template or tokenisation that differs).

    Args:
        sampled: the sampler's log-probability of each trained token (nats).
        trained: the trainer's log-probability of the same tokens, in the same order (nats).
        token_threshold: a token counts in ``train/logprob_gap_frac_over`` when its difference exceeds this.

    Returns:
        ``train/logprob_gap_mean``, ``_max``, ``_frac_over`` and ``_tokens`` (the tokens compared); empty for no token.

    Raises:
        ValueError: the two differ in length.
    """
    if len(sampled) != len(trained):
        raise ValueError(f"{len(sampled)} sampler log-probabilities for {len(trained)} trainer ones")
    gaps = [abs(float(a) - float(b)) for a, b in zip(sampled, trained, strict=True)]
    if not gaps:
        return {}
    return {LOGPROB_GAP_MEAN: sum(gaps) / len(gaps), LOGPROB_GAP_MAX: max(gaps),
            LOGPROB_GAP_OVER: sum(gap > token_threshold for gap in gaps) / len(gaps), LOGPROB_GAP_TOKENS: float(len(gaps))}


def logprob_gap_warning(step: int, metrics: dict[str, float], token_threshold: float, warn_mean: float | None) -> str | None:
    """The warning both backends log once for a step whose ``train/logprob_gap_mean`` (`logprob_gap`) exceeds
    `warn_mean` (the spec's `algorithm.logprob_gap.warn_mean`; None: never), with what to check; else None."""
    gap = metrics.get(LOGPROB_GAP_MEAN)
    if warn_mean is None or gap is None or gap <= warn_mean:
        return None
    return (f"step {step}: the sampler's and the trainer's log-probabilities of the sampled tokens differ by {gap:.3f} "
            f"nats on average (max {metrics[LOGPROB_GAP_MAX]:.3f}; {metrics[LOGPROB_GAP_OVER]:.1%} of "
            f"{metrics[LOGPROB_GAP_TOKENS]:.0f} tokens past {token_threshold}), more than algorithm.logprob_gap.warn_mean "
            f"= {warn_mean}: the policy trains off-policy. Check that the sampler serves the weights trained (the weight "
            "sync; tied embeddings), at the temperature and top_p the trainer assumes, with the same chat template and "
            "tokenizer; the skyrl backend's off_policy_correction corrects a gap it cannot remove")


def step_logprob_gap(step: int, sampled: Sequence[float], trained: Sequence[float], token_threshold: float,
                     warn_mean: float | None) -> dict[str, float]:
    """A training step's `logprob_gap` figures, as both backends log them, with `logprob_gap_warning`'s warning logged
    once when the step is past `warn_mean` (the spec's `algorithm.logprob_gap`).

    Raises:
        ValueError: `sampled` and `trained` differ in length.
    """
    gap = logprob_gap(sampled, trained, token_threshold)
    warning = logprob_gap_warning(step, gap, token_threshold, warn_mean)
    if warning:
        logger.warning(warning)
    return gap


@dataclass
class TokenData:
    """One trajectory as next-token training data.

    Attributes:
        inputs: tokens 0..n-2 of prompt + response.
        targets: tokens 1..n-1.
        logprobs: the sampler's log-probability of each target that the policy generated, else 0.
        advantages: the trajectory's advantage on each target the policy generated, else 0 (so observation
            and prompt tokens never carry gradient).
        generated: whether the policy generated each target (its loss mask, shifted).
    """

    inputs: list[int]
    targets: list[int]
    logprobs: list[float]
    advantages: list[float]
    generated: list[bool]


def token_data(prompt_ids: Sequence[int], response_ids: Sequence[int], loss_mask: Sequence[int],
               logprobs: Sequence[float], advantage: float) -> TokenData:
    """Shift a trajectory into (inputs, targets) with per-target logprobs and advantages.

    Raises:
        ValueError: the response, mask and logprobs differ in length.
    """
    if not len(response_ids) == len(loss_mask) == len(logprobs):
        raise ValueError("response ids, loss mask and logprobs must have one entry per response token")
    tokens = list(prompt_ids) + list(response_ids)
    mask = [0] * len(prompt_ids) + list(loss_mask)
    probs = [0.0] * len(prompt_ids) + list(logprobs)
    return TokenData(
        inputs=tokens[:-1],
        targets=tokens[1:],
        logprobs=[p if m else 0.0 for p, m in zip(probs[1:], mask[1:])],
        advantages=[advantage if m else 0.0 for m in mask[1:]],
        generated=[bool(m) for m in mask[1:]],
    )


def learning_rate(step: int, base: float, warmup_steps: int, total_steps: int | None = None,
                  scheduler: str = "constant") -> float:
    """The learning rate of optimizer step `step` (1-based) of `total_steps`: a linear warm-up over `warmup_steps`
    (`base` x step / warmup_steps), then `scheduler` (`trainer.optimizer.scheduler`): ``constant``, or ``linear`` and
    ``cosine`` decaying from `base` at the first step after the warm-up towards 0 at step `total_steps` + 1, as
    transformers' `get_linear_schedule_with_warmup` and `get_cosine_schedule_with_warmup` (one cycle) do after their
    warm-up, which SkyRL's trainer uses.

    Raises:
        ValueError: a decaying `scheduler` without `total_steps`, or an unknown one.
    """
    if step <= warmup_steps:
        return base * step / warmup_steps
    if scheduler == "constant":
        return base
    if total_steps is None or scheduler not in ("linear", "cosine"):
        raise ValueError(f"learning-rate scheduler {scheduler!r} with total_steps={total_steps}: "
                         "a linear or cosine decay needs the run's optimizer steps")
    progress = min(1.0, (step - 1 - warmup_steps) / max(1, total_steps - warmup_steps))
    return base * (1.0 - progress if scheduler == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress)))
