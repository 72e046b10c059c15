"""The `tau_multiturn` generator end to end on CPU against `TauBenchEnv`, with scripted samplers."""

from __future__ import annotations

import itertools
import math

import pytest

from ctu.rollout.build import build_generator
from ctu.rollout.requests import EpisodeRequest, TaskRow
from ctu.rollout.sampling import SampleResult
from tests.support.openai_server import Answer, ScriptedOpenAIServer

from .conftest import TASKS, ChatReplaySampler, ReplayScript, batch, components, run, scripted_sampler


def test_text_mode_replays_score_one_and_masks_cover_exactly_the_policy_tokens(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS)
    generator = build_generator(components(minimal), tokenizer, scripted_sampler(tokenizer, script))
    output = run(generator, batch(TASKS))
    assert [r.reward for r in output.records] == [1.0] * 6
    assert [r.stop_reason for r in output.records] == ["stop"] * 6
    for record in output.records:
        prompt, response, mask, logprobs = record.prompt_ids, record.response_ids, record.loss_mask, record.logprobs
        assert len(response) == len(mask) == len(logprobs)
        # mask 1 exactly on generated tokens: they decode to the policy's turns, each closed by <|im_end|>
        policy = [message["content"] for message in record.result.conversation if message["role"] == "assistant"][1:]
        generated = tokenizer.decode([t for t, m in zip(response, mask) if m == 1])
        assert generated == "".join(f"{text}<|im_end|>" for text in policy)
        assert all(lp == -1.0 for lp, m in zip(logprobs, mask) if m == 1)
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)
        # the whole sequence decodes back to the conversation, as the chat template renders it
        rendered = tokenizer.apply_chat_template(record.result.conversation, tokenize=False)
        assert tokenizer.decode(prompt + response) == rendered.rstrip("\n") or tokenizer.decode(prompt + response) + "\n" == rendered
    metrics = output.metrics
    assert metrics["generation/avg_reward"] == 1.0 and metrics["generation/success_rate"] == 1.0
    assert metrics["reward/parse_failure_rate"] == 0.0 and metrics["environment/termination/user_stop"] == 1.0
    assert metrics["reward/tau_outcome/contribution"] == 1.0
    assert metrics["timing/generate"] > 0


def test_native_mode_on_a_token_sampler_renders_tools_in_the_template(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    sampler = scripted_sampler(tokenizer, script)
    generator = build_generator(components(minimal, rollout={"native_tool_calling": True}, model={"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}), tokenizer, sampler)
    output = run(generator, batch(TASKS[:1], samples=1))
    assert [r.reward for r in output.records] == [1.0]
    first_prompt = tokenizer.decode(sampler.prompts[0])
    assert "<tools>" in first_prompt and '"get_order_details"' in first_prompt
    assert first_prompt.endswith("<think>\n\n</think>\n\n")  # thinking disabled in the template call


def test_native_mode_samples_token_in_token_out_on_a_sampler_that_can_also_chat(minimal, tokenizer):
    """As SkyRL's vLLM can: a chat request would be sampled from vLLM's own rendering of the history, not from the
    ids trained on, so the generator never asks for one where it can send the ids themselves."""
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    sampler = scripted_sampler(tokenizer, script)
    sampler.supports_chat = True  # its `chat` is never called: ScriptedSampler has none
    generator = build_generator(components(minimal, rollout={"native_tool_calling": True}), tokenizer, sampler)
    output = run(generator, batch(TASKS[:1], samples=1))
    assert [r.reward for r in output.records] == [1.0] and len(sampler.prompts) == output.records[0].policy_turns
    assert output.metrics["generation/rerendered_turns"] == 0.0
    record = output.records[0]
    for prompt in sampler.prompts:  # each turn was sampled from a prefix of the trained sequence
        assert (record.prompt_ids + record.response_ids)[: len(prompt)] == prompt


def test_native_mode_on_a_chat_sampler_retokenises_structured_calls(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    sampler = ChatReplaySampler(tokenizer, script)
    generator = build_generator(components(minimal, rollout={"native_tool_calling": True}), tokenizer, sampler)
    output = run(generator, batch(TASKS[:1], samples=1))
    assert [r.reward for r in output.records] == [1.0]
    assert sampler.requests[0]["tools"]
    record = output.records[0]
    generated = tokenizer.decode([t for t, m in zip(record.response_ids, record.loss_mask) if m == 1])
    assert "<tool_call>\n{\"name\": \"find_user_id_by_name_zip\"" in generated
    calls = [m for m in record.result.conversation if m.get("tool_calls")]
    assert calls and calls[0]["tool_calls"][0]["function"]["name"] == "find_user_id_by_name_zip"


def test_training_only_reward_never_reaches_evaluation(minimal, tokenizer):
    with ScriptedOpenAIServer(default=Answer.text('{"categories": ["tool_error"], "explanation": "x"}')) as judge:
        rewards = [
            "tau_outcome",
            {"type": "taxonomy_feedback", "weight": 0.5,
             "judge": {"type": "llm_taxonomy", "model": "judge", "base_url": judge.base_url, "api_key_env": None}},
        ]
        script = ReplayScript(tokenizer, "retail", TASKS[:1])
        generator = build_generator(components(minimal, rewards=rewards), tokenizer, scripted_sampler(tokenizer, script))
        evaluation = run(generator, batch(TASKS[:1], phase="eval"))
        assert judge.requests == []
        assert [r.reward for r in evaluation.records] == [1.0, 1.0]
        assert "reward/taxonomy_feedback/contribution" not in evaluation.metrics
        assert [name for name, _ in generator.setup.rewards["eval"].components] == ["tau_outcome"]
        training = run(generator, batch(TASKS[:1], phase="train"))
    assert len(judge.requests) == 2
    assert [r.reward for r in training.records] == [pytest.approx(1.0 - 0.5 * 0.3)] * 2
    assert training.metrics["judge/failures"] == 0.0


def test_a_failing_judge_gives_no_bonus_and_is_counted(minimal, tokenizer):
    with ScriptedOpenAIServer(default=Answer.text("I refuse to answer in JSON")) as judge:
        rewards = ["tau_outcome", {"type": "taxonomy_feedback", "judge": {"type": "llm_taxonomy", "model": "j", "base_url": judge.base_url, "api_key_env": None}}]
        script = ReplayScript(tokenizer, "retail", TASKS[:1])
        generator = build_generator(components(minimal, rewards=rewards), tokenizer, scripted_sampler(tokenizer, script))
        output = run(generator, batch(TASKS[:1], samples=2))
    assert [r.reward for r in output.records] == [1.0, 1.0]
    assert output.metrics["judge/failures"] == 2.0


def test_empty_responses_never_crash(minimal, tokenizer):
    generator = build_generator(components(minimal, environment={"user_simulator": "scripted", "max_errors": 3}), tokenizer,
                                scripted_sampler(tokenizer, lambda ids, n: ""))
    for phase in ("eval", "train"):
        output = run(generator, batch(TASKS[:2], phase=phase))
        assert [r.reward for r in output.records] == [0.0] * 4
        assert all(len(r) == len(m) > 0 for r, m in zip([r.response_ids for r in output.records], [r.loss_mask for r in output.records]))
        metrics = output.metrics
        assert metrics["environment/termination/too_many_errors"] == 1.0
        assert metrics["reward/parse_failure_rate"] == 1.0  # every turn was empty
        assert not any(math.isnan(v) for v in metrics.values())


def test_an_empty_batch_returns_empty_outputs_and_zero_metrics(minimal, tokenizer):
    generator = build_generator(components(minimal), tokenizer, scripted_sampler(tokenizer, lambda ids, n: "hi"))
    empty = batch([], phase="eval")
    output = run(generator, empty)
    assert [r.response_ids for r in output.records] == [] and [r.reward for r in output.records] == []
    metrics = output.metrics
    assert metrics["generation/avg_reward"] == 0.0 and metrics["generation/num_trajectories"] == 0.0
    assert not any(math.isnan(v) for v in metrics.values())


def test_context_limit_ends_the_episode_without_crashing(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    probe = build_generator(components(minimal), tokenizer, scripted_sampler(tokenizer, script))
    prompt_length = len(run(probe, batch(TASKS[:1], samples=1)).records[0].prompt_ids)
    small = components(minimal, model={"path": "builtin:tiny-qwen3", "max_model_len": prompt_length + 60})
    generator = build_generator(small, tokenizer, scripted_sampler(tokenizer, script))
    output = run(generator, batch(TASKS[:1], samples=1))
    record = output.records[0]
    assert record.result.termination == "context_overflow" and [r.reward for r in output.records] == [0.0]
    assert [r.stop_reason for r in output.records] == ["length"]
    assert len(output.records[0].prompt_ids) + len(output.records[0].response_ids) <= prompt_length + 60
    assert output.metrics["environment/termination/context_overflow"] == 1.0
    # `environment.overflow`: in training the spec's reward and no token trained; an evaluation reports tau2's 0
    overflow = {**minimal["environment"], "overflow": {"reward": -1.0, "exclude": True}}
    scored = components(minimal, model={"path": "builtin:tiny-qwen3", "max_model_len": prompt_length + 60}, environment=overflow)
    generator = build_generator(scored, tokenizer, scripted_sampler(tokenizer, script))
    trained, evaluated = (run(generator, batch(TASKS[:1], samples=1, phase=phase)).records[0] for phase in ("train", "eval"))
    assert trained.result.termination == evaluated.result.termination == "context_overflow"
    assert (trained.reward, evaluated.reward, trained.raw_reward) == (-1.0, 0.0, 0.0)
    assert trained.response_ids == record.response_ids and set(trained.loss_mask) == {0} and 1 in evaluated.loss_mask


def test_context_limit_in_chat_mode_counts_every_retokenised_turn(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    native = {"native_tool_calling": True}
    probe = build_generator(components(minimal, rollout=native), tokenizer, ChatReplaySampler(tokenizer, script))
    full = run(probe, batch(TASKS[:1], samples=1))
    prompt_length, response_length = len(full.records[0].prompt_ids), len(full.records[0].response_ids)
    limit = prompt_length + response_length // 2
    sampler = ChatReplaySampler(tokenizer, script)
    small = components(minimal, rollout=native, model={"path": "builtin:tiny-qwen3", "max_model_len": limit})
    generator = build_generator(small, tokenizer, sampler)
    output = run(generator, batch(TASKS[:1], samples=1))
    assert output.records[0].result.termination == "context_overflow" and [r.stop_reason for r in output.records] == ["length"]
    response, mask = output.records[0].response_ids, output.records[0].loss_mask
    assert response == full.records[0].response_ids[: len(response)]  # the same turns, up to the cut
    # each request's max_tokens is what remained of the context then: the prompt and every earlier turn count
    starts = [i for i, m in enumerate(mask) if m == 1 and (i == 0 or mask[i - 1] == 0)]
    default = generator.setup.sampling["train"].max_tokens
    sent = [request["max_tokens"] for request in sampler.requests]
    assert sent == [min(default, limit - prompt_length - start) for start in starts]
    assert sent[-1] < default  # the budget did cut the last request


def test_a_broken_episode_does_not_break_the_batch_and_is_an_infrastructure_error(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    generator = build_generator(components(minimal), tokenizer, scripted_sampler(tokenizer, script))
    requests, phase, step = batch(TASKS[:1], samples=1)
    output = run(generator, (requests + [EpisodeRequest(TaskRow("retail", "no-such-task"))], phase, step))
    assert [r.reward for r in output.records] == [1.0, 0.0]
    assert output.metrics["generation/episode_errors"] == 1.0
    assert output.records[0].infra_error is None
    assert output.records[1].infra_error.startswith("episode failed: ")
    assert output.metrics["generation/success_rate"] == 1.0  # over the episode that ran
    assert "no-such-task" in output.records[1].error


def test_progress_callback_sees_each_batch_and_episode(minimal, tokenizer):
    calls = []
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    generator = build_generator(components(minimal), tokenizer, scripted_sampler(tokenizer, script),
                                on_episode=lambda size, finished: calls.append((size, finished)))
    run(generator, batch(TASKS[:1], samples=3))
    assert calls == [(3, False), (3, True), (3, True), (3, True)]


def test_each_episode_samples_under_one_session_of_its_own_and_ends_it(minimal, tokenizer):
    """Every turn of an episode names the same session, no two episodes share one, and each session is ended once,
    a failing episode's too (a router keeps an episode on one engine by it: SkyRL's generator does the same)."""
    script = ReplayScript(tokenizer, "retail", TASKS[:2])
    sampler = scripted_sampler(tokenizer, script)
    generator = build_generator(components(minimal), tokenizer, sampler)
    run(generator, batch(TASKS[:2], samples=2))
    assert None not in sampler.sessions and sorted(sampler.ended) == sorted(set(sampler.sessions))
    assert len(set(sampler.sessions)) == 4 and len(sampler.ended) == 4
    by_session: dict[str | None, list[list[int]]] = {}
    for prompt, session in zip(sampler.prompts, sampler.sessions):
        by_session.setdefault(session, []).append(prompt)
    for prompts in by_session.values():  # one episode's turns: each prompt extends the one before
        assert len(prompts) > 1 and all(later[:len(earlier)] == earlier for earlier, later in itertools.pairwise(prompts))

    def broken(prompt_ids, calls):
        raise RuntimeError("the engine died")

    failing = scripted_sampler(tokenizer, broken)
    generator = build_generator(components(minimal), tokenizer, failing)
    output = run(generator, batch(TASKS[:1], samples=1))
    assert output.records[0].error and failing.ended == failing.sessions == [failing.sessions[0]]


def test_a_chat_samplers_episodes_are_sessions_too(minimal, tokenizer):
    """An evaluated endpoint is asked for chats under the episode's session (a router keeps the episode on one
    replica by it), each episode its own, ended once."""
    script = ReplayScript(tokenizer, "retail", TASKS[:2])
    sampler = ChatReplaySampler(tokenizer, script)
    generator = build_generator(components(minimal, rollout={"native_tool_calling": True}), tokenizer, sampler)
    run(generator, batch(TASKS[:2], samples=2))
    by_session: dict[str | None, list[list[dict[str, object]]]] = {}
    for request in sampler.requests:
        by_session.setdefault(request["session"], []).append(request["messages"])
    assert None not in by_session and len(by_session) == 4 and sorted(sampler.ended) == sorted(by_session)
    for conversations in by_session.values():  # one episode's turns: each conversation extends the one before
        assert len(conversations) > 1
        assert all(later[:len(earlier)] == earlier for earlier, later in itertools.pairwise(conversations))


def test_openai_chat_sampler_plays_a_policy_served_over_http(minimal, tokenizer):
    """A policy behind an OpenAI-compatible server on 127.0.0.1 (native tool calling, re-tokenised turns)."""
    from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
    from ctu.rollout.sampling import OpenAIChatSampler

    answers = [Answer.calls(("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"})),
               Answer.text("Is there anything else I can help you with?")]
    with ScriptedOpenAIServer(answers) as server:
        endpoint = ChatEndpoint(OpenAIEndpointParams(model="policy", base_url=server.base_url, api_key_env=None))
        generator = build_generator(components(minimal, rollout={"native_tool_calling": True}), tokenizer, OpenAIChatSampler(endpoint))
        output = run(generator, batch(TASKS[:1], samples=1))
    record = output.records[0]
    assert record.result.termination == "user_stop"
    tools = [m for m in record.result.conversation if m["role"] == "tool"]
    assert tools and tools[0]["content"] == "yusuf_rossi_9620"
    assert server.requests[0]["tools"] and output.records[0].loss_mask.count(1) > 0
    sessions = {headers.get("x-session-id") for headers in server.request_headers}  # the episode's, on every turn
    assert len(server.request_headers) == 2 and len(sessions) == 1 and None not in sessions


def test_eval_samples_of_a_task_get_distinct_seeds_and_training_none(minimal, tokenizer):
    """pass^k over k samples means something only if the samples can differ, and a paired interval over tasks only if
    tasks do not share their draws: sample k of a task uses `episode_seed` (seed + the task's offset + k)."""
    from ctu.rollout.generator import episode_seed

    script = ReplayScript(tokenizer, "retail", TASKS[:2])
    sampler = scripted_sampler(tokenizer, script)
    seeds: list[tuple[int, int | None]] = []
    sample = sampler.sample

    async def recording(prompt_ids, params, session=None):
        seeds.append((tokenizer.decode(prompt_ids).count("<|im_start|>assistant"), params.seed))
        return await sample(prompt_ids, params, session)

    sampler.sample = recording
    generator = build_generator(components(minimal, experiment={"name": "minimal", "seed": 40}), tokenizer, sampler)
    run(generator, batch(TASKS[:2], phase="eval", samples=3))
    first_turn_seeds = sorted(seed for turn, seed in seeds if turn == 2)
    expected = sorted(episode_seed(40, f"retail/{task}", k) for task in TASKS[:2] for k in range(3))
    assert first_turn_seeds == expected and len(set(expected)) == 6  # the same on every run, no two episodes alike
    seeds.clear()
    run(generator, batch(TASKS[:2], phase="train", samples=3))
    assert {seed for _, seed in seeds} == {None}


class SampledChatSampler(ChatReplaySampler):
    """A chat server that returns what it sampled, as vLLM does with `return_token_ids` and `logprobs`: the turn
    written with an extra space the template would not render, and a logprob per token."""

    async def chat(self, messages, tools, params, session=None):
        result = await super().chat(messages, tools, params, session)
        text = result.text + " " if result.text else ""
        if result.tool_calls:
            call = result.tool_calls[0]["function"]
            text += f'<tool_call>\n{{"name": "{call["name"]}",  "arguments": {call["arguments"]}}}\n</tool_call>'
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return SampleResult(ids, result.text, "stop", [-0.5] * len(ids), result.tool_calls)


def test_native_mode_trains_on_the_tokens_the_chat_server_sampled_with_their_logprobs(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    generator = build_generator(components(minimal, rollout={"native_tool_calling": True}), tokenizer, SampledChatSampler(tokenizer, script))
    output = run(generator, batch(TASKS[:1], samples=1))
    assert [r.reward for r in output.records] == [1.0]
    record = output.records[0]
    generated = tokenizer.decode([t for t, m in zip(record.response_ids, record.loss_mask) if m == 1])
    assert '"find_user_id_by_name_zip",  "arguments"' in generated  # the sampled spacing, not the template's
    assert len(record.logprobs) == len(record.response_ids)
    assert {lp for lp, m in zip(record.logprobs, record.loss_mask) if m == 1} == {-0.5}
    assert output.metrics["generation/rerendered_turns"] == 0.0


def test_native_mode_without_sampled_ids_reports_no_rollout_logprobs(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    generator = build_generator(components(minimal, rollout={"native_tool_calling": True}), tokenizer, ChatReplaySampler(tokenizer, script))
    output = run(generator, batch(TASKS[:1], samples=2))
    assert [r.reward for r in output.records] == [1.0, 1.0]
    assert [record.logprobs for record in output.records] == [[], []]  # not 0.0 for every token, made up
    turns = sum(record.policy_turns for record in output.records)
    assert turns > 0 and output.metrics["generation/rerendered_turns"] == turns


def test_the_fast_reward_rate_is_absent_when_no_episode_was_evaluated():
    from ctu.rollout.records import TrajectoryRecord, rollout_metrics
    from tau_bench_env.outcome import EpisodeResult

    def record(**fields):
        return TrajectoryRecord([1], [2], [1], [-0.1], 0.0, "stop", EpisodeResult("retail", "0", termination="max_turns", **fields))

    assert "environment/fast_reward_rate" not in rollout_metrics([record(), record()])
    assert rollout_metrics([record(), record(reward_path="fast"), record(reward_path="tau2")])["environment/fast_reward_rate"] == 0.5


def test_a_tool_call_cut_off_by_the_token_limit_is_a_parse_failure_and_never_runs(minimal, tokenizer):
    cancel = '<tool_call>\n{"name": "cancel_pending_order", "arguments": {"order_id": "#W2378156", "reason": "no longer needed"}}\n</tool_call>'
    sampler = scripted_sampler(tokenizer, lambda prompt, call: cancel)
    limit = len(tokenizer.encode(cancel, add_special_tokens=False)) - 3  # the closing braces and tag are cut
    generator = build_generator(components(minimal, rollout={"max_tokens_per_turn": limit}, environment={
        "user_simulator": {"type": "scripted"}, "max_turns": 1}), tokenizer, sampler)
    record = run(generator, batch(TASKS[:1], samples=1)).records[0]
    assert record.stop_reason == "length" and record.result.parse_failures == 1
    assert record.result.tool_errors == 0
    assert not any(m["role"] == "tool" and "cancelled" in m["content"] for m in record.result.conversation)
    # the trajectory line keeps the cut text and says why its call did not run (what `ctu view` shows)
    from ctu.rollout.generator import CUT_OFF
    from ctu.rollout.trajectories import logged_messages

    [turn] = [m for m in logged_messages(record.result.conversation, record.result.parsed_turns) if m["role"] == "assistant"
              and "<tool_call>" in m["content"]]
    assert turn["parsed"] == {"tool_calls": [], "parse_errors": [CUT_OFF]}


def test_a_chat_servers_reasoning_is_recorded_apart_and_a_turn_cut_off_while_reasoning_is_the_policys(minimal, tokenizer):
    """vLLM with a reasoning parser returns a turn's reasoning beside its content (``reasoning``; older servers
    ``reasoning_content``): the episode records it and the customer never sees it. A turn that spent its token limit
    reasoning (no content, ``finish_reason: length``) is the policy's failed turn, not an infrastructure error."""
    from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
    from ctu.rollout.sampling import OpenAIChatSampler

    find = Answer.calls(("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}))
    answers = [Answer(tool_calls=find.tool_calls, reasoning="Name and zip given: look the user up."),
               Answer(content=None, reasoning="The user id is yusuf", reasoning_field="reasoning_content",
                      finish_reason="length")]
    with ScriptedOpenAIServer(answers, default=Answer.text("Is there anything else I can help you with?")) as server:
        endpoint = ChatEndpoint(OpenAIEndpointParams(model="policy", base_url=server.base_url, api_key_env=None, backoff_s=0.01))
        generator = build_generator(components(minimal, rollout={"native_tool_calling": True}), tokenizer, OpenAIChatSampler(endpoint))
        record = run(generator, batch(TASKS[:1], samples=1)).records[0]
    assert record.infra_error is None
    assert record.reasoning[:2] == ["Name and zip given: look the user up.", "The user id is yusuf"]
    assert not any("look the user up" in str(m.get("content")) for m in record.result.conversation)
    assert len(server.requests) == len(record.reasoning)  # the empty turn was not asked again


def test_an_evaluator_exception_the_policy_caused_is_scored_and_counted_a_user_outage_is_not(minimal, tokenizer):
    """tau2's mock task `create_task_1_with_env_assertions` asserts on the task the policy should create; a policy
    that creates nothing makes tau2's evaluator raise. tau2 scores that 0 and counts it, so ctu trains on it and
    counts it in success rates; a customer whose endpoint stays down is an infrastructure error, as before."""
    stop = scripted_sampler(tokenizer, lambda ids, n: "I cannot help with that. Goodbye. ###STOP###")
    minimal["data"] = {"train": [{"domain": "mock", "split": "base"}], "test_sets": {}}
    generator = build_generator(components(minimal), tokenizer, stop)
    for phase in ("train", "eval"):
        output = run(generator, batch(["create_task_1_with_env_assertions"], phase=phase, domain="mock"))
        assert [r.reward for r in output.records] == [0.0, 0.0]
        assert [r.infra_error for r in output.records] == [None, None]
        assert all(r.result.evaluation_error == "ValueError: Task task_2 not found" for r in output.records)
        assert output.metrics["environment/evaluation_errors"] == 2.0 and output.metrics["environment/infra_errors"] == 0.0
        assert output.metrics["generation/success_rate"] == 0.0 and output.metrics["generation/num_trajectories"] == 2.0
    with ScriptedOpenAIServer(default=Answer.error(503)) as customer:
        user = {"type": "llm", "model": "customer", "base_url": customer.base_url, "api_key_env": None,
                "max_retries": 0, "backoff_s": 0.01}
        down = build_generator(components(minimal, environment={"user_simulator": user}), tokenizer, stop)
        output = run(down, batch(["create_task_1_with_env_assertions"], samples=1, domain="mock"))
    assert output.records[0].infra_error.startswith("user simulator: ")
    assert output.metrics["environment/infra_errors"] == 1.0
