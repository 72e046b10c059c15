"""The shipped gold-solution limits agree with the installed tau2, and mean what the spec check says they mean."""

from __future__ import annotations

import asyncio

import pytest

from tau_bench_env.gold_limits import gold_limits, gold_needs, gold_solution


@pytest.mark.parametrize("name", ["retail", "airline", "mock"])
def test_the_shipped_limits_equal_the_gold_runs_of_the_installed_tau2(name):
    from tau_bench_env.env import shared_domain

    domain = shared_domain(name)
    shipped = gold_limits()[name]
    assert shipped["splits"] == {split: [task.id for task in domain.tasks(split)] for split in domain.splits}
    live = {task.id: list(gold_solution(domain, task)) for split in domain.splits for task in domain.tasks(split)}
    assert shipped["tasks"] == live


def test_telecoms_splits_and_a_sample_of_its_tasks_agree():
    from tau_bench_env.env import shared_domain

    domain = shared_domain("telecom")
    shipped = gold_limits()["telecom"]
    assert shipped["splits"] == {split: [task.id for task in domain.tasks(split)] for split in domain.splits}
    for task in domain.tasks("small"):
        assert shipped["tasks"][task.id] == list(gold_solution(domain, task))


def test_airline_task_44_needs_21_turns_which_its_gold_replay_confirms():
    from ctu.components.parsers.hermes import HermesParser
    from ctu.components.user_simulators.scripted import ScriptedUserSimulator
    from tau_bench_env.env import shared_domain
    from tau_bench_env.episode import Episode
    from tau_bench_env.outcome import EpisodeConfig
    from tau_bench_env.replay import GoldReplayAgent, play

    assert ("44", 21, 0) in gold_needs("airline", "test")
    domain = shared_domain("airline")
    task = domain.task("44")

    def replay(max_turns: int):
        episode = Episode(domain, task, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=max_turns))
        return asyncio.run(play(episode, GoldReplayAgent(task)))

    cut, solved = replay(20), replay(21)
    assert cut.termination == "max_turns" and cut.reward == 0.0
    assert solved.termination != "max_turns" and solved.reward == 1.0 and solved.turns == 21


def test_a_source_outside_the_file_has_no_limits():
    assert gold_needs("airline", "no-such-split") is None and gold_needs("healthcare", "train") is None
    assert [task for task, _, _ in gold_needs("retail", "train", max_tasks=3)] == gold_limits()["retail"]["splits"]["train"][:3]
