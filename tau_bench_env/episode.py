"""One tau-bench episode: the policy's turns against a tau2 environment and a simulated user.

The episode follows tau2's orchestrator (`tau2.orchestrator.Orchestrator`): tau2's greeting opens, the user
answers, then each policy turn is either tool calls (run against the episode's own database, results back to
the policy) or text (sent to the user, whose reply is the next observation; the user may first run tools of
their own, as in telecom). It ends as tau2 ends episodes: the user's ###STOP###, ###TRANSFER### or
###OUT-OF-SCOPE###, the agent's ###STOP###, `max_turns` policy turns, `max_errors` errors, or a user simulator
that failed (`user_error`). The reward is tau2's: for tau2's domains by the fast path (`fast_eval`: the
episode's own final state against each task's cached gold state, tau2's action and communication evaluators),
otherwise tau2's `evaluate_simulation` of the recorded trajectory; an episode that did not finish scores 0, and so
does one whose own state made tau2's evaluator raise, as tau2 scores it (`evaluation_faults` says when such an
exception is not the policy's).

Two records are kept: `trajectory`, tau2 messages exactly as tau2 would record them (what the evaluator
replays), and `conversation`, the OpenAI-format messages the policy saw and wrote (what is trained on and
logged). A turn whose tool call could not be parsed, or that is empty, never reaches the user or the
environment: the policy gets an error observation and the turn counts as an error.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

from tau_bench_env.evaluation_faults import describe, outside_fault, unevaluated_basis
from tau_bench_env.interfaces import ParsedTurn, Parser, UserSimulator, UserSimulatorError
from tau_bench_env.messages import conversation_to_openai, to_openai
from tau_bench_env.outcome import (
    SCORED_ENDINGS,
    EpisodeConfig,
    EpisodeResult,
    StepResult,
    Termination,
    check_scores,
    failed_actions,
    reward_breakdown,
)
from tau_bench_env.prompts import GREETING, episode_system_prompt
from tau_bench_env.runtime import prepare
from tau_bench_env.tool_calls import tool_response

if TYPE_CHECKING:
    from tau2.data_model.message import Message
    from tau2.data_model.simulation import RewardInfo, SimulationRun
    from tau2.data_model.tasks import Task
    from tau2.environment.environment import Environment

    from tau_bench_env.domains import Domain

AGENT_STOP = "###STOP###"
STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
USER_STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)
"""tau2's user stop tokens (`tau2.user.base`): any of them in the user's text ends the episode."""


class Episode:
    """One task, played out. Use `await reset()`, then `await step(turn)` until `done`.

    Args:
        domain: the domain component (environment factory, tasks, evaluation).
        task: the tau2 task.
        user: the user simulator.
        parser: parses the policy's text into tool calls (text mode; in native mode it only renders nothing).
        config: limits and modes.
        user_seed: the seed the user simulator samples with (`UserSimulator.session`), None for unseeded.
    """

    def __init__(self, domain: Domain, task: Task, user: UserSimulator, parser: Parser, config: EpisodeConfig, *,
                 user_seed: int | None = None) -> None:
        prepare()
        self.domain = domain
        self.task = task
        self.user = user
        self.parser = parser
        self.config = config
        self.user_seed = user_seed
        self.trajectory: list[Message] = []
        self.conversation: list[dict[str, object]] = []
        self.parsed_turns: dict[int, dict[str, object]] = {}
        """Text mode: what the parser read in each turn of `conversation` holding a tool call (`EpisodeResult`)."""
        self.tools: list[dict[str, object]] = []
        self.turns = 0
        self.tool_errors = 0
        self.user_tool_errors = 0
        self.parse_failures = 0
        self.empty_turns = 0
        self.user_error: str | None = None
        self.termination: Termination | None = None
        self.reward = 0.0
        self.reward_info: RewardInfo | None = None
        self.evaluation_error: str | None = None
        self.evaluator_fault: str | None = None
        self.reward_path: str | None = None
        self._env: Environment | None = None
        self._session: Any = None
        self._started = 0.0

    @property
    def done(self) -> bool:
        """The episode has ended."""
        return self.termination is not None

    @property
    def environment(self) -> Environment:
        """The episode's own tau2 environment.

        Raises:
            RuntimeError: before `reset`.
        """
        if self._env is None:
            raise RuntimeError("the episode has no environment before reset()")
        return self._env

    @property
    def errors(self) -> int:
        """Errors counted against `max_errors`: the agent's and the user's tool errors (tau2's orchestrator counts
        both), and the policy's parse failures and empty turns (which tau2's agents cannot make)."""
        return self.tool_errors + self.user_tool_errors + self.parse_failures + self.empty_turns

    def system_prompt(self) -> str:
        """tau2's agent system prompt for this domain (its policy left empty when `config.domain_policy` is off),
        with the tools rendered by the parser in text mode."""
        return episode_system_prompt(self.environment.get_policy(), self.parser, self.tools, self.config)

    async def reset(self) -> list[dict[str, object]]:
        """Build a fresh environment, apply the task's initial state and get the user's opening message (for a
        task without a message history, asked for first: the environment is built while the request is in flight).

        Returns:
            The policy's prompt: system prompt, tau2's greeting and the user's first message (OpenAI format).
            `tools` then holds the OpenAI tool schemas. If the user ends the call at once, `done` is True.
        """
        from tau2.data_model.message import AssistantMessage

        self._started = time.time()
        if not self.domain.ready:
            await asyncio.to_thread(self.domain.warm_up)
        self.tools = self.domain.tool_schemas
        self._session = self.user.session(self.task, self.domain.user_tools, self.trajectory, seed=self.user_seed)
        state = self.task.initial_state
        history = list(state.message_history or []) if state is not None else []
        opening = None
        if not history:
            opener = AssistantMessage(role="assistant", content=GREETING)
            self.trajectory.append(opener)
            opening = asyncio.ensure_future(self._session.reply(opener))
        try:
            if opening is not None:
                # The user's opening is on its way before the environment is built: the first yield lets its
                # request start, the second puts this episode behind every other starting episode's request in
                # the event loop's queue. When a batch starts all its episodes at once, their environment work
                # then runs while the openings are in flight instead of delaying the later openings by all of it.
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            self._env = await self._environment_work(self.domain.episode_environment, self.task)
            await self._environment_work(
                self._env.set_state,
                initialization_data=state.initialization_data if state is not None else None,
                initialization_actions=state.initialization_actions if state is not None else None,
                message_history=history,
            )
            if self._fast_reward:
                await self._environment_work(self.domain.gold_outcomes.warm, self.domain, self.task, self._env)
        except BaseException:
            if opening is not None and not opening.cancel() and not opening.cancelled():
                opening.exception()  # it had already failed: retrieved, so asyncio does not log it as never retrieved
            raise
        self.conversation = [{"role": "system", "content": self.system_prompt()}]
        self.parsed_turns = {}
        if history:
            self.trajectory.extend(history)
            self.conversation += conversation_to_openai(history)
            if history[-1].role == "user":
                return list(self.conversation)
            opener = history[-1]
        else:
            self.conversation += to_openai(opener)
        self.conversation += await self._user_turn(opener, opening)
        return list(self.conversation)

    @property
    def _fast_reward(self) -> bool:
        """Whether the reward takes the fast path (`tau_bench_env.fast_eval`) rather than tau2's evaluator."""
        return self.domain.fast_path and not self.config.evaluate_nl_assertions

    async def _environment_work(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run environment work: in the event loop for a domain with cheap environments (copy-on-access or
        copied databases: a reset, a reward or a state comparison costs a millisecond or less there, about a
        thread hop and its contention for the GIL), in a worker thread otherwise (tau2's environments load JSON
        databases and hash them whole)."""
        if self.domain.cheap_environments:
            return function(*args, **kwargs)
        return await asyncio.to_thread(function, *args, **kwargs)

    async def _user_turn(self, message: Message, sent: asyncio.Future[Message] | None = None) -> list[dict[str, object]]:
        """Send `message` to the user (or take `sent`, the user's reply to it already asked for); run the user's
        own tool calls; return the user's text as observations."""
        from tau2.data_model.message import MultiToolMessage

        for _ in range(self.config.max_user_tool_rounds):
            try:
                reply = await (sent if sent is not None else self._session.reply(message))
                sent = None
                reply.validate()
            except (UserSimulatorError, ValueError) as exc:
                self.user_error = str(exc)
                await self._finish(Termination.USER_ERROR)
                return []
            self.trajectory.append(reply)
            if not reply.is_tool_call():
                if any(token in (reply.content or "") for token in USER_STOP_TOKENS):
                    await self._finish(Termination.USER_STOP)
                    return []
                return to_openai(reply)
            results = [tool_response(self.environment, call) for call in reply.tool_calls]
            self.user_tool_errors += sum(result.error for result in results)
            self.trajectory.extend(results)
            message = results[0] if len(results) == 1 else MultiToolMessage(role="tool", tool_messages=results)
        self.user_error = f"the user made tool calls {self.config.max_user_tool_rounds} times without replying"
        await self._finish(Termination.USER_ERROR)
        return []

    def parse(self, text: str) -> ParsedTurn:
        """The policy's text as a `ParsedTurn`, through the episode's parser (never raises)."""
        return self.parser.parse(text)

    async def step(self, action: str | ParsedTurn) -> StepResult:
        """Play one policy turn.

        Args:
            action: the policy's raw text (text mode: parsed here), or an already-parsed turn (native mode:
                the structured tool calls of an OpenAI-style response, with its text as `content`).

        Raises:
            RuntimeError: the episode is already done or was never reset.
        """
        if self._env is None or self.done:
            raise RuntimeError("step() on an episode that is done or was not reset")
        turn = self.parse(action) if isinstance(action, str) else action
        raw = action if isinstance(action, str) else None
        self.turns += 1
        observations = await self._play(turn, raw)
        if not self.done and self.errors >= self.config.max_errors:
            await self._finish(Termination.TOO_MANY_ERRORS)
        if not self.done and self.turns >= self.config.max_turns:
            await self._finish(Termination.MAX_TURNS)
        if self.done:
            return StepResult([], True, self.reward, self.result())
        self.conversation += observations
        return StepResult(observations, False)

    async def _play(self, turn: ParsedTurn, raw: str | None) -> list[dict[str, object]]:
        from tau2.data_model.message import AssistantMessage
        from tau2.data_model.message import ToolCall as Tau2ToolCall

        if turn.is_parse_failure or (not turn.tool_calls and not turn.content.strip()):
            if turn.is_parse_failure:
                self.parse_failures += 1
                problem = "your tool call could not be parsed: " + "; ".join(turn.parse_errors)
            else:
                self.empty_turns += 1
                problem = "your message was empty"
            self.conversation.append({"role": "assistant", "content": raw if raw is not None else turn.content})
            # text mode: the parser's reasons beside the text, also for a turn parsed before it came (the token limit
            # cut it off: `ctu.rollout.generator.unfinished`, whose content is the raw text)
            if turn.is_parse_failure and (raw is not None or not self.config.native_tool_calling):
                self.parsed_turns[len(self.conversation) - 1] = {"tool_calls": [], "parse_errors": list(turn.parse_errors)}
            error_id = f"error_{self.turns}"
            return [{"role": "tool", "tool_call_id": error_id, "content": f"Error: {problem}. Nothing was sent."}]
        if turn.tool_calls:
            calls = [
                Tau2ToolCall(id=f"call_{self.turns}_{i}", name=call.name, arguments=dict(call.arguments), requestor="assistant")
                for i, call in enumerate(turn.tool_calls)
            ]
            message = AssistantMessage(role="assistant", content=turn.content or None, tool_calls=calls)
            if AGENT_STOP in turn.content:
                # tau2's orchestrator never runs the calls of a turn that stops; the trajectory keeps the turn's
                # words only, so tau2's evaluator (which replays the trajectory's calls) sees what really ran
                self.trajectory.append(AssistantMessage(role="assistant", content=turn.content))
                self.conversation.append(self._policy_message(message, raw))
                await self._finish(Termination.AGENT_STOP)
                return []
            self.trajectory.append(message)
            self.conversation.append(self._policy_message(message, raw))
            results = [tool_response(self.environment, call) for call in calls]
            self.tool_errors += sum(result.error for result in results)
            self.trajectory.extend(results)
            return [item for result in results for item in to_openai(result)]
        message = AssistantMessage(role="assistant", content=turn.content)
        self.trajectory.append(message)
        self.conversation.append(self._policy_message(message, raw))
        if AGENT_STOP in turn.content:
            await self._finish(Termination.AGENT_STOP)
            return []
        return await self._user_turn(message)

    def _policy_message(self, message: Message, raw: str | None) -> dict[str, object]:
        """The assistant turn as the policy wrote it: its raw text (text mode; a turn with tool calls has them noted,
        parsed, in `parsed_turns` at its index) or structured calls (native)."""
        if raw is None:
            return to_openai(message)[0]
        calls = to_openai(message)[0].get("tool_calls")
        if calls:
            self.parsed_turns[len(self.conversation)] = {"tool_calls": calls, "parse_errors": []}
        return {"role": "assistant", "content": raw}

    async def end(self, termination: Termination) -> None:
        """End the episode from outside (e.g. `CONTEXT_OVERFLOW`); a no-op when it has already ended."""
        await self._finish(termination)

    async def _finish(self, termination: Termination) -> None:
        if self.termination is not None:
            return
        self.termination = termination
        if termination in SCORED_ENDINGS:
            self.evaluator_fault = unevaluated_basis(self.task, self.config.evaluate_nl_assertions)
            if self.evaluator_fault is not None:
                self.reward = 0.0
                return
            try:
                if self._fast_reward:
                    from tau_bench_env.fast_eval import fast_reward

                    self.reward_path = "fast"
                    info = await self._environment_work(
                        fast_reward, self.domain, self.task, self._env, list(self.trajectory), True
                    )
                else:
                    self.reward_path = "tau2"
                    info = await asyncio.to_thread(
                        self.domain.evaluate, self.simulation_run(), self.task, self.config.evaluate_nl_assertions
                    )
                self.reward_info = info
                self.reward = float(info.reward)
            except Exception as exc:  # scored 0 as tau2 scores it; an infrastructure error only when not the policy's
                self.evaluation_error = describe(exc)
                self.evaluator_fault = outside_fault(exc)
                self.reward = 0.0
        else:
            self.reward = 0.0

    def simulation_run(self) -> SimulationRun:
        """The episode as a tau2 `SimulationRun` (what tau2's evaluator takes).

        Raises:
            RuntimeError: the episode has not ended.
        """
        from tau2.data_model.simulation import SimulationRun

        if self.termination is None:
            raise RuntimeError("the episode has not ended")
        now = time.time()
        return SimulationRun(
            id=str(uuid.uuid4()),
            task_id=self.task.id,
            start_time=str(self._started),
            end_time=str(now),
            duration=now - self._started,
            termination_reason=self.termination.to_tau2(),
            messages=list(self.trajectory),
        )

    def result(self) -> EpisodeResult:
        """The episode so far as an `EpisodeResult` (final once `done`)."""
        return EpisodeResult(
            domain=self.domain.name,
            task_id=self.task.id,
            turns=self.turns,
            termination=self.termination.value if self.termination else None,
            reward=self.reward,
            reward_breakdown=reward_breakdown(self.reward_info) if self.reward_info is not None else None,
            checks=check_scores(self.reward_info) if self.reward_info is not None else {},
            failed_actions=failed_actions(self.reward_info) if self.reward_info is not None else [],
            reward_path=self.reward_path,
            tool_errors=self.tool_errors,
            user_tool_errors=self.user_tool_errors,
            parse_failures=self.parse_failures,
            empty_turns=self.empty_turns,
            user_error=self.user_error,
            evaluation_error=self.evaluation_error,
            evaluator_fault=self.evaluator_fault,
            conversation=list(self.conversation),
            parsed_turns=dict(self.parsed_turns),
            tools=list(self.tools),
            trajectory=list(self.trajectory),
        )
