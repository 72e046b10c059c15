"""Judges (`rule_taxonomy`, `llm_taxonomy` against a real server on 127.0.0.1) and reward components."""

from __future__ import annotations

import asyncio
import json

import pytest

from ctu.components.judges.base import JudgeInput
from ctu.components.rewards.base import RewardContext
from ctu.registry import registry
from tau_bench_env.env import shared_domain
from tau_bench_env.outcome import EpisodeResult
from tests.support.openai_server import Answer, ScriptedOpenAIServer

RETAIL = shared_domain("retail")
TASK = RETAIL.task("0")


def build(kind: str, name: str, judge_object=None, **params):
    """The registered component built as the composition root builds it (a judge handed to a reward needing one)."""
    info = registry[kind].get(name)
    return info.build(info.params_model(**params), **({"judge": judge_object} if judge_object is not None else {}))


def call(name: str, **arguments):
    """The agent calling `name`, as tau2's trajectory holds it."""
    from tau2.data_model.message import AssistantMessage, ToolCall

    return AssistantMessage(role="assistant", tool_calls=[ToolCall(id="c", name=name, arguments=arguments)])


def user(text: str):
    from tau2.data_model.message import UserMessage

    return UserMessage(role="user", content=text)


def info(trajectory, **fields) -> EpisodeResult:
    """An episode whose tau2 trajectory is `trajectory` (its OpenAI conversation derived from it)."""
    from tau_bench_env.messages import conversation_to_openai

    tools = [{"type": "function", "function": {"name": n}} for n in ("get_order_details", "cancel_pending_order", "find_user_id_by_name_zip")]
    return EpisodeResult(**{"domain": "retail", "task_id": "0", "trajectory": trajectory, "conversation": conversation_to_openai(trajectory),
                            "tools": tools, "termination": "user_stop", **fields})


def judge(name: str, conversation, **fields):
    return asyncio.run(build("judges", name).judge(JudgeInput(info(conversation, **fields), TASK, RETAIL.write_tools))) if not isinstance(name, object.__class__) else None


def rule(conversation, **fields):
    return asyncio.run(build("judges", "rule_taxonomy").judge(JudgeInput(info(conversation, **fields), TASK, RETAIL.write_tools)))


def test_rule_judge_categories():
    assert rule([user("hi")], termination="agent_stop").categories == ("premature_stop",)
    verdict = rule([user("cancel it"), call("cancel_pending_order", order_id="#W1", reason="x")])
    assert verdict.categories == ("unconfirmed_write",) and verdict.score == -1.0
    confirmed = rule([user("Yes, please go ahead"), call("cancel_pending_order", order_id="#W1", reason="x")])
    assert confirmed.categories == () and confirmed.score == 1.0
    verdict = rule([call("delete_everything")], parse_failures=2, termination="max_turns")
    assert set(verdict.categories) == {"parse_failure", "wrong_tool", "max_turns_reached"}
    assert verdict.score == -0.5


def test_rule_judge_taxonomy_is_configurable():
    judge = build("judges", "rule_taxonomy", taxonomy={"no_error": 0.5, "parse_failure": -0.2})
    verdict = asyncio.run(judge.judge(JudgeInput(info([], parse_failures=1, tool_errors=3), TASK, RETAIL.write_tools)))
    assert verdict.categories == ("parse_failure",) and verdict.score == -0.2


def llm_judge(server, **params):
    return build("judges", "llm_taxonomy", model="judge-model", base_url=server.base_url, api_key_env=None, backoff_s=0.01, **params)


def test_llm_judge_validates_its_json_answer():
    conversation = [user("cancel"), call("cancel_pending_order", order_id="#W1", reason="x")]
    answers = [
        Answer.text('Here: {"categories": ["unconfirmed_write", "tool_error"], "explanation": "did not ask"}'),
        Answer.text('{"categories": ["made_up"]}'),
        Answer.text("no json at all"),
        Answer.text('{"categories": "tool_error"}'),
        Answer.text('{"categories": ["no_error"]}'),
    ]
    with ScriptedOpenAIServer(answers) as server:
        judge = llm_judge(server)
        verdicts = [asyncio.run(judge.judge(JudgeInput(info(conversation), TASK, RETAIL.write_tools))) for _ in answers]
    assert verdicts[0].score == -1.0 and verdicts[0].categories == ("unconfirmed_write", "tool_error")
    assert all(v.score is None and v.error for v in verdicts[1:4])
    assert verdicts[4].score == 1.0
    prompt = server.requests[0]["messages"][0]["content"]
    assert "unconfirmed_write" in prompt and "cancel_pending_order" in prompt


def test_llm_judge_failures_are_verdicts_not_exceptions():
    with ScriptedOpenAIServer(default=Answer.error(500)) as server:
        verdict = asyncio.run(llm_judge(server, max_retries=1).judge(JudgeInput(info([]), TASK, RETAIL.write_tools)))
    assert verdict.score is None and "500" in verdict.error and len(server.requests) == 2


def test_taxonomy_scores_are_checked():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"\[-1, 1\]"):
        build("judges", "rule_taxonomy", taxonomy={"no_error": 1.0, "x": 2.0})
    with pytest.raises(ValidationError, match="no_error"):
        build("judges", "rule_taxonomy", taxonomy={"x": -1.0})


def context(conversation, phase="train", stop="stop", **fields) -> RewardContext:
    return RewardContext(info(conversation, **fields), TASK, RETAIL.write_tools, phase, stop)


def apply(name: str, reward: float, ctx: RewardContext, **params) -> float:
    return asyncio.run(build("rewards", name, **params).apply(reward, ctx))


def test_tau_outcome_adds_the_environment_reward():
    assert apply("tau_outcome", 0.0, context([], reward=1.0)) == 1.0
    assert apply("tau_outcome", 0.0, context([], reward=0.0)) == 0.0


def test_partial_credit_is_the_matched_fraction_of_gold_actions():
    gold = [a for a in TASK.evaluation_criteria.actions if a.requestor == "assistant"]
    half = [call(a.name, **a.arguments) for a in gold[: len(gold) // 2]]
    expected = 0.5 * (len(gold) // 2) / len(gold)
    assert apply("partial_credit", 0.0, context(half)) == pytest.approx(expected)
    wrong = [call(gold[0].name, **{k: "wrong" for k in gold[0].arguments})]
    assert apply("partial_credit", 0.0, context(wrong), weight=1.0) == 0.0


def test_partial_credit_can_count_the_first_actions_and_match_tool_names_only():
    gold = [a for a in TASK.evaluation_criteria.actions if a.requestor == "assistant"]
    assert len(gold) >= 2 and gold[1].name != gold[0].name
    named = [call(gold[0].name, **{k: "wrong" for k in gold[0].arguments})]  # the right tool, wrong arguments
    assert apply("partial_credit", 0.0, context(named), weight=1.0, first_actions=1) == 0.0
    assert apply("partial_credit", 0.0, context(named), weight=1.0, first_actions=1, match="name") == 1.0
    assert apply("partial_credit", 0.0, context(named), weight=1.0, first_actions=2, match="name") == 0.5
    assert apply("partial_credit", 0.0, context(named), weight=1.0, match="name") == pytest.approx(1 / len(gold))
    assert apply("partial_credit", 0.0, context([call(gold[1].name)]), weight=1.0, first_actions=1, match="name") == 0.0


def test_partial_credit_by_arguments_credits_the_characters_written_in_place():
    gold = [a for a in TASK.evaluation_criteria.actions if a.requestor == "assistant"]
    first = gold[0]  # find_user_id_by_name_zip(first_name=Yusuf, last_name=Rossi, zip=19122)
    exact = [call(first.name, **first.arguments)]
    assert apply("partial_credit", 0.0, context(exact), weight=1.0, first_actions=1, match="arguments") == 1.0
    near = [call(first.name, **{**first.arguments, "zip": first.arguments["zip"][:4] + "9"})]  # one digit of 5 wrong
    assert apply("partial_credit", 0.0, context(near), weight=1.0, first_actions=1, match="arguments") == pytest.approx((1 + 1 + 4 / 5) / 3)
    assert apply("partial_credit", 0.0, context(near), weight=1.0, first_actions=1) == 0.0  # `call` gives it nothing
    short = [call(first.name, **{**first.arguments, "zip": "1912"})]  # a dropped digit: 4 of the longer 5 in place
    assert apply("partial_credit", 0.0, context(short), weight=1.0, first_actions=1, match="arguments") == pytest.approx((2 + 4 / 5) / 3)
    shifted = [call(first.name, **{**first.arguments, "zip": "9122"})]  # the first digit dropped: one "2" stays in place
    assert apply("partial_credit", 0.0, context(shifted), weight=1.0, first_actions=1, match="arguments") == pytest.approx((2 + 1 / 5) / 3)
    assert apply("partial_credit", 0.0, context([call("get_order_details", **first.arguments)]), weight=1.0, first_actions=1,
                 match="arguments") == 0.0  # another tool earns nothing
    # each call credits one action, the one it matches best; the better of two calls counts
    both = [call(first.name, **{**first.arguments, "zip": "00000"}), *near]
    assert apply("partial_credit", 0.0, context(both), weight=1.0, first_actions=1, match="arguments") == pytest.approx((2 + 4 / 5) / 3)
    items = gold[-1]  # a list argument is compared as its JSON text
    assert items.name == "exchange_delivered_order_items"
    wrong_items = {**items.arguments, "item_ids": list(reversed(items.arguments["item_ids"]))}
    credit = apply("partial_credit", 0.0, context([call(items.name, **wrong_items)]), weight=1.0, match="arguments")
    assert 0.0 < credit < 1 / len(gold)


def test_format_penalty_is_capped():
    assert apply("format_penalty", 1.0, context([], parse_failures=2)) == pytest.approx(0.8)
    assert apply("format_penalty", 1.0, context([], parse_failures=50, empty_turns=3)) == pytest.approx(0.5)


def test_zero_on_non_stop():
    assert apply("zero_on_non_stop", 1.0, context([], stop="length")) == 0.0
    assert apply("zero_on_non_stop", 1.0, context([], stop="stop")) == 1.0


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
def test_rewards_and_the_rule_judge_see_the_calls_of_a_text_mode_turn_as_of_a_native_one(native):
    """Tool calls the policy wrote as Hermes text (text mode) count for `partial_credit` and the rule judge
    exactly as the same calls made natively: both read tau2's trajectory, not the OpenAI conversation (whose
    text-mode turns are raw text)."""
    from ctu.components.parsers.hermes import HermesParser
    from ctu.components.user_simulators.scripted import ScriptedUserSimulator
    from tau_bench_env.episode import Episode
    from tau_bench_env.interfaces import ParsedTurn, ToolCall
    from tau_bench_env.outcome import EpisodeConfig

    gold = TASK.evaluation_criteria.actions[0]
    calls = [ToolCall(gold.name, dict(gold.arguments)), ToolCall("cancel_pending_order", {"order_id": "#W0000000", "reason": "x"})]
    episode = Episode(RETAIL, TASK, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=5))

    async def play() -> EpisodeResult:
        await episode.reset()
        for call in calls:
            if native:
                await episode.step(ParsedTurn("", (call,)))
            else:
                await episode.step("<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.arguments}) + "\n</tool_call>")
        await episode.step(ParsedTurn("Done."))
        return episode.result()

    result = asyncio.run(play())
    assert ("tool_calls" in result.conversation[3]) == native  # text mode keeps the raw text the policy wrote
    gold_calls = [a for a in TASK.evaluation_criteria.actions if a.requestor == "assistant"]
    ctx = RewardContext(result, TASK, RETAIL.write_tools, "train")
    assert apply("partial_credit", 0.0, ctx, weight=1.0) == pytest.approx(1 / len(gold_calls))
    verdict = asyncio.run(build("judges", "rule_taxonomy").judge(JudgeInput(result, TASK, RETAIL.write_tools)))
    assert "unconfirmed_write" in verdict.categories and "premature_stop" not in verdict.categories


def mast_answer(yes: set[str], summary: str = "Summary: checked.") -> str:
    from ctu.components.judges.mast import MAST_FAILURE_MODES

    return "\n".join(f"{code}: {'yes' if code in yes else 'no'}" for code in MAST_FAILURE_MODES) + "\n" + summary


def test_mast_judge_and_the_taxonomy_feedback_reward_add_alpha_over_the_failures():
    """CTU-Agent-v0's bonus: alpha / failures, alpha with none (alpha 0.5), in training only; an answer without
    yes or no for every one of the 14 modes, or a failed call, is a judge failure that adds nothing."""
    from ctu.components.judges.mast import MAST_FAILURE_MODES

    every = set(MAST_FAILURE_MODES)
    answers = [
        Answer.text(mast_answer(set())),
        Answer.text("**1.3 Step Repetition**: yes\n" + mast_answer(set()).replace("1.3: no\n", "")),  # markdown, names
        Answer.text(mast_answer(every)),
        Answer.text(mast_answer(set()).replace("2.4: no\n", "")),  # a mode left out
        Answer.text(mast_answer(set()) + "\n1.1: yes"),  # one mode both ways
        Answer.text("The agent did fine."),
    ]
    conversation = [user("cancel"), call("cancel_pending_order", order_id="#W1", reason="x")]
    with ScriptedOpenAIServer(answers + [Answer.error(500)] * 2) as server:
        judge = build("judges", "mast", model="gpt-4o-mini", base_url=server.base_url, api_key_env=None, backoff_s=0.01, max_retries=1)
        reward = build("rewards", "taxonomy_feedback", judge_object=judge, weight=0.5)
        contexts = [context(conversation, reward=1.0) for _ in range(len(answers) + 1)]
        totals = [asyncio.run(reward.apply(1.0, ctx)) for ctx in contexts]
    assert totals[:3] == [1.5, 1.5, pytest.approx(1.0 + 0.5 / 14)]
    assert [ctx.verdict["categories"] for ctx in contexts[:3]] == [[], ["1.3"], sorted(every)]
    assert totals[3:] == [1.0] * 4  # malformed (3) and a failed call: nothing added, each counted as a failure
    assert [ctx.metrics["judge/failures"] for ctx in contexts] == [0.0] * 3 + [1.0] * 4
    assert "2.4" in contexts[3].verdict["error"] and "1.1" in contexts[4].verdict["error"]
    request = server.requests[0]
    assert request["model"] == "gpt-4o-mini" and request["temperature"] == 1.0
    prompt = request["messages"][0]["content"]
    assert "3.3 Weak verification" in prompt and "cancel_pending_order" in prompt
    assert registry.rewards.get("taxonomy_feedback").factory.training_only  # never in evaluation
