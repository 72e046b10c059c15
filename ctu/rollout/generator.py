"""`TauGenerator`: SkyRL's `GeneratorInterface` over tau-bench episodes. The agent loop is written once here;
the SkyRL and Tinker runners differ only in the sampler they give it.

Per trajectory: the episode's prompt is tokenised by the chat-template policy; each policy turn is sampled
(token-in/token-out, or a chat completion with tools for native tool calling on SkyRL, whose sampled token ids
and logprobs vLLM returns; a chat-only sampler, an endpoint `ctu eval` evaluates, answers chat completions in
text mode too), given to the environment, and the observations' tokens are appended with loss mask
0. The loss mask is 1 exactly on the tokens the policy generated. A chat server that returns no token ids gets
its turns re-tokenised through the policy, and the trajectory reports no rollout logprobs (never made-up ones).
The reward is the spec's reward chain for the batch's training phase (from `batch_metadata.training_phase`), so
a training-only reward cannot reach evaluation.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput

from ctu.components.chat_templates.base import ChatTemplate
from ctu.components.parsers.base import ParsedTurn, Parser
from ctu.components.rewards.base import Phase, RewardContext
from ctu.components.rewards.chain import RewardChain
from ctu.metrics import ENVIRONMENT, GENERATION, JUDGE, REWARD, TIMING, USER, is_success, mean, metric
from ctu.rollout.heap import frozen_heap
from ctu.rollout.sampling import Sampler, SamplingParams
from ctu.rollout.tokens import TokenAccount
from ctu.rollout.turns import TrajectoryTokens, chat_turn, token_turn
from tau_bench_env.env import EnvSetup, TauBenchEnv
from tau_bench_env.episode import Episode, EpisodeResult, Termination

logger = logging.getLogger(__name__)


@dataclass
class RolloutSetup:
    """Everything the generator needs, resolved from the spec by a runner.

    Attributes:
        tokenizer: the policy's Hugging Face tokenizer.
        chat_template: the chat-template policy (built component).
        sampler: the policy's sampler.
        env: the environment setup (user simulator, parser, episode config).
        rewards: the reward chain of each phase.
        sampling: sampling params of each phase.
        max_model_len: longest conversation in tokens.
        native_tool_calling: tools as OpenAI `tools` (chat samplers) or in the template (token samplers).
        native_parser: parses the model family's own tool-call format on token samplers in native mode.
        max_concurrent_episodes: episodes in flight at once.
        on_records: called with each batch's `TrajectoryRecord`s, its phase and global step (trajectory logs).
        on_episode: called with the batch size when a batch starts (episodes 0 of n) and after each episode
            that finishes (progress bars).
    """

    tokenizer: Any
    chat_template: ChatTemplate
    sampler: Sampler
    env: EnvSetup
    rewards: dict[Phase, RewardChain]
    sampling: dict[Phase, SamplingParams]
    max_model_len: int = 16384
    native_tool_calling: bool = False
    native_parser: Parser | None = None
    max_concurrent_episodes: int = 256
    on_records: Callable[[list[TrajectoryRecord], Phase, int], object] | None = None
    on_episode: Callable[[int, bool], None] | None = None

    def agent_loop(self, max_concurrent_episodes: int | None = None) -> TauGenerator:
        """ctu's agent loop (`TauGenerator`) over this setup: what a generator component builds unless it
        brings a loop of its own. The setup hands the loop to the component, so `ctu.components` never
        imports the rollout layer.

        Args:
            max_concurrent_episodes: episodes in flight at once; None keeps the setup's.
        """
        if max_concurrent_episodes is not None:
            return TauGenerator(replace(self, max_concurrent_episodes=max_concurrent_episodes))
        return TauGenerator(self)


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
    rerendered_turns: int = 0
    """Policy turns whose ids are the chat template's rendering of the answer, not ids the sampler returned (a
    chat-only sampler that returns none; such an episode has no rollout logprobs). 0 on token samplers."""

    @property
    def raw_reward(self) -> float:
        """tau2's reward, before the reward chain."""
        return self.result.reward

    @property
    def success(self) -> bool:
        """tau2 scored the episode 1.0 (`ctu.metrics.is_success`)."""
        return is_success(self.raw_reward)


def infrastructure_error(result: EpisodeResult, judge_error: str | None = None) -> str | None:
    """Why a finished episode is an infrastructure error, or None when it measures the policy.

    An episode is one when its user simulator failed (an endpoint that stayed down, a reply that is no valid
    message, a user stuck in tool calls), when tau2's evaluator raised, or when a judge the spec marks fatal
    failed (`judge_error`). tau2 likewise marks a simulation that raised as skipped instead of scoring it
    (`tau2.run.run_task`, ``skip_failed_samples``). An episode the generator could not run at all (its
    `TrajectoryRecord.error`) is one as well; `TauGenerator.run_episode` marks it.
    """
    if result.user_error:
        return f"user simulator: {result.user_error}"
    if result.evaluation_error:
        return f"evaluator: {result.evaluation_error}"
    if judge_error:
        return f"judge: {judge_error}"
    return None


@runtime_checkable
class Rollout(Protocol):
    """What a built generator is to ctu's runners: the whole interface they use (`ctu.rollout.build.build_generator`
    checks it). SkyRL's trainer calls `generate` (SkyRL's `GeneratorInterface`); ctu's runners read the records
    behind each batch (`last_records`: infrastructure errors are excluded from the update, and the SkyRL experiment
    adds its metrics), gather the evaluation records of several batches (`pop_eval_records`), and `ctu eval` and
    the toy backend run single episodes (`run_episode`). `TauGenerator` is ctu's; a generator component of one's
    own returns it wrapped, or another object with this interface.
    """

    last_records: list[TrajectoryRecord]
    """The records of the most recent `generate` batch, in its input order."""

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """One batch of episodes (SkyRL's `GeneratorInterface.generate`)."""
        ...

    def pop_eval_records(self) -> list[TrajectoryRecord]:
        """The evaluation-phase records gathered since the last call, and forget them."""
        ...

    async def run_episode(self, prompt: list[dict[str, object]] | None, extras: dict[str, object], phase: Phase,
                          repetition: int = 0) -> TrajectoryRecord:
        """One episode of the task `extras` names; never raises for the episode's own failure."""
        ...


class TauGenerator(GeneratorInterface):
    """Multi-turn tau-bench rollouts for SkyRL (see the module docstring); a `Rollout`."""

    def __init__(self, setup: RolloutSetup) -> None:
        self.setup = setup
        self.account = TokenAccount(setup.chat_template, setup.tokenizer)
        self.last_records: list[TrajectoryRecord] = []
        self.eval_records: list[TrajectoryRecord] = []
        """Every evaluation record since the last `pop_eval_records()` (SkyRL evaluates in several batches)."""
        self._warned_no_phase = False

    def pop_eval_records(self) -> list[TrajectoryRecord]:
        """The evaluation records gathered since the last call, and forget them."""
        records, self.eval_records = self.eval_records, []
        return records

    def _phase(self, input_batch: GeneratorInput) -> tuple[Phase, int]:
        metadata = input_batch.get("batch_metadata")
        if metadata is None:
            if not self._warned_no_phase:
                logger.warning("generate() got no batch_metadata: treating the batch as evaluation (no training-only rewards)")
                self._warned_no_phase = True
            return "eval", 0
        phase = metadata.training_phase
        return ("eval" if phase == "eval" else "train"), int(metadata.global_step or 0)

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        """Run one episode per prompt, concurrently; outputs in input order. Never raises for an episode's
        failure: a failed episode yields an empty, zero-reward trajectory, counted in `generation/episode_errors`."""
        started = time.perf_counter()
        phase, step = self._phase(input_batch)
        self.account.new_batch()
        prompts = list(input_batch.get("prompts") or [])
        extras = list(input_batch.get("env_extras") or [{} for _ in prompts])
        limit = asyncio.Semaphore(self.setup.max_concurrent_episodes)
        notify = self.setup.on_episode
        if notify is not None:
            notify(len(prompts), False)

        async def one(prompt: list[dict[str, object]] | None, extra: dict[str, object], repetition: int) -> TrajectoryRecord:
            async with limit:
                record = await self.run_episode(prompt, extra, phase, repetition)
            if notify is not None:
                notify(len(prompts), True)
            return record

        seen: Counter[str] = Counter()
        repetitions = []
        for extra in extras:  # the k-th sample of a task in this batch is its repetition k (0-based)
            key = f"{extra.get('domain')}/{extra.get('task_id')}"
            repetitions.append(seen[key])
            seen[key] += 1
        with frozen_heap():
            records = list(await asyncio.gather(*(one(p, e, r) for p, e, r in zip(prompts, extras, repetitions, strict=True))))
        self.last_records = records
        if phase == "eval":
            self.eval_records += records
        if self.setup.on_records is not None:
            self.setup.on_records(records, phase, step)
        metrics = rollout_metrics(records)
        metrics[metric(TIMING, "generate")] = time.perf_counter() - started
        logprobs = [r.logprobs for r in records]
        return GeneratorOutput(
            prompt_token_ids=[r.prompt_ids for r in records],
            response_ids=[r.response_ids for r in records],
            rewards=[r.reward for r in records],
            loss_masks=[r.loss_mask for r in records],
            stop_reasons=[r.stop_reason for r in records],
            rollout_metrics=metrics,
            rollout_logprobs=logprobs if records and all(len(p) == len(r.response_ids) for p, r in zip(logprobs, records)) else None,
            trajectory_ids=input_batch.get("trajectory_ids"),
            trajectory_generation_times=[r.seconds for r in records],
            trajectory_time_splits=None,
            rollout_expert_indices=None,
            rollout_sample_support=None,
            is_last_step=None,
            env_metrics=[episode_row(r) for r in records],
            pixel_values=None,
            image_grid_thw=None,
        )

    async def run_episode(self, prompt: list[dict[str, object]] | None, extras: dict[str, object], phase: Phase, repetition: int = 0) -> TrajectoryRecord:
        """One trajectory; an unexpected failure becomes an empty zero-reward record with `error` set.

        A phase sampled with a fixed seed (evaluation) samples repetition k of a task with seed + k, so a
        task's samples differ and pass^k over them means what it says.
        """
        started = time.perf_counter()
        try:
            record = await self._episode(prompt, extras, phase, repetition)
        except Exception as exc:  # one broken episode must not end a multi-day run
            logger.error("episode %s failed:\n%s", extras.get("task_id"), traceback.format_exc())
            eos = self.account.eos_id if self.account.eos_id is not None else 0
            error = f"{type(exc).__name__}: {exc}"
            result = EpisodeResult(str(extras.get("domain")), str(extras.get("task_id")))
            record = TrajectoryRecord([eos], [eos], [0], [0.0], 0.0, "error", result,
                                      extras=dict(extras), error=error, infra_error=f"episode failed: {error}")
        record.seconds = time.perf_counter() - started
        return record

    async def _episode(self, prompt: list[dict[str, object]] | None, extras: dict[str, object], phase: Phase, repetition: int) -> TrajectoryRecord:
        setup = self.setup
        account = self.account
        env = TauBenchEnv(setup.env, extras)
        messages, metadata = await env.ainit(prompt)
        native = setup.native_tool_calling
        # token-in/token-out wherever the sampler can: the policy samples from exactly the ids that are trained on, in
        # native mode too (the tools rendered by the chat template, the family's parser reading the calls). A
        # chat server samples from its own rendering of the history, which can differ from the ids trained on
        # (Qwen3's template drops past turns' empty think blocks; vLLM's tool parser re-serialises call JSON): only
        # a chat-only sampler (an evaluated endpoint) is asked for chats.
        chat_mode = setup.sampler.supports_chat and not setup.sampler.supports_tokens
        template_tools = metadata["tools"] if native else None
        prompt_ids = account.prompt_ids(messages, template_tools)
        tokens = TrajectoryTokens(list(prompt_ids))
        stop_reason = "stop"
        sampled = True  # every policy token and logprob came from the sampler (False once a turn is re-rendered)
        rerendered = 0  # turns whose ids the chat template rendered, the sampler having returned none
        turns = 0
        sampling = setup.sampling[phase]
        if sampling.seed is not None and repetition:
            sampling = replace(sampling, seed=sampling.seed + repetition)
        done = bool(metadata["done"])
        while not done:
            budget = setup.max_model_len - len(tokens.context)
            if budget <= 0:
                await env.episode.end(Termination.CONTEXT_LIMIT)
                stop_reason = "length"
                break
            params = sampling if sampling.max_tokens <= budget else replace(sampling, max_tokens=budget)
            turns += 1
            if chat_mode:
                turn = await chat_turn(setup.sampler, account, list(env.episode.conversation),
                                       metadata["tools"] if native else None, params)
                rerendered += turn.rendered
                sampled = sampled and not turn.rendered
            else:
                turn = await token_turn(setup.sampler, account, tokens.context, params, phase,
                                        setup.native_parser if native else None)
            stop_reason = turn.stop_reason
            tokens.add(turn.generated, turn.logprobs)
            step = await env.astep(unfinished(turn.action, env.episode) if stop_reason == "length" else turn.action)
            if step["done"]:
                break
            closed = turn.rendered or (bool(turn.generated) and turn.generated[-1] == account.eos_id)  # a rendered turn ends closed
            observation = account.observation_ids(step["observations"], closed)
            if len(tokens.context) + len(observation) >= setup.max_model_len:
                await env.episode.end(Termination.CONTEXT_LIMIT)
                stop_reason = "length"
                break
            tokens.add(observation)
        response, mask, logprobs = tokens.trained(sampled, account.eos_id)
        outcome = env.episode.result()
        context = RewardContext(outcome, env.episode.task, env.episode.domain.write_tools, phase, stop_reason)
        reward, reward_metrics = await setup.rewards[phase].score(context)
        return TrajectoryRecord(prompt_ids, response, mask, logprobs, reward, stop_reason, outcome, reward_metrics,
                                dict(extras), policy_turns=turns, infra_error=infrastructure_error(outcome, context.fatal_error),
                                verdict=context.verdict, rerendered_turns=rerendered)

CUT_OFF = "the turn reached rollout.max_tokens_per_turn before it ended, so its tool call was not run"


def unfinished(action: str | ParsedTurn, episode: Episode) -> str | ParsedTurn:
    """A turn the token limit cut off: any tool call in it becomes a parse failure (tau2 never runs a call the
    model did not finish; a cut-off string argument would otherwise run as a truncated id). A cut-off turn
    without tool calls goes on as it is."""
    turn = episode.parse(action) if isinstance(action, str) else action
    if not turn.tool_calls and not turn.parse_errors:
        return action
    return ParsedTurn(content=action if isinstance(action, str) else turn.content, parse_errors=(CUT_OFF,))


def episode_row(record: TrajectoryRecord) -> dict[str, object]:
    """The per-trajectory facts SkyRL keeps with eval dumps (`env_metrics`)."""
    return {
        "domain": record.result.domain,
        "task_id": record.result.task_id,
        "test_set": record.extras.get("test_set"),
        "raw_reward": record.raw_reward,
        "reward": record.reward,
        "success": record.success,
        "termination": record.result.termination,
        "turns": record.result.turns,
        "infra_error": record.infra_error,
    }


def rollout_metrics(records: list[TrajectoryRecord]) -> dict[str, float]:
    """The batch's metrics, named by `ctu.metrics`; zeros (never NaN) for an empty batch.

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
        metric(GENERATION, "rerendered_turns"): float(sum(r.rerendered_turns for r in records)),
        metric(REWARD, "parse_failure_rate"): failures / turns if turns else 0.0,
        metric(ENVIRONMENT, "avg_turns"): mean(float(r.result.turns) for r in records),
        metric(ENVIRONMENT, "avg_tool_errors"): mean(float(r.result.tool_errors) for r in records),
        metric(ENVIRONMENT, "evaluation_errors"): float(sum(bool(r.result.evaluation_error) for r in records)),
        metric(ENVIRONMENT, "infra_errors"): float(count - len(valid)),
        metric(ENVIRONMENT, "infra_error_rate"): (count - len(valid)) / count if count else 0.0,
        metric(USER, "errors"): float(sum(bool(r.result.user_error) for r in records)),
    }
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
