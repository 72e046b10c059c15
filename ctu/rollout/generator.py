"""`TauGenerator`: ctu's agent loop over tau-bench episodes, the `ctu.rollout.records.Rollout` every backend runs
(a batch of tasks in, `TrajectoryRecord`s out). Written once here; the backends differ only in the sampler they
give it (SkyRL's trainer reaches it through the SkyRL backend's adapter, `SkyRLGenerator`).

Per trajectory: the episode's prompt is tokenised by the chat-template policy; each policy turn is sampled
(token-in/token-out, or a chat completion with tools for native tool calling on SkyRL, whose sampled token ids
and logprobs vLLM returns; a chat-only sampler, an endpoint `ctu eval` evaluates, answers chat completions in
text mode too), given to the environment, and the observations' tokens are appended with loss mask
0. The loss mask is 1 exactly on the tokens the policy generated. A chat server that returns no token ids gets
its turns re-tokenised through the policy, and the trajectory reports no rollout logprobs (never made-up ones).
The reward is the spec's reward chain for the batch's phase, so a training-only reward cannot reach evaluation.
An episode ended by an infrastructure error (its user simulator or tau2's evaluator failed;
`ctu.rollout.records.infrastructure_error`) is not scored, no judge is asked about it, and its reward is 0 (a
judge marked fatal that fails makes a scored episode one too, with reward 0).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ctu.components.chat_templates.base import reasoning_splitter
from ctu.components.parsers.base import ParsedTurn
from ctu.components.rewards.base import Phase, RewardContext
from ctu.components.user_fault_detectors.base import FinishedEpisode
from ctu.errors import CtuError
from ctu.metrics import TIMING, metric
from ctu.rollout.heap import frozen_heap
from ctu.rollout.loop_load import BUSY_WARNING, LoopLoad, LoopLoadMeter
from ctu.rollout.records import RolloutBatch, TrajectoryRecord, TurnSample, infrastructure_error, rollout_metrics
from ctu.rollout.requests import EpisodeRequest, older_batch, older_episode, sample_indices
from ctu.rollout.sampling import SamplingParams
from ctu.rollout.tokens import TokenAccount
from ctu.rollout.turns import PolicyTurn, TrajectoryTokens, chat_turn, token_turn
from tau_bench_env.env import TauBenchEnv
from tau_bench_env.outcome import EpisodeResult, Termination

if TYPE_CHECKING:
    from ctu.rollout.setup import RolloutSetup

logger = logging.getLogger(__name__)


class TauGenerator:
    """Multi-turn tau-bench rollouts (see the module docstring): ctu's `Rollout`."""

    processes = 1
    """Event loops a batch's episodes are spread over, one per process (`ctu.rollout.processes.ProcessRollout`
    runs several)."""

    def __init__(self, setup: RolloutSetup) -> None:
        self.setup = setup
        self.account = TokenAccount(setup.chat_template, setup.tokenizer)
        self.split_reasoning = reasoning_splitter(setup.chat_template)
        """A thinking template's reasoning splitter, else None (then each prompt extends the last: see `_play`)."""
        self.loop_loads: list[LoopLoad] = []
        """The last batch's load on each event loop that ran its episodes (`batch_records`)."""
        self._warned_busy = False
        self._batches = 0

    async def run_batch(self, requests: Sequence[EpisodeRequest], phase: Phase, step: int, *older: Any) -> RolloutBatch:
        """One episode per request, concurrently, records in input order (`Rollout.run_batch`). Never raises for
        an episode's failure: a failed episode yields an empty, zero-reward record that is an infrastructure error,
        counted in `generation/episode_errors`. Calls `setup.on_episode(len(requests), False)` first and
        `setup.on_records(records, phase, step)` last. A call of the contract before `EpisodeRequest`,
        ``run_batch(prompts, extras, phase, step)``, still runs, with a deprecation warning (`older_batch`).

        Raises:
            ValueError: an older call's prompts and extras differ in length.
        """
        if older or not isinstance(phase, str):
            requests, phase, step = older_batch(requests, phase, step, *older)  # type: ignore[arg-type]
        started = time.perf_counter()
        if self.setup.on_episode is not None:
            self.setup.on_episode(len(requests), False)
        records = await self.batch_records(requests, phase)
        if self.setup.on_records is not None:
            self.setup.on_records(records, phase, step)
        metrics = rollout_metrics(records)
        metrics[metric(TIMING, "generate")] = time.perf_counter() - started
        metrics.update(self._loop_metrics())
        return RolloutBatch(records, metrics)

    def _loop_metrics(self) -> dict[str, float]:
        """``timing/rollout_loop_busy`` of the last batch, the most loaded loop's (`ctu.rollout.loop_load`); warns
        once when a loop was saturated, from the second batch on (a first batch also loads the domains, tools
        and templates: seconds of one-off work on the loop)."""
        if not self.loop_loads:
            return {}
        self._batches += 1
        busiest = max(self.loop_loads, key=lambda load: load.busy)
        if busiest.busy >= BUSY_WARNING and self._batches > 1 and not self._warned_busy:
            self._warned_busy = True
            logger.warning(
                "ctu's rollout event loop was busy %.0f%% of the batch's %.1f s: ctu's CPU, not the policy, paced the "
                "episodes. Spread them over more processes, a core each (rollout.generator.processes, now %d).",
                100 * busiest.busy, busiest.seconds, self.processes)
        return {metric(TIMING, "rollout_loop_busy"): busiest.busy}

    async def batch_records(self, requests: Sequence[EpisodeRequest], phase: Phase,
                            on_record: Callable[[int, TrajectoryRecord], None] | None = None) -> list[TrajectoryRecord]:
        """One record per request, in input order: every episode on this event loop, at most
        `max_concurrent_episodes` at once, the loop's load measured into `loop_loads` (`run_episode` each, a
        request without a sample index numbered by `sample_indices`). As each episode ends, calls
        `on_record(its index, its record)` and `setup.on_episode(len(requests), True)`."""
        self.account.new_batch()
        limit = asyncio.Semaphore(self.setup.max_concurrent_episodes)
        notify = self.setup.on_episode

        async def one(index: int, request: EpisodeRequest) -> TrajectoryRecord:
            async with limit:
                record = await self.run_episode(request, phase)
            if on_record is not None:
                on_record(index, record)
            if notify is not None:
                notify(len(requests), True)
            return record

        numbered = [replace(request, sample=k) for request, k in zip(requests, sample_indices(requests), strict=True)]
        meter = LoopLoadMeter()
        try:
            with frozen_heap():
                return list(await asyncio.gather(*(one(n, request) for n, request in enumerate(numbered))))
        finally:
            self.loop_loads = [meter.stop()]

    def failed_record(self, request: EpisodeRequest, error: str) -> TrajectoryRecord:
        """The record of an episode that could not run (`error` says why): empty, zero reward, an
        infrastructure error."""
        eos = self.account.eos_id if self.account.eos_id is not None else 0
        result = EpisodeResult(request.task.domain, request.task.task_id)
        return TrajectoryRecord([eos], [eos], [0], [0.0], 0.0, "error", result,
                                extras=request.task.extras, error=error, infra_error=f"episode failed: {error}")

    async def run_episode(self, request: EpisodeRequest, phase: Phase, *older: Any) -> TrajectoryRecord:
        """One trajectory; an unexpected failure becomes an empty zero-reward record with `error` set (logged in a
        line when it is a `CtuError`, e.g. an endpoint that stayed down, its traceback at DEBUG; else with its
        traceback).

        A phase sampled with a fixed seed (evaluation) samples repetition k of a task with its `episode_seed`, so
        a task's samples differ and tasks do not share draws; its user simulator samples with the same
        seed (as tau2 seeds agent and user with a trial's seed), and with another on each replay for a user fault
        (`user_seed`), so that a replay meets another customer. A call of the contract before `EpisodeRequest`,
        ``run_episode(prompt, extras, phase, repetition)``, still runs, with a deprecation warning (`older_episode`).
        """
        if not isinstance(request, EpisodeRequest):  # the older contract: (prompt, extras, phase, repetition)
            request, phase = older_episode(request, phase, *older)
        started = time.perf_counter()
        faults = self.setup.user_faults
        replays = 0
        while True:
            try:
                record = await self._episode(request, phase, replays)
            except Exception as exc:  # one broken episode must not end a multi-day run
                if isinstance(exc, CtuError):  # an endpoint that stayed down or answered garbage: a line, not a stack
                    logger.warning("episode %s is an infrastructure error: %s", request.task_key, exc)
                    logger.debug("episode %s failed:\n%s", request.task_key, traceback.format_exc())
                else:
                    logger.error("episode %s failed:\n%s", request.task_key, traceback.format_exc())
                record = self.failed_record(request, f"{type(exc).__name__}: {exc}")
            if record.user_fault is None or faults.action == "keep":
                break
            if faults.action == "retry" and replays < faults.max_retries:  # the customer again, with new samples
                replays += 1
                continue
            record.infra_error = record.infra_error or f"user fault: {record.user_fault}"
            record.reward = 0.0
            break
        record.user_fault_retries = replays
        record.seconds = time.perf_counter() - started
        return record

    async def _episode(self, request: EpisodeRequest, phase: Phase, replay: int) -> TrajectoryRecord:
        # token-in/token-out wherever the sampler can: the policy samples from exactly the ids that are trained on, in
        # native mode too (the tools rendered by the chat template, the family's parser reading the calls). A
        # chat server samples from its own rendering of the history, which can differ from the ids trained on
        # (Qwen3's template drops past turns' empty think blocks; vLLM's tool parser re-serialises call JSON): only
        # a chat-only sampler (an evaluated endpoint) is asked for chats.
        sampler = self.setup.sampler
        session = uuid.uuid4().hex  # the episode's turns, for the sampler's routing (`Sampler.sample`)
        try:
            return await self._play(request, phase, replay, session, sampler.supports_chat and not sampler.supports_tokens)
        finally:
            await sampler.end_session(session)

    async def _play(self, request: EpisodeRequest, phase: Phase, replay: int, session: str, chat_mode: bool) -> TrajectoryRecord:
        """The episode's trajectory (its `replay`-th replay for a user fault), its turns sampled under `session`:
        chat completions if `chat_mode`, else tokens.

        Token mode: each turn is sampled after the ids of the one before, its sampled ids and the observations'
        (one growing sequence, what a whole trajectory trains on; a turn whose ids differ from the template's
        rendering of the conversation so far is counted, `TrajectoryRecord.off_template_turns`), except under a thinking template
        (`split_reasoning`): its turns' reasoning never reaches the conversation, so each prompt is the
        conversation rendered anew, without earlier reasoning. A training episode with `setup.step_wise` records
        each turn's prompt, sampled ids and logprobs as a `TurnSample`."""
        setup = self.setup
        account = self.account
        split = self.split_reasoning
        turn_samples: list[TurnSample] | None = [] if setup.step_wise and phase == "train" and not chat_mode else None
        reasoning: list[str] = []
        sampling, seed = self._seeds(phase, request.task_key, request.sample or 0, replay)
        env = TauBenchEnv(setup.env, request.task, user_seed=seed)
        messages, metadata = await env.ainit(request.prompt)
        native = setup.native_tool_calling
        template_tools = metadata["tools"] if native else None
        prompt_ids = account.prompt_ids(messages, template_tools)
        tokens = TrajectoryTokens(list(prompt_ids))
        stop_reason = "stop"
        sampled = True  # every policy token and logprob came from the sampler (False once a turn is re-rendered)
        rerendered = 0  # turns whose ids the chat template rendered, the sampler having returned none
        off_template: list[int] = []  # turns sampled after ids the template would not render for the conversation
        turns = 0
        done = bool(metadata["done"])
        while not done:
            context = self._context(env, tokens.context, turns, template_tools, chat_mode, off_template)
            budget = setup.max_model_len - len(context)
            if budget <= 0:
                await env.end(Termination.CONTEXT_OVERFLOW)
                stop_reason = "length"
                break
            params = sampling if sampling.max_tokens <= budget else replace(sampling, max_tokens=budget)
            turns += 1
            turn = await self._turn(env, context, params, phase, session, chat_mode)
            rerendered += turn.rendered
            sampled = sampled and not turn.rendered
            if turn_samples is not None:  # a token sampler's turn (never rendered): what it was sent and sampled
                turn_samples.append(TurnSample(list(context), turn.generated, turn.logprobs, [1] * len(turn.generated)))
            stop_reason = turn.stop_reason
            reasoning.append(turn.reasoning)
            tokens.add(turn.generated, turn.logprobs)
            step = await env.astep(unfinished(turn.action, env) if stop_reason == "length" else turn.action)
            if step.done:
                break
            closed = turn.rendered or (bool(turn.generated) and turn.generated[-1] == account.eos_id)  # a rendered turn ends closed
            observation = account.observation_ids(step.observations, closed)
            if split is None and len(tokens.context) + len(observation) >= setup.max_model_len:  # else checked anew above
                await env.end(Termination.CONTEXT_OVERFLOW)
                stop_reason = "length"
                break
            tokens.add(observation)
        record = TrajectoryRecord(prompt_ids, *tokens.trained(sampled, account.eos_id), 0.0, stop_reason, env.result(),
                                  extras=request.task.extras, policy_turns=turns, rerendered_turns=rerendered,
                                  off_template_turns=off_template,
                                  reasoning=reasoning if split is not None or any(reasoning) else [], turn_samples=turn_samples or [])
        return await self._score(record, env, phase)

    def _context(self, env: TauBenchEnv, grown: list[int], turns: int, tools: list[dict[str, object]] | None,
                 chat_mode: bool, off_template: list[int]) -> list[int]:
        """The ids the next policy turn (turn ``turns + 1``) is sampled after: the grown sequence `grown`, or under a
        thinking template the conversation as the template renders it (earlier reasoning left out). A grown sequence
        that differs from the template's rendering of the conversation so far has its turn noted in `off_template`."""
        if not turns:
            return grown
        if self.split_reasoning is not None:
            return self.account.prompt_ids(env.conversation, tools)
        if not chat_mode and self.account.prompt_ids(env.conversation, tools) != grown:
            off_template.append(turns + 1)
        return grown

    def _seeds(self, phase: Phase, task: str, repetition: int, replay: int) -> tuple[SamplingParams, int | None]:
        """The sampling params of repetition `repetition` of the task `task` (``domain/task_id``) in `phase` (a phase
        sampled with a fixed seed samples it with `episode_seed`), and its user simulator's seed on its `replay`-th
        replay (`user_seed`)."""
        sampling = self.setup.sampling[phase]
        if sampling.seed is None:
            return sampling, None
        seed = episode_seed(sampling.seed, task, repetition)
        return replace(sampling, seed=seed), user_seed(seed, replay)

    async def _turn(self, env: TauBenchEnv, context: list[int], params: SamplingParams, phase: Phase, session: str,
                    chat_mode: bool) -> PolicyTurn:
        """The next policy turn of `env`'s episode, under `session`: asked of a chat sampler with the conversation
        (`chat_mode`), else sampled after the ids `context`; its reasoning split off by a thinking template."""
        setup = self.setup
        native = setup.native_tool_calling
        if chat_mode:
            return await chat_turn(setup.sampler, self.account, env.conversation, env.tools if native else None, params,
                                   session, self.split_reasoning)
        return await token_turn(setup.sampler, self.account, context, params, phase, setup.native_parser if native else None,
                                session, self.split_reasoning)

    async def _score(self, record: TrajectoryRecord, env: TauBenchEnv, phase: Phase) -> TrajectoryRecord:
        """`record` of the ended episode in `env` scored by the phase's reward chain and checked by the user-fault
        detectors, unless an infrastructure error ended it (then its reward is 0, no judge or detector asked). A
        training episode that outgrew the context (``context_overflow``) takes `environment.overflow`'s reward, if
        set, and with ``exclude`` trains on none of its tokens."""
        setup = self.setup
        outcome = record.result
        context = RewardContext(outcome, env.task, env.write_tools, phase, record.stop_reason)
        if infrastructure_error(outcome) is None:  # an episode the user simulator or evaluator broke is not scored
            record.reward, record.reward_metrics = await setup.rewards[phase].score(context)
        record.infra_error = infrastructure_error(outcome, context.fatal_error)
        record.verdict = context.verdict
        if record.infra_error is not None:
            record.reward = 0.0
            return record
        if phase == "train" and outcome.termination == Termination.CONTEXT_OVERFLOW.value:
            if setup.overflow_reward is not None:
                record.reward = setup.overflow_reward
            if setup.overflow_exclude:
                record.train_none()
        if setup.user_faults.detectors:
            episode = env.episode
            user_tools = frozenset(tool.name for tool in episode.domain.user_tools or ())
            record.user_fault = await setup.user_faults.check(FinishedEpisode(
                outcome.domain, env.task, tuple(episode.trajectory), outcome.termination, env.write_tools, user_tools))
        return record


REPLAY_SEED_STRIDE = 1_000_003
"""How far apart the user simulator's seeds of an episode's replays are (a prime above any samples-per-task count,
so a replay's seed is never another sample's)."""


SEED_SPACE = 2**31
"""Seeds are taken modulo this (vLLM's and JAX's samplers take any seed below it)."""


def episode_seed(seed: int, task: str, repetition: int) -> int:
    """The seed of repetition `repetition` of the task `task` (``domain/task_id``) in a phase sampled with `seed`:
    seed + a fixed offset of the task (the first 4 bytes of its key's SHA-256) + `repetition`, modulo `SEED_SPACE`.
    A task's repetitions differ (pass^k over them means what it says) and every run draws the same ones (two
    policies' evaluations stay paired episode by episode). The offset keeps tasks apart: one seed for the k-th
    sample of every task gave every task the same random draws, so on tasks alike (one template's) one draw decided
    the k-th sample of them all (the chain's held-out success by sample: 0 of 48 or 41 of 48), and a paired
    interval over tasks counted as independent what was one draw."""
    offset = int.from_bytes(hashlib.sha256(task.encode()).digest()[:4], "big")
    return (seed + offset + repetition) % SEED_SPACE


def user_seed(seed: int, replay: int) -> int:
    """The user simulator's seed in an episode sampled with `seed` (`episode_seed`), on its `replay`-th replay for a
    user fault (0: the first play): the policy's seed on the first play, as tau2 seeds agent and user alike."""
    return (seed + REPLAY_SEED_STRIDE * replay) % SEED_SPACE


CUT_OFF = "the turn reached rollout.max_tokens_per_turn before it ended, so its tool call was not run"


def unfinished(action: str | ParsedTurn, env: TauBenchEnv) -> str | ParsedTurn:
    """A turn the token limit cut off: any tool call in it becomes a parse failure (tau2 never runs a call the
    model did not finish; a cut-off string argument would otherwise run as a truncated id). A cut-off turn
    without tool calls goes on as it is."""
    turn = env.parse(action) if isinstance(action, str) else action
    if not turn.tool_calls and not turn.parse_errors:
        return action
    return ParsedTurn(content=action if isinstance(action, str) else turn.content, parse_errors=(CUT_OFF,))
