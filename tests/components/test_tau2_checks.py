"""`tau2_checks`, tau2's dense reward: the fraction of each kind of tau2 check an episode passed, read from tau2's
own evaluation of real episodes (a gold replay, spoiled replays, an episode cut off), weighted and renormalised over
the kinds the task has, in training only."""

from __future__ import annotations

import asyncio

import pytest

from ctu.components.parsers.hermes import HermesParser
from ctu.components.rewards.base import RewardContext
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.composition import build_components
from ctu.registry import registry
from ctu.spec import spec_from_dict
from tau_bench_env.env import shared_domain
from tau_bench_env.episode import Episode
from tau_bench_env.outcome import EpisodeConfig, EpisodeResult, check_scores
from tau_bench_env.replay import Corruption, GoldReplayAgent, effective_writes, play

RETAIL = shared_domain("retail")


def replay(task_id: str, corruption: Corruption | None = None, max_turns: int = 80) -> tuple[Episode, EpisodeResult]:
    task = RETAIL.task(task_id)
    episode = Episode(RETAIL, task, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=max_turns, max_errors=50))
    agent = GoldReplayAgent(task, corruption, effective_writes(RETAIL.episode_environment(task), task))
    return episode, asyncio.run(play(episode, agent))


def reward(result: EpisodeResult, phase: str = "train", **params: float) -> float:
    info = registry.rewards.get("tau2_checks")
    component = info.build(info.params_model(**params))
    return asyncio.run(component.apply(result.reward, RewardContext(result, RETAIL.task(result.task_id), RETAIL.write_tools, phase)))


def test_the_checks_are_tau2s_own_and_a_gold_replay_passes_them_all():
    episode, result = replay("0")
    assert result.reward == 1.0
    assert set(result.checks) >= {"db", "actions"} and set(result.checks.values()) == {1.0}
    # the tau2 path (evaluate_simulation on the recorded trajectory) finds the same fractions as the fast path
    tau2 = RETAIL.evaluate(episode.simulation_run(), episode.task, False)
    assert check_scores(tau2) == result.checks
    assert reward(result) == pytest.approx(1.0 + 0.25)


def test_a_near_miss_gets_the_share_of_the_checks_it_passed():
    _, result = replay("0", Corruption.MISSING_ACTION)
    assert result.reward == 0.0
    actions = result.checks["actions"]
    assert 0.0 < actions < 1.0 and result.checks["db"] == 0.0
    # defaults: actions 0.5, environment assertions 0.35, communicate 0.15, database 0: over the kinds present
    weights = {"actions": 0.5, "env_assertions": 0.35, "communicate": 0.15}
    present = {kind: weight for kind, weight in weights.items() if kind in result.checks}
    share = sum(weight * result.checks[kind] for kind, weight in present.items()) / sum(present.values())
    assert reward(result) == pytest.approx(0.25 * share)
    assert reward(result, alpha=1.0, actions=1.0, env_assertions=0.0, communicate=0.0) == pytest.approx(actions)
    assert reward(result, alpha=1.0, actions=0.0, env_assertions=0.0, communicate=0.0, db=1.0) == 0.0
    assert reward(result, alpha=1.0, actions=0.0, env_assertions=0.0, communicate=0.0) == 0.0  # no weighted kind


def test_an_episode_cut_off_has_no_checks_and_gets_nothing():
    _, result = replay("0", max_turns=2)
    assert result.termination == "max_turns" and result.checks == {}
    assert reward(result, alpha=1.0) == 0.0


def test_evaluation_never_sees_it(minimal):
    minimal["rewards"] = ["tau_outcome", {"type": "tau2_checks", "alpha": 0.5}]
    rewards = build_components(spec_from_dict(minimal).spec).rewards
    assert [name for name, _ in rewards["train"].components] == ["tau_outcome", "tau2_checks"]
    assert [name for name, _ in rewards["eval"].components] == ["tau_outcome"]
