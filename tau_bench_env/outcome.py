"""What an episode is run with and what it reports: `EpisodeConfig`, `Termination`, `StepResult` and `EpisodeResult`
(`tau_bench_env.episode.Episode` runs one)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tau2.data_model.message import Message
    from tau2.data_model.simulation import RewardInfo, TerminationReason


class Termination(str, Enum):
    """Why an episode ended; values are the names logged in `environment/termination/<name>`."""

    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_TURNS = "max_turns"
    TOO_MANY_ERRORS = "too_many_errors"
    USER_ERROR = "user_error"
    CONTEXT_OVERFLOW = "context_overflow"
    """The conversation's next prompt would outgrow the model's context (`model.max_model_len`); set by the rollout,
    not by tau2 (``context_limit`` in lines written before 2026-11-29, read as this)."""

    @classmethod
    def _missing_(cls, value: object) -> Termination | None:
        """Earlier names of a termination: ``context_limit`` is `CONTEXT_OVERFLOW`."""
        return cls.CONTEXT_OVERFLOW if value == "context_limit" else None

    def to_tau2(self) -> TerminationReason:
        """The matching `tau2.data_model.simulation.TerminationReason` (max turns is tau2's MAX_STEPS)."""
        from tau2.data_model.simulation import TerminationReason

        return {
            Termination.USER_STOP: TerminationReason.USER_STOP,
            Termination.AGENT_STOP: TerminationReason.AGENT_STOP,
            Termination.MAX_TURNS: TerminationReason.MAX_STEPS,
            Termination.TOO_MANY_ERRORS: TerminationReason.TOO_MANY_ERRORS,
            Termination.USER_ERROR: TerminationReason.USER_ERROR,
            Termination.CONTEXT_OVERFLOW: TerminationReason.MAX_STEPS,
        }[self]


SCORED_ENDINGS = (Termination.USER_STOP, Termination.AGENT_STOP)
"""The terminations tau2's evaluator scores; after any other it gives reward 0, "Simulation terminated prematurely",
checking nothing (`tau2.evaluator.evaluator.evaluate_simulation`)."""


@dataclass
class EpisodeConfig:
    """Episode limits and modes (from the spec's `environment` and `rollout` sections)."""

    max_turns: int = 20
    """Policy turns before the episode ends with `max_turns` (reward 0)."""
    max_errors: int = 10
    """Tool errors plus unparsable or empty turns before the episode ends with `too_many_errors` (reward 0)."""
    native_tool_calling: bool = False
    """Tools go to the policy as OpenAI `tools` (True) or rendered into the system prompt by the parser (False)."""
    evaluate_nl_assertions: bool = False
    """Also score tau2's natural-language assertions (needs tau2's LLM judge)."""
    max_user_tool_rounds: int = 10
    """User tool-call rounds in one user turn before the user is judged broken (`user_error`)."""
    domain_policy: bool = True
    """The system prompt holds the domain's policy (tau2's agent prompt); False leaves it out."""


@dataclass(frozen=True)
class EpisodeResult:
    """How one episode went: what rewards, judges, metrics and trajectory logs read (`Episode.result()`).

    Attributes:
        domain: the domain's name.
        task_id: the task's id.
        turns: policy turns taken.
        termination: why the episode ended (a `Termination` value), None while it runs.
        reward: tau2's reward (0.0 for an episode that did not finish or was not evaluated).
        reward_breakdown: tau2's reward components (``db``, ``communicate``, ...), when it gave them.
        checks: the fraction of each kind of tau2 check the episode passed, for the kinds its evaluation ran
            (`check_scores`); {} for an episode that did not finish or was not evaluated.
        failed_actions: the task's gold actions tau2's action checks found no match for, by tool name, in the task's
            order (`failed_actions`); [] when all matched or none were checked.
        reward_path: ``fast`` (`tau_bench_env.fast_eval`) or ``tau2`` (tau2's `evaluate_simulation`), None when
            the episode was not evaluated.
        tool_errors: the agent's tool calls that returned an error.
        user_tool_errors: the user's tool calls that returned an error (telecom).
        parse_failures: policy turns whose tool call could not be parsed.
        empty_turns: policy turns with neither text nor tool calls.
        user_error: why the user simulator failed, else None.
        evaluation_error: why tau2's evaluator raised, else None. Scored 0 and counted, as tau2 scores it: the
            episode's own state made it raise (`tau_bench_env.evaluation_faults`), unless `evaluator_fault` says why not.
        evaluator_fault: why the episode could not be scored for a reason outside it (tau2's NL-assertion judge
            failed, the task's gold outcome could not be computed, a reward basis the run does not evaluate), else
            None: an infrastructure error, never counted against the policy.
        conversation: the episode in OpenAI format as the policy saw and wrote it (system prompt, greeting,
            turns, tool results): in text mode an assistant turn is its raw text, tool calls included.
        parsed_turns: text mode only: what the parser read in each assistant turn of `conversation` that held a tool
            call or failed to parse, by its index there: ``{"tool_calls": [OpenAI tool calls], "parse_errors":
            [the parser's reasons]}`` (the calls as the parser read them; none when the turn failed). Native mode: {} (the
            conversation's turns carry their `tool_calls`).
        tools: the agent's tools as OpenAI schemas.
        trajectory: the episode as tau2's messages (`AssistantMessage` with parsed `tool_calls`,
            `UserMessage`, `ToolMessage`), what tau2's evaluator scores; the same in text and native mode, so
            whatever reads the agent's tool calls (rewards, judges) reads them here.
    """

    domain: str
    task_id: str
    turns: int = 0
    termination: str | None = None
    reward: float = 0.0
    reward_breakdown: dict[str, float] | None = None
    checks: dict[str, float] = field(default_factory=dict)
    failed_actions: list[str] = field(default_factory=list)
    reward_path: str | None = None
    tool_errors: int = 0
    user_tool_errors: int = 0
    parse_failures: int = 0
    empty_turns: int = 0
    user_error: str | None = None
    evaluation_error: str | None = None
    evaluator_fault: str | None = None
    conversation: list[dict[str, object]] = field(default_factory=list)
    parsed_turns: dict[int, dict[str, object]] = field(default_factory=dict)
    tools: list[dict[str, object]] = field(default_factory=list)
    trajectory: list[Message] = field(default_factory=list)

    @property
    def failed_turns(self) -> int:
        """Policy turns that sent nothing: parse failures and empty turns."""
        return self.parse_failures + self.empty_turns

    def as_dict(self) -> dict[str, object]:
        """The fields as a shallow mapping (SkyRL-gym's step metadata)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def __getstate__(self) -> dict[str, object]:
        """Pickled with its conversation and tau2 messages as one blob of bytes, unpickled when either is first
        read (`__getattr__`): a process that takes in results from rollout workers (`ctu.rollout.processes`)
        mostly reads their counts, and tau2's messages are pydantic models, 0.05 ms of a retail result's 0.12 ms
        to unpickle. A result unpickled and pickled again passes its blob on unread."""
        state = dict(self.__dict__)
        if _MESSAGES not in state:
            state[_MESSAGES] = pickle.dumps((state.pop("conversation"), state.pop("trajectory")),
                                            pickle.HIGHEST_PROTOCOL)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    if not TYPE_CHECKING:  # mypy would take every attribute for one that exists

        def __getattr__(self, name: str) -> object:
            """Only reached for an attribute the result does not hold: an unpickled result's messages, before they
            are first read (see `__getstate__`)."""
            packed = self.__dict__.get(_MESSAGES) if name in ("conversation", "trajectory") else None
            if packed is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            conversation, trajectory = pickle.loads(packed)
            self.__dict__.update(conversation=conversation, trajectory=trajectory)
            self.__dict__.pop(_MESSAGES, None)
            return self.__dict__[name]


_MESSAGES = "_packed_messages"
"""The key of a pickled `EpisodeResult`'s blob of messages in its state, until they are read."""


@dataclass
class StepResult:
    """What one policy turn produced.

    Attributes:
        observations: OpenAI messages for the policy (tool results, the user's reply, or an error); empty when done.
        done: the episode ended.
        reward: the episode's reward when done (tau2's, 0.0 for an unfinished episode), else 0.0.
        result: the episode's `EpisodeResult` when done, else None.
    """

    observations: list[dict[str, object]]
    done: bool
    reward: float = 0.0
    result: EpisodeResult | None = None


CHECK_KINDS = ("db", "env_assertions", "actions", "communicate", "nl_assertions")
"""The kinds of check tau2's evaluator runs (`RewardInfo`): the final database against the gold one, the task's
environment assertions, its gold actions, the information the agent must communicate, NL assertions (LLM-judged)."""
CHECK_BASIS = {"db": "DB", "env_assertions": "ENV_ASSERTION", "actions": "ACTION", "communicate": "COMMUNICATE",
               "nl_assertions": "NL_ASSERTION"}
"""Each of `CHECK_KINDS` by the name of tau2's reward basis that runs it (`tau2.data_model.tasks.RewardType`)."""


def check_scores(info: RewardInfo) -> dict[str, float]:
    """The fraction of each kind of check in `info` that passed (`CHECK_KINDS`), for the kinds it holds: ``db`` when
    the task's reward basis includes the database (1.0 or 0.0), the others when it has at least one such check."""
    basis = {str(getattr(kind, "value", kind)) for kind in info.reward_basis or []}
    scores: dict[str, float] = {}
    if info.db_check is not None and "DB" in basis:
        scores["db"] = 1.0 if info.db_check.db_match else 0.0
    for kind, passed in (("env_assertions", [check.met for check in info.env_assertions or []]),
                         ("actions", [check.action_match for check in info.action_checks or []]),
                         ("communicate", [check.met for check in info.communicate_checks or []]),
                         ("nl_assertions", [check.met for check in info.nl_assertions or []])):
        if passed:
            scores[kind] = sum(passed) / len(passed)
    return scores


def failed_actions(info: RewardInfo) -> list[str]:
    """The tool names of the gold actions in `info` that tau2's action checks found no match for (``action_match``
    False), in the task's order."""
    return [check.action.name for check in info.action_checks or [] if not check.action_match]


def reward_breakdown(info: RewardInfo) -> dict[str, float] | None:
    """tau2's reward components in `info` by their reward basis's name (``DB``, ``COMMUNICATE``, ...), None when it
    gave none."""
    if not info.reward_breakdown:
        return None
    return {str(getattr(kind, "value", kind)): value for kind, value in info.reward_breakdown.items()}
