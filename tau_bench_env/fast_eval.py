"""The fast reward path: tau2's reward of a finished episode without replaying it into new environments.

tau2's `evaluate_simulation` rebuilds two environments from JSON for every trajectory, replays the whole
trajectory into one and the task's gold actions into the other, and compares their database hashes. Both
replays are avoidable: the gold outcome of a task is deterministic, so its database hashes are computed once
per task per process (`GoldOutcomes`); and the episode's own environment already holds the final state a
replay would rebuild, so it is compared directly (by its touched records when its database is copy-on-access,
`tau_bench_env.overlay`; otherwise by tau2's hashes). The action, communication and combination rules are
tau2's own evaluators (`ActionEvaluator`, `CommunicateEvaluator`), called as `evaluate_simulation` calls them;
the parity suite (tests/env/test_gold_replay.py) checks the result equals `evaluate_simulation` on every case.

NL assertions need tau2's LLM judge: episodes that ask for them take tau2's own path.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tau_bench_env.evaluation_faults import GoldOutcomeError
from tau_bench_env.runtime import prepare

if TYPE_CHECKING:
    from tau2.data_model.message import Message
    from tau2.data_model.simulation import DBCheck, EnvAssertionCheck, RewardInfo
    from tau2.data_model.tasks import RewardType, Task
    from tau2.environment.environment import Environment

    from tau_bench_env.domains import Domain


def checks_database(task: Task) -> bool:
    """Whether the task's reward compares the final database with its gold one (it has gold actions or
    environment assertions), as tau2's `EnvironmentEvaluator` decides."""
    criteria = task.evaluation_criteria
    return criteria is not None and (criteria.actions is not None or criteria.env_assertions is not None)


class GoldOutcomes:
    """Each task's gold final state, computed once per task and kind of environment (thread-safe).

    For an episode over a copy-on-access database (`tau_bench_env.overlay`) the gold state is kept as its
    touched records (`DatabaseState`); otherwise as tau2's database hashes.
    """

    def __init__(self) -> None:
        self._states: dict[tuple[str, bool], Any] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every gold state computed so far (a benchmark times the first computation of each)."""
        with self._lock:
            self._states.clear()

    def _gold_environment(self, domain: Domain, task: Task, overlay: bool) -> Environment:
        """An environment of the task's domain after its initial state and gold actions, as tau2's
        `EnvironmentEvaluator` builds its gold environment (gold actions that fail are skipped, as there)."""
        environment = domain.episode_environment(task)  # as an episode of the task starts
        state = task.initial_state
        environment.set_state(
            initialization_data=state.initialization_data if state is not None else None,
            initialization_actions=state.initialization_actions if state is not None else None,
            message_history=list(state.message_history or []) if state is not None else [],
        )
        for action in task.evaluation_criteria.actions or []:
            try:
                environment.make_tool_call(tool_name=action.name, requestor=action.requestor, **action.arguments)
            except Exception:  # tau2 logs and skips a failing gold action
                pass
        return environment

    def _state(self, domain: Domain, task: Task, overlay: bool) -> Any:
        key = (task.id, overlay)
        with self._lock:
            if key in self._states:
                return self._states[key]
        try:
            environment = self._gold_environment(domain, task, overlay)
            if overlay:
                result: Any = environment.tools.db.state()
            else:
                result = (environment.get_db_hash(), environment.get_user_db_hash())
        except Exception as exc:  # the task's or the domain's fault, never an episode's
            raise GoldOutcomeError(f"task {task.id!r}: its gold final state could not be computed") from exc
        with self._lock:
            self._states[key] = result
        return result

    def warm(self, domain: Domain, task: Task, environment: Environment) -> None:
        """Compute now the gold state that `matches` will compare `environment` with at the episode's end (a
        no-op when the task has no database criteria or the state is known). Called at an episode's reset,
        while its first requests are in flight: a batch's last wave (every episode's reward at once) then does
        not also pay for the gold states of its new tasks (~1 ms each on retail). A failure here is left for
        `matches` to raise at the end, where the episode records it as an infrastructure error (`GoldOutcomeError`)."""
        if not checks_database(task):
            return
        try:
            self._state(domain, task, overlay=self._compares_records(environment))
        except Exception:  # raised again by `matches` at the end (see above)
            pass

    @staticmethod
    def _compares_records(environment: Environment) -> bool:
        """Whether `environment`'s final state is compared by touched records (a copy-on-access database and no
        user database) rather than by tau2's hashes."""
        from tau_bench_env.overlay import OverlayDatabase

        database = environment.tools.db if environment.tools is not None else None
        return isinstance(database, OverlayDatabase) and environment.user_tools is None

    def hashes(self, domain: Domain, task: Task) -> tuple[str | None, str | None]:
        """``(agent_db_hash, user_db_hash)`` of the task's gold final state (tau2's hashes)."""
        return self._state(domain, task, overlay=False)

    def matches(self, domain: Domain, task: Task, environment: Environment) -> bool:
        """Whether `environment` (an episode's, in its final state) holds the task's gold final state: its
        agent and user databases equal the gold ones, as tau2's hash comparison decides."""
        if self._compares_records(environment):
            return self._state(domain, task, overlay=True).matches(environment.tools.db)
        gold_agent, gold_user = self.hashes(domain, task)
        return environment.get_db_hash() == gold_agent and environment.get_user_db_hash() == gold_user


def fast_reward(domain: Domain, task: Task, environment: Environment, messages: list[Message], finished: bool) -> RewardInfo:
    """tau2's reward for an episode whose final state is `environment` and whose trajectory is `messages`.

    Args:
        domain: the domain (its `gold_outcomes` cache and `make_environment`).
        task: the task.
        environment: the episode's live tau2 environment, in its final state (read, not changed, except by
            running the task's environment assertions, which tau2 also runs on its replayed environment).
        messages: the episode's tau2 messages.
        finished: the episode ended by the agent's or the user's stop (otherwise the reward is 0, as in tau2).

    Raises:
        ValueError: NL assertions are part of the task's reward basis (tau2's evaluator must judge them).
    """
    prepare()
    from tau2.data_model.simulation import RewardInfo
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    if not finished:
        return RewardInfo(reward=0.0, reward_basis=None, info={"note": "Simulation terminated prematurely."})
    criteria = task.evaluation_criteria
    if criteria is None:
        return RewardInfo(reward=1.0, reward_basis=None, info={"note": "No evaluation criteria"})
    state = _state_reward(domain, task, environment)
    action = ActionEvaluator.calculate_reward(task=task, full_trajectory=messages)
    communicate = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=messages)
    basis = set(criteria.reward_basis)
    if RewardType.NL_ASSERTION in basis:
        raise ValueError("NL assertions are part of the reward basis; use tau2's evaluator (evaluate_nl_assertions)")
    reward, breakdown = 1.0, dict[RewardType, float]()
    for kinds, part, part_breakdown in (({RewardType.DB, RewardType.ENV_ASSERTION}, state.reward, state.breakdown),
                                        ({RewardType.ACTION}, action.reward, action.reward_breakdown),
                                        ({RewardType.COMMUNICATE}, communicate.reward, communicate.reward_breakdown)):
        if basis & kinds:  # tau2's `evaluate_simulation`: the product of the basis's parts, their breakdowns merged
            breakdown.update(part_breakdown or {})
            reward *= part
    return RewardInfo(
        reward=reward,
        db_check=state.db_check,
        env_assertions=state.assertion_checks,
        action_checks=action.action_checks,
        communicate_checks=communicate.communicate_checks,
        reward_basis=criteria.reward_basis,
        reward_breakdown=breakdown,
        info={"path": "fast"},
    )


@dataclass
class _StateReward:
    """The environment part of tau2's reward: the database check, the environment assertions, their product over
    the task's reward basis and its breakdown."""

    reward: float
    breakdown: dict[RewardType, float]
    db_check: DBCheck
    assertion_checks: list[EnvAssertionCheck]


def _state_reward(domain: Domain, task: Task, environment: Environment) -> _StateReward:
    """As tau2's `EnvironmentEvaluator`, with the database compared against the cached gold state."""
    from tau2.data_model.simulation import DBCheck, EnvAssertionCheck
    from tau2.data_model.tasks import RewardType

    if not checks_database(task):
        return _StateReward(1.0, {}, DBCheck(db_match=True, db_reward=1.0), [])
    criteria = task.evaluation_criteria
    assert criteria is not None
    db_match = domain.gold_outcomes.matches(domain, task, environment)
    db_check = DBCheck(db_match=db_match, db_reward=1.0 if db_match else 0.0)
    checks = []
    for assertion in criteria.env_assertions or []:
        met = environment.run_env_assertion(assertion, raise_assertion_error=False)
        checks.append(EnvAssertionCheck(env_assertion=assertion, met=met, reward=1.0 if met else 0.0))
    assertion_reward = math.prod((check.reward for check in checks), start=1.0)
    reward, breakdown = 1.0, {}
    if RewardType.DB in criteria.reward_basis:
        breakdown[RewardType.DB] = db_check.db_reward
        reward *= db_check.db_reward
    if RewardType.ENV_ASSERTION in criteria.reward_basis:
        breakdown[RewardType.ENV_ASSERTION] = assertion_reward
        reward *= assertion_reward
    return _StateReward(reward, breakdown, db_check, checks)
