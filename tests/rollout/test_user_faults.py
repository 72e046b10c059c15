"""What the `tau_multiturn` generator does when the user simulator or a judge fails or misbehaves: infrastructure
errors left out of rewards, and user faults flagged, replayed or kept (scripted samplers and servers on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from ctu.rollout.build import build_generator
from tests.support.hasty_customer import HastyCustomer, confirming_turns
from tests.support.openai_server import Answer, ScriptedOpenAIServer

from .conftest import TASKS, ReplayScript, batch, components, run, scripted_sampler


def test_a_user_simulator_outage_is_an_infrastructure_error_left_out_of_rewards_and_success(minimal, tokenizer):
    """Task 2's user simulator is down (503, no retries); task 1's answers. Task 2's episodes are marked, counted
    and left out of the reward and success figures, are not scored (reward 0, no judge asked about them); nothing
    else about the batch changes."""

    def answer(body):
        if "how many tshirt options" in body["messages"][0]["content"]:
            return Answer.error(503)
        return Answer.text("###STOP###" if len(body["messages"]) > 2 else "Hi, I want to exchange my keyboard.")

    with ScriptedOpenAIServer(default=answer) as server, ScriptedOpenAIServer(default=Answer.error(500)) as judge:
        user = {"type": "llm", "model": "user", "base_url": server.base_url, "api_key_env": None, "max_retries": 0, "backoff_s": 0.01}
        rewards = ["tau_outcome", {"type": "taxonomy_feedback", "weight": 0.2, "judge": {
            "type": "llm_taxonomy", "model": "j", "base_url": judge.base_url, "api_key_env": None, "max_retries": 0}}]
        generator = build_generator(components(minimal, environment={"user_simulator": user}, rewards=rewards), tokenizer,
                                    scripted_sampler(tokenizer, lambda ids, n: "Let me look at that order."))
        output = run(generator, batch(["1", "2"]))
        records = list(output.records)
        assert len(judge.requests) == 2  # about task 1's two episodes only
        outage = run(generator, batch(["2"]))
        assert len(judge.requests) == 2
    assert [r.infra_error is None for r in records] == [True, True, False, False]
    assert all(r.infra_error.startswith("user simulator: ") and "503" in r.infra_error for r in records[2:])
    from ctu.rollout.trajectories import trajectory_line

    line = trajectory_line(records[2], "train", 1)
    assert line["infra_error"] == records[2].infra_error and line["reward"] == 0.0
    assert [r.reward for r in output.records][2:] == [0.0, 0.0] and records[2].reward_metrics == {}
    metrics = output.metrics
    assert metrics["environment/infra_errors"] == 2.0 and metrics["environment/infra_error_rate"] == 0.5
    assert metrics["user/errors"] == 2.0
    assert metrics["generation/avg_reward"] == pytest.approx(sum([r.reward for r in output.records][:2]) / 2)
    assert metrics["generation/success_rate"] == sum(r.success for r in records[:2]) / 2
    # a batch where every episode failed this way has no success rate or reward figure, not a 0
    assert outage.metrics["environment/infra_error_rate"] == 1.0
    assert not {"generation/success_rate", "generation/avg_reward", "reward/avg_final_reward"} & set(outage.metrics)


def test_a_judge_failure_is_an_infrastructure_error_only_where_the_spec_makes_it_fatal(minimal, tokenizer):
    with ScriptedOpenAIServer(default=Answer.error(500)) as judge:
        config = {"type": "llm_taxonomy", "model": "j", "base_url": judge.base_url, "api_key_env": None, "max_retries": 0}
        script = ReplayScript(tokenizer, "retail", TASKS[:1])
        for fatal in (False, True):
            rewards = ["tau_outcome", {"type": "taxonomy_feedback", "judge": config, "judge_failure_is_fatal": fatal}]
            generator = build_generator(components(minimal, rewards=rewards), tokenizer, scripted_sampler(tokenizer, script))
            output = run(generator, batch(TASKS[:1], samples=2))
            errors = [r.infra_error for r in output.records]
            assert output.metrics["judge/failures"] == 2.0
            if fatal:
                assert all(e.startswith("judge: ") for e in errors)
                assert output.metrics["environment/infra_errors"] == 2.0
            else:
                assert errors == [None, None] and [r.reward for r in output.records] == [1.0, 1.0]



def test_a_token_sampler_that_returns_no_logprobs_trains_nothing(minimal, tokenizer):
    """Training against made-up logprobs (0.0 for every token) would be silent: such an episode is an
    infrastructure error instead, left out of training; evaluation, which trains nothing, goes on."""
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    sampler = scripted_sampler(tokenizer, script)
    sample = sampler.sample

    async def without_logprobs(prompt_ids, params, session=None):
        result = await sample(prompt_ids, params, session)
        return replace(result, logprobs=None)

    sampler.sample = without_logprobs
    generator = build_generator(components(minimal), tokenizer, sampler)
    [record] = run(generator, batch(TASKS[:1], phase="train", samples=1)).records
    assert record.infra_error is not None and "no logprobs" in record.infra_error
    evaluated = run(generator, batch(TASKS[:1], phase="eval", samples=1))
    assert [r.reward for r in evaluated.records] == [1.0]


def test_the_loops_load_is_measured_and_a_saturated_loop_is_named_once(minimal, tokenizer, caplog):
    """A policy that answers after a wait leaves the loop idle; one whose turns cost ctu's loop CPU (here the
    sampler itself burns 20 ms a turn) saturates it, and the log says what to do about it, once (not for a first
    batch, which also loads the domain: one-off work). The wait is 300 ms a turn: a turn's own CPU work (tokenising,
    the environment's step) plus its wait for a core beside another pytest worker read 0.63 of a batch whose turns
    waited 50 ms (CI, 2026-12-01)."""
    import time

    def burning(script):
        def turn(prompt_ids, call):
            end = time.thread_time() + 0.02
            while time.thread_time() < end:
                pass
            return script(prompt_ids, call)
        return turn

    waiting = scripted_sampler(tokenizer, ReplayScript(tokenizer, "retail", TASKS[:2]))
    sample = waiting.sample

    async def after_a_wait(prompt_ids, params, session=None):
        await asyncio.sleep(0.3)
        return await sample(prompt_ids, params, session)

    waiting.sample = after_a_wait
    idle = build_generator(components(minimal), tokenizer, waiting)
    for _ in range(2):
        metrics = run(idle, batch(TASKS[:2])).metrics
    assert metrics["timing/rollout_loop_busy"] < 0.5
    assert not [r for r in caplog.records if "rollout event loop" in r.getMessage()]

    busy = build_generator(components(minimal), tokenizer, scripted_sampler(tokenizer, burning(ReplayScript(tokenizer, "retail", TASKS[:2]))))
    for n in range(3):
        metrics = run(busy, batch(TASKS[:2])).metrics
        assert n == 0 or metrics["timing/rollout_loop_busy"] >= 0.8
    warnings = [r.getMessage() for r in caplog.records if "rollout event loop" in r.getMessage()]
    assert len(warnings) == 1 and "rollout.generator.processes, now 1" in warnings[0]


class ConfirmingAgent:
    """Retail task 0's gold replay with a request to confirm before the write (`confirming_turns`), turn by turn:
    the turn's index is the assistant headers in the prompt, less the greeting and the new one."""

    def __init__(self, tokenizer) -> None:
        from .conftest import hermes_text

        self.texts = [hermes_text(turn) for turn in confirming_turns()]
        self.tokenizer = tokenizer

    def __call__(self, prompt_ids: list[int], call: int) -> str:
        index = self.tokenizer.decode(prompt_ids).count("<|im_start|>assistant") - 2
        return self.texts[min(index, len(self.texts) - 1)]


@pytest.mark.parametrize("action", ["exclude", "retry", "keep"])
def test_a_customer_who_hangs_up_before_the_write_is_flagged_and_excluded_replayed_or_kept(minimal, tokenizer, action):
    """Five episodes of a task with a write, one customer in five stopping right after confirming: `exclude` leaves
    that episode out (an infrastructure error: no reward, out of success, counted); `retry` plays it again until
    a customer lets the write run (the sixth confirmation is hasty too: two replays); `keep` scores it as tau2 does."""
    with ScriptedOpenAIServer(default=HastyCustomer()) as server:
        user = {"type": "llm", "model": "customer", "base_url": server.base_url, "api_key_env": None}
        built = components(minimal, environment={"max_turns": 20, "user_simulator": user, "warn_unsolvable_tasks": False,
                                                 "user_faults": {"detectors": ["stop_before_write", "identity_mismatch"],
                                                                 "action": action}})
        generator = build_generator(built, tokenizer, scripted_sampler(tokenizer, ConfirmingAgent(tokenizer)))
        output = run(generator, batch(["0"], samples=5))
    records, metrics = output.records, output.metrics
    flagged = [r for r in records if r.user_fault]
    if action == "retry":
        assert flagged == [] and sum(r.user_fault_retries for r in records) == 2 and metrics["user/fault_retries"] == 2
        assert [r.raw_reward for r in records] == [1.0] * 5 and metrics["generation/success_rate"] == 1.0
        return
    [fault] = flagged
    assert fault.user_fault.kind == "stop_before_write"
    assert str(fault.user_fault).startswith("stop_before_write: the user stopped in its reply to the agent's confirmation request")
    assert fault.raw_reward == 0.0 and fault.result.termination == "user_stop"
    assert metrics["user/faults"] == 1 and metrics["user/faults/stop_before_write"] == 1 and metrics["user/fault_rate"] == 0.2
    assert metrics["user/fault_rate/retail"] == 0.2
    assert sorted(r.raw_reward for r in records) == [0.0, 1.0, 1.0, 1.0, 1.0]
    if action == "exclude":
        assert fault.infra_error == f"user fault: {fault.user_fault}" and fault.reward == 0.0
        assert metrics["environment/infra_errors"] == 1 and metrics["generation/success_rate"] == 1.0
    else:
        assert fault.infra_error is None and metrics["environment/infra_errors"] == 0
        assert metrics["generation/success_rate"] == pytest.approx(0.8)


def test_an_evaluated_customer_samples_with_its_episodes_seed_and_a_replay_with_another(minimal, tokenizer):
    """As tau2 seeds its user with each trial's seed, an `llm` customer's requests in evaluation carry the sample's
    seed (`episode_seed`, the policy's too); a replay for a user fault carries another, so that it can meet another
    customer; training sends none."""
    from ctu.rollout.generator import episode_seed, user_seed

    with ScriptedOpenAIServer(default=HastyCustomer()) as server:
        user = {"type": "llm", "model": "customer", "base_url": server.base_url, "api_key_env": None, "temperature": 0.7}
        built = components(minimal, experiment={"name": "minimal", "seed": 40},
                           environment={"max_turns": 20, "user_simulator": user, "warn_unsolvable_tasks": False,
                                        "user_faults": {"detectors": ["stop_before_write"], "action": "retry"}})
        generator = build_generator(built, tokenizer, scripted_sampler(tokenizer, ConfirmingAgent(tokenizer)))
        records = run(generator, batch(["0"], phase="eval", samples=3)).records
        evaluated = [request.get("seed") for request in server.requests]
        server.requests.clear()
        run(generator, batch(["0"], phase="train", samples=1))
        trained = [request.get("seed") for request in server.requests]
    assert sum(r.user_fault_retries for r in records) == 1  # the first confirmation of the three was hasty
    first_plays = {episode_seed(40, "retail/0", k) for k in range(3)}
    assert len(first_plays) == 3 and first_plays <= set(evaluated)
    [replayed] = set(evaluated) - first_plays
    assert replayed in {user_seed(seed, 1) for seed in first_plays}
    assert trained and set(trained) == {None}


def test_a_verifying_customer_regenerates_a_rejected_reply_with_another_seed():
    """`verify` asks again for a reply the check rejected: with a seed, the same prompt would draw the same reply,
    so the regeneration's seed is the session's plus one."""
    from ctu.components.parsers.hermes import HermesParser
    from ctu.components.user_simulators.llm import LLMUserSimulator
    from tau_bench_env.env import shared_domain
    from tau_bench_env.episode import Episode
    from tau_bench_env.outcome import EpisodeConfig

    answers = [Answer.text("Hi, I am Ann."), Answer.text("No"), Answer.text("Hi, I'd like to exchange a keyboard."), Answer.text("Yes")]
    with ScriptedOpenAIServer(answers) as server:
        params = LLMUserSimulator.Params(model="customer", base_url=server.base_url, api_key_env=None, strategy="verify")
        retail = shared_domain("retail")
        episode = Episode(retail, retail.task("0"), LLMUserSimulator(params), HermesParser(), EpisodeConfig(), user_seed=7)
        prompt = asyncio.run(episode.reset())
    assert prompt[-1]["content"] == "Hi, I'd like to exchange a keyboard."
    # reply, its check, the regenerated reply, its check (another question: the session's seed again)
    assert [request.get("seed") for request in server.requests] == [7, 7, 8, 7]
