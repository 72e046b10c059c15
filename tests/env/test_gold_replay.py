"""Gold replays of every retail, airline and telecom (base) task score 1.0 through `Episode` with the scripted
user; corrupted replays score 0.0; and on every trajectory ctu's reward (the fast path) equals tau2's own
`evaluate_simulation` (the parity suite).

The suite plays every case once (a module fixture, spread over two processes) and the tests assert over the
results, so every mismatch is reported at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
from dataclasses import dataclass

import pytest

DOMAINS = ("retail", "airline", "telecom")
CORRUPT_EVERY = 2
"""Corrupted variants are played for every second task of retail and airline."""
CUT_EVERY = 4
"""A max-turns cut is played for every fourth task of each domain."""


@dataclass(frozen=True)
class Case:
    domain: str
    task_id: str
    variant: str
    reward: float
    tau2_reward: float
    termination: str
    turns: int
    evaluation_error: str | None
    reward_path: str | None


async def _run_case(domain_name, task, variant, corruption, writes, max_turns) -> Case:
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    from ctu.components.parsers.hermes import HermesParser
    from ctu.components.user_simulators.scripted import ScriptedUserSimulator
    from tau_bench_env.env import shared_domain
    from tau_bench_env.episode import Episode, EpisodeConfig
    from tau_bench_env.replay import GoldReplayAgent, play

    domain = shared_domain(domain_name)
    config = EpisodeConfig(max_turns=max_turns, max_errors=50)
    episode = Episode(domain, task, ScriptedUserSimulator(), HermesParser(), config)
    info = await play(episode, GoldReplayAgent(task, corruption, writes))
    # tau2's own evaluator on the recorded trajectory, called independently of the episode's reward path
    expected = evaluate_simulation(
        simulation=episode.simulation_run(), task=task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain_name
    ).reward
    return Case(domain_name, task.id, variant, info["reward"], expected, info["termination"], info["turns"],
                info["evaluation_error"], info["reward_path"])


async def _run_chunk(domain_name: str, indices: list[int]) -> list[Case]:
    from tau_bench_env.env import shared_domain
    from tau_bench_env.replay import Corruption, applicable, effective_writes

    domain = shared_domain(domain_name)
    tasks = domain.tasks("base")
    cases = []
    for index in indices:
        task = tasks[index]
        writes = effective_writes(domain.make_environment(), task)
        gold = await _run_case(domain_name, task, "gold", None, writes, 80)
        cases.append(gold)
        if domain_name != "telecom" and index % CORRUPT_EVERY == 0:
            for corruption in Corruption:
                if applicable(task, corruption, writes):
                    cases.append(await _run_case(domain_name, task, corruption.value, corruption, writes, 80))
        if index % CUT_EVERY == 0 and gold.turns > 1:
            cases.append(await _run_case(domain_name, task, "max_turns_cut", None, writes, gold.turns - 1))
    return cases


def run_chunk(domain_name: str, indices: list[int]) -> list[Case]:
    """Process-pool entry point: play the cases of `indices` of `domain_name`'s base tasks."""
    from ctu.registry import populate_registry

    populate_registry()
    return asyncio.run(_run_chunk(domain_name, indices))


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    from tau_bench_env.env import shared_domain

    jobs = []
    for name in DOMAINS:
        count = len(shared_domain(name).tasks("base"))
        jobs += [(name, list(range(start, count, 2))) for start in (0, 1)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        results = pool.map(run_chunk, *zip(*jobs))
        return [case for chunk in results for case in chunk]


def test_every_gold_replay_scores_one(cases):
    gold = [c for c in cases if c.variant == "gold"]
    counts = {name: sum(1 for c in gold if c.domain == name) for name in DOMAINS}
    assert counts == {"retail": 114, "airline": 50, "telecom": 114}
    failed = [(c.domain, c.task_id, c.reward, c.termination) for c in gold if c.reward != 1.0]
    assert not failed, failed


def test_corrupted_replays_score_zero(cases):
    corrupted = [c for c in cases if c.variant != "gold"]
    kinds = {c.variant for c in corrupted}
    assert kinds == {"wrong_argument", "missing_action", "fake_payment", "missing_info", "max_turns_cut"}
    assert len(corrupted) >= 150
    failed = [(c.domain, c.task_id, c.variant, c.reward) for c in corrupted if c.reward != 0.0]
    assert not failed, failed
    assert all(c.termination == "max_turns" for c in corrupted if c.variant == "max_turns_cut")


def test_reward_equals_tau2_evaluate_simulation_on_every_trajectory(cases):
    """ctu's reward comes from the fast path (tau_bench_env.fast_eval); tau2's evaluator is the judge."""
    assert len(cases) >= 300
    finished = [c for c in cases if c.termination in ("user_stop", "agent_stop")]
    assert finished and all(c.reward_path == "fast" for c in finished)
    assert [c for c in cases if c.evaluation_error] == []
    mismatched = [(c.domain, c.task_id, c.variant, c.reward, c.tau2_reward) for c in cases if c.reward != c.tau2_reward]
    assert not mismatched, mismatched
