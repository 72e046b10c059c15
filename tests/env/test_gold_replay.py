"""Gold replays of every retail, airline and telecom (base) task score 1.0 through `Episode` with the scripted
user; corrupted replays score 0.0; and on every trajectory (at least 300 per domain) ctu's reward (the fast
path, over copy-on-access databases for retail and airline and copied databases for telecom) equals tau2's own
`evaluate_simulation` (the parity suite). Besides gold and corrupted replays it plays variants whose reward
tau2 decides either way (a write repeated, a read added or dropped, writes reordered; for telecom, the user also
turning on airplane mode or data saver or connecting a VPN) and episodes cut by `max_turns` at three points.

The suite plays every case once (a module fixture, spread over two processes) and the tests assert over the
results, so every mismatch is reported at once. Each process also checks that no episode wrote to its
domain's shared base database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
from dataclasses import dataclass

import pytest

DOMAINS = ("retail", "airline", "telecom")
CORRUPT_EVERY = {"retail": 4, "airline": 1, "telecom": 3}
"""Corrupted and perturbed variants are played for every fourth retail task, every airline task and every
third telecom task: each domain then has at least `MIN_CASES_PER_DOMAIN` cases (airline, with 50 tasks, about 320).
tau2's evaluator costs about 0.5 s a retail case and 1 s an airline one on a 2-core AMD EPYC (2026-12-01), most of
this module's time; every second retail task (about 590 cases) cost about 80 s more."""
USER_CORRUPTIONS = {"airplane_mode": "toggle_airplane_mode", "data_saver": "toggle_data_saver_mode", "vpn": "connect_vpn"}
"""Telecom's user-side corruptions: after the gold actions, the user also does this on their phone (the user's
database then differs from the gold one, which tau2 may or may not see, e.g. through an environment assertion)."""
CUT_EVERY = {"retail": 2, "airline": 1, "telecom": 1}
"""Max-turns cuts (one turn short, half way and a third of the way) are played for every N-th task."""
MIN_CASES_PER_DOMAIN = 300


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


def _perturbations(task, writes):
    """Replays tau2 may score either way: ``{variant: actions}`` for those that apply to `task`."""
    from tau_bench_env.replay import gold_actions

    actions = gold_actions(task)
    variants = {}
    if writes:
        variants["repeated_write"] = actions[: writes[-1] + 1] + [actions[writes[-1]]] + actions[writes[-1] + 1 :]
    reads = [a for i, a in enumerate(actions) if i not in writes and a.requestor == "assistant"]
    if reads:
        variants["extra_read"] = actions + [reads[0]]
        variants["dropped_read"] = [a for a in actions if a is not reads[0]]
    if len(writes) >= 2:
        reordered = list(actions)
        reordered[writes[0]], reordered[writes[-1]] = actions[writes[-1]], actions[writes[0]]
        variants["reordered_writes"] = reordered
    return variants


class ScriptedUserOf:
    """The scripted user playing `task` (a variant with more user actions) in an episode scored on its own task."""

    def __init__(self, task) -> None:
        from ctu.components.user_simulators.scripted import ScriptedUserSimulator

        self.task = task
        self.simulator = ScriptedUserSimulator()

    def session(self, task, user_tools, trajectory, *, seed=None):
        return self.simulator.session(self.task, user_tools, trajectory)


def _with_user_action(task, tool: str):
    """`task` whose gold actions end with the user calling `tool` (no arguments) on their phone."""
    from tau2.data_model.tasks import Action

    variant = task.model_copy(deep=True)
    actions = variant.evaluation_criteria.actions or []
    variant.evaluation_criteria.actions = [*actions, Action(action_id=f"user_corruption_{tool}", requestor="user",
                                                            name=tool, arguments={})]
    return variant


async def _run_case(domain_name, task, variant, corruption, writes, max_turns, actions=None, user_task=None) -> Case:
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    from ctu.components.parsers.hermes import HermesParser
    from ctu.components.user_simulators.scripted import ScriptedUserSimulator
    from tau_bench_env.env import shared_domain
    from tau_bench_env.episode import Episode
    from tau_bench_env.outcome import EpisodeConfig
    from tau_bench_env.replay import GoldReplayAgent, play

    domain = shared_domain(domain_name)
    config = EpisodeConfig(max_turns=max_turns, max_errors=50)
    user = ScriptedUserOf(user_task) if user_task is not None else ScriptedUserSimulator()
    episode = Episode(domain, task, user, HermesParser(), config)
    agent = GoldReplayAgent(user_task, actions=list(user_task.evaluation_criteria.actions)) if user_task is not None else \
        GoldReplayAgent(task, corruption, writes, actions)
    result = await play(episode, agent)
    # tau2's own evaluator on the recorded trajectory, called independently of the episode's reward path
    expected = evaluate_simulation(
        simulation=episode.simulation_run(), task=task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain_name
    ).reward
    return Case(domain_name, task.id, variant, result.reward, expected, result.termination, result.turns,
                result.evaluation_error, result.reward_path)


async def _run_chunk(domain_name: str, indices: list[int]) -> list[Case]:
    from tau_bench_env.env import shared_domain
    from tau_bench_env.replay import Corruption, applicable, effective_writes

    domain = shared_domain(domain_name)
    tasks = domain.tasks("base")
    cases = []
    for index in indices:
        task = tasks[index]
        writes = effective_writes(domain.episode_environment(task), task)
        gold = await _run_case(domain_name, task, "gold", None, writes, 80)
        cases.append(gold)
        if domain_name in CORRUPT_EVERY and index % CORRUPT_EVERY[domain_name] == 0:
            for corruption in Corruption:
                if applicable(task, corruption, writes):
                    cases.append(await _run_case(domain_name, task, corruption.value, corruption, writes, 80))
            for variant, actions in _perturbations(task, writes).items():
                cases.append(await _run_case(domain_name, task, variant, None, writes, 80, actions))
            if domain_name == "telecom":
                for variant, tool in USER_CORRUPTIONS.items():
                    cases.append(await _run_case(domain_name, task, variant, None, writes, 80,
                                                 user_task=_with_user_action(task, tool)))
        if index % CUT_EVERY[domain_name] == 0 and gold.turns > 1:
            for turns in sorted({gold.turns - 1, max(1, gold.turns // 2), max(1, gold.turns // 3)}):
                cases.append(await _run_case(domain_name, task, "max_turns_cut", None, writes, turns))
    return cases


def run_chunk(domain_name: str, indices: list[int]) -> tuple[list[Case], bool]:
    """Process-pool entry point: play the cases of `indices` of `domain_name`'s base tasks.

    Returns:
        The cases, and whether what the domain's episodes share is unchanged by them: the base database of
        copy-on-access episodes, the databases copied episodes start from (the template environment's, pickled
        again), True for other domains.
    """
    import pickle

    from tau_bench_env.env import shared_domain

    domain = shared_domain(domain_name)

    def shared() -> object:
        if domain.copy_on_access:
            return domain.base_database.hash()
        if domain.copied_databases:
            template = domain._template
            copies = [pickle.loads(data).model_dump() for data in domain.database_bytes]
            return domain.database_bytes, copies, [template.tools.db.model_dump(), template.user_tools.db.model_dump()]
        return None

    before = shared()
    cases = asyncio.run(_run_chunk(domain_name, indices))
    after = shared()
    unchanged = before == after and (not domain.copied_databases or before[1] == before[2])
    return cases, unchanged


@pytest.fixture(scope="module")
def played() -> tuple[list[Case], list[tuple[str, bool]]]:
    from tau_bench_env.env import shared_domain

    jobs = []
    for name in DOMAINS:
        count = len(shared_domain(name).tasks("base"))
        jobs += [(name, list(range(start, count, 2))) for start in (0, 1)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        results = list(pool.map(run_chunk, *zip(*jobs)))
    cases = [case for chunk, _ in results for case in chunk]
    bases = [(job[0], unchanged) for job, (_, unchanged) in zip(jobs, results)]
    return cases, bases


@pytest.fixture(scope="module")
def cases(played) -> list[Case]:
    return played[0]


def test_no_episode_writes_to_the_shared_base_database(played):
    assert [name for name, unchanged in played[1] if not unchanged] == []


def test_every_gold_replay_scores_one(cases):
    gold = [c for c in cases if c.variant == "gold"]
    counts = {name: sum(1 for c in gold if c.domain == name) for name in DOMAINS}
    assert counts == {"retail": 114, "airline": 50, "telecom": 114}
    failed = [(c.domain, c.task_id, c.reward, c.termination) for c in gold if c.reward != 1.0]
    assert not failed, failed


def test_corrupted_replays_score_zero(cases):
    from tau_bench_env.replay import Corruption

    corrupted = [c for c in cases if c.variant in {k.value for k in Corruption} | {"max_turns_cut"}]
    kinds = {c.variant for c in corrupted}
    assert kinds == {"wrong_argument", "missing_action", "fake_payment", "missing_info", "max_turns_cut"}
    assert len(corrupted) >= 300
    failed = [(c.domain, c.task_id, c.variant, c.reward) for c in corrupted if c.reward != 0.0]
    assert not failed, failed
    assert all(c.termination == "max_turns" for c in corrupted if c.variant == "max_turns_cut")


def test_reward_equals_tau2_evaluate_simulation_on_every_trajectory(cases):
    """ctu's reward comes from the fast path (tau_bench_env.fast_eval); tau2's evaluator is the judge."""
    per_domain = {name: sum(1 for c in cases if c.domain == name) for name in DOMAINS}
    assert min(per_domain.values()) >= MIN_CASES_PER_DOMAIN, per_domain
    print("parity cases per domain:", per_domain)
    perturbed = [c for c in cases if c.variant in ("repeated_write", "extra_read", "dropped_read", "reordered_writes")]
    assert {c.reward for c in perturbed} == {0.0, 1.0}  # tau2 scores these either way
    user_side = [c for c in cases if c.variant in USER_CORRUPTIONS]
    assert {c.variant for c in user_side} == set(USER_CORRUPTIONS) and len(user_side) >= 3 * 38
    assert {c.domain for c in cases if c.reward_path == "fast"} == set(DOMAINS)
    print("user-side corruptions scored 0 by tau2:", sum(c.tau2_reward == 0.0 for c in user_side), "of", len(user_side))
    finished = [c for c in cases if c.termination in ("user_stop", "agent_stop")]
    assert finished and all(c.reward_path == "fast" for c in finished)
    assert [c for c in cases if c.evaluation_error] == []
    mismatched = [(c.domain, c.task_id, c.variant, c.reward, c.tau2_reward) for c in cases if c.reward != c.tau2_reward]
    assert not mismatched, mismatched
