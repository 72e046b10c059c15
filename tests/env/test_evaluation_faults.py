"""An exception raised while scoring an episode: the policy's failure (reward 0, counted, as tau2 scores it) when the
episode's own state caused it, an infrastructure error only when its cause lies outside the episode
(`tau_bench_env.evaluation_faults`)."""

from __future__ import annotations

import pytest

from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.rollout.records import infrastructure_error
from tau_bench_env.env import EnvSetup, TauBenchEnv, tau2_domains
from tau_bench_env.evaluation_faults import GoldOutcomeError, outside_fault
from tau_bench_env.outcome import EpisodeConfig

ASSERTED = "create_task_1_with_env_assertions"
"""tau2's mock task whose environment assertion reads `task_2`, the task the policy is asked to create: tau2's
`assert_task_status` raises ``ValueError: Task task_2 not found`` when the policy never created it."""


def stopped_at_once(task_id: str, **config) -> TauBenchEnv:
    """A mock episode of `task_id` whose policy says goodbye in its first turn (it creates nothing)."""
    env = TauBenchEnv(EnvSetup(ScriptedUserSimulator(), HermesParser(), EpisodeConfig(**config), tau2_domains("mock")),
                      {"domain": "mock", "task_id": task_id})
    env.init([])
    out = env.step("I cannot do that. Goodbye. ###STOP###")
    assert out.done
    return env


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "tau2-path"])
def test_an_assertion_on_what_the_policy_never_created_is_the_policys_failure(fast, monkeypatch):
    from tau_bench_env.domains import MockDomain

    monkeypatch.setattr(MockDomain, "fast_path", fast)  # mock takes tau2's path unless told
    env = stopped_at_once(ASSERTED)
    result = env.episode.result()
    assert result.reward_path == ("fast" if fast else "tau2")
    assert result.reward == 0.0 and result.termination == "agent_stop"
    assert result.evaluation_error == "ValueError: Task task_2 not found"
    assert result.evaluator_fault is None and infrastructure_error(result) is None
    # tau2's own evaluator raises the same on the same trajectory; tau2's run_task scores it 0 (skip_failed_samples)
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    with pytest.raises(ValueError, match="Task task_2 not found"):
        evaluate_simulation(simulation=env.episode.simulation_run(), task=env.episode.task,
                            evaluation_type=EvaluationType.ALL, solo_mode=False, domain="mock")


def test_a_gold_outcome_that_cannot_be_computed_is_an_infrastructure_error(monkeypatch):
    """The gold state comes from the task alone (its initial state and gold actions): its failure is the task's."""
    from tau_bench_env.domains import MockDomain
    from tau_bench_env.fast_eval import GoldOutcomes

    monkeypatch.setattr(MockDomain, "fast_path", True)  # the gold state is the fast path's
    monkeypatch.setattr(GoldOutcomes, "_gold_environment", lambda *args: 1 / 0)
    env = stopped_at_once("create_task_1")
    result = env.episode.result()
    assert result.reward == 0.0
    assert result.evaluator_fault == "gold outcome: ZeroDivisionError: division by zero"
    assert infrastructure_error(result) == "evaluator: gold outcome: ZeroDivisionError: division by zero"


def test_a_failing_nl_assertion_judge_is_an_infrastructure_error(monkeypatch):
    """tau2's NL-assertion judge is an LLM call (litellm's `completion` inside `tau2.utils.llm_utils.generate`): an
    outage there is not the policy's."""
    import tau2.utils.llm_utils as llm_utils

    def down(*args, **kwargs):
        raise ConnectionError("judge endpoint refused the connection")

    monkeypatch.setattr(llm_utils, "completion", down)
    env = stopped_at_once("create_task_1_nl_eval", evaluate_nl_assertions=True)
    result = env.episode.result()
    assert result.reward_path == "tau2" and result.reward == 0.0
    assert result.evaluator_fault is not None and result.evaluator_fault.startswith("NL-assertion judge: ")
    assert "refused the connection" in result.evaluator_fault
    assert infrastructure_error(result).startswith("evaluator: NL-assertion judge: ")


def test_a_reward_basis_the_run_does_not_evaluate_is_an_infrastructure_error():
    """Every episode of a task whose reward basis holds NL assertions raises in tau2's evaluator unless they are
    judged: whatever the policy did, so not the policy's."""
    import asyncio

    from tau2.data_model.tasks import RewardType

    from tau_bench_env.env import shared_domain
    from tau_bench_env.episode import Episode

    domain = shared_domain("mock")
    task = domain.task("create_task_1_nl_eval").model_copy(deep=True)
    task.evaluation_criteria.reward_basis = [RewardType.NL_ASSERTION]
    episode = Episode(domain, task, ScriptedUserSimulator(), HermesParser(), EpisodeConfig())

    async def play():
        await episode.reset()
        await episode.step("Goodbye. ###STOP###")

    asyncio.run(play())
    result = episode.result()
    assert result.reward == 0.0 and result.reward_path is None and result.evaluation_error is None
    assert "NL assertions" in (result.evaluator_fault or "") and infrastructure_error(result) is not None


def test_only_named_outside_causes_are_outside_faults():
    def raise_here():
        raise KeyError("order")

    try:
        raise_here()
    except KeyError as exc:
        assert outside_fault(exc) is None  # raised by any other code: the episode's state
    try:
        raise GoldOutcomeError("gold") from OSError("disk")
    except GoldOutcomeError as exc:
        assert outside_fault(exc) == "gold outcome: OSError: disk"
