"""The `json`, `openai`, `python_call`, `react` and `auto` parsers, and a no-raise property for every parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctu.components.parsers.base import ToolCall
from ctu.components.parsers.jsonutil import repair_truncated
from ctu.registry import registry


def parser(name: str, **params):
    info = registry.parsers.get(name)
    return info.build(info.params_model(**params))


CALL = ToolCall("get_order_details", {"order_id": "#W1"})


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("json", 'Checking.\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}'),
        ("json", '```json\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n```'),
        ("json", '{"name": "get_order_details", "arguments": "{\\"order_id\\": \\"#W1\\"}"}'),
        ("openai", '{"tool_calls": [{"type": "function", "function": {"name": "get_order_details", "arguments": "{\\"order_id\\": \\"#W1\\"}"}}]}'),
        ("python_call", 'get_order_details(order_id="#W1")'),
        ("python_call", 'Let me check.\n```python\nget_order_details(order_id="#W1")\n```'),
        ("react", 'Thought: I need the order.\nAction: get_order_details\nAction Input: {"order_id": "#W1"}'),
        ("auto", '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W1"}}</tool_call>'),
        ("auto", 'get_order_details(order_id="#W1")'),
        ("auto", 'Action: get_order_details\nAction Input: {"order_id": "#W1"}'),
    ],
)
def test_one_call(name, text):
    turn = parser(name).parse(text)
    assert turn.tool_calls == (CALL,), turn
    assert not turn.is_parse_failure


@pytest.mark.parametrize("name", ["hermes", "json", "openai", "python_call", "react", "auto"])
def test_natural_language_is_a_reply(name):
    text = "I'm sorry to hear that (really). Could you tell me your zip code, please?"
    turn = parser(name).parse(text)
    assert turn.tool_calls == () and not turn.is_parse_failure
    assert turn.content == text


def test_several_calls():
    text = '[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]'
    assert [c.name for c in parser("json").parse(text).tool_calls] == ["a", "b"]
    text = 'a(x=1)\nb(y="z")'
    assert parser("python_call").parse(text).tool_calls == (ToolCall("a", {"x": 1}), ToolCall("b", {"y": "z"}))
    text = '{"tool_calls": [{"function": {"name": "a", "arguments": "{}"}}, {"function": {"name": "b", "arguments": {"k": true}}}]}'
    assert [c.arguments for c in parser("openai").parse(text).tool_calls] == [{}, {"k": True}]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("json", '{"name": "get_order_details", "arguments": {"order_id": "#W1"'),
        ("openai", '{"tool_calls": [{"function": {"name": "get_order_details", "arguments": {"order_id": "#W1"'),
        ("react", 'Action: get_order_details\nAction Input: {"order_id": "#W1"'),
    ],
)
def test_truncated_calls_are_repaired(name, text):
    assert parser(name).parse(text).tool_calls == (CALL,)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("json", '{"name": "f", "arguments": [1]}'),
        ("json", '{"name": "f", "arguments": {"a": 1]}'),
        ("openai", '{"tool_calls": "nope"}'),
        ("python_call", "get_order_details('#W1')"),
        ("python_call", "get_order_details(order_id=lookup())"),
        ("react", "Action: get_order_details\nAction Input: [1, 2]"),
        ("react", "Action: get order\nAction Input: {}"),
        ("auto", '<tool_call>{"name": 1}</tool_call>'),
    ],
)
def test_broken_calls_are_parse_failures(name, text):
    turn = parser(name).parse(text)
    assert turn.is_parse_failure, turn
    assert turn.tool_calls == ()


def test_react_respond_and_thought_is_hidden():
    turn = parser("react").parse('Thought: be polite\nAction: respond\nAction Input: {"content": "Hello!"}')
    assert turn.content == "Hello!" and turn.tool_calls == ()
    assert parser("react").parse("Thought: hmm\nSure, one moment.").content == "Sure, one moment."


def test_auto_order_is_configurable():
    text = 'Action: a\nAction Input: {}\n{"name": "b", "arguments": {}}'
    assert parser("auto", order=["json", "react"]).parse(text).tool_calls[0].name == "b"
    assert parser("auto", order=["react", "json"]).parse(text).tool_calls[0].name == "a"


def test_repair_only_closes_truncations():
    assert json.loads(repair_truncated('{"a": [1, {"b": "c')) == {"a": [1, {"b": "c"}]}
    assert repair_truncated('{"a": 1]') is None
    assert repair_truncated('{"a": 1}') is None
    assert repair_truncated('{"a":') is None


@pytest.mark.parametrize("name", ["hermes", "json", "openai", "python_call", "react"])
def test_render_tools_mentions_every_tool(name):
    tools = [{"type": "function", "function": {"name": "get_order_details", "parameters": {"type": "object"}}}]
    assert "get_order_details" in parser(name).render_tools(tools)


FRAGMENTS = ["<tool_call>", "</tool_call>", "{", "}", "[", "]", '"name"', ":", ",", '"arguments"', "Action:", "Action Input:",
             "```", "```python\n", "(", ")", "=", '"', "\\", "\n", "tool_calls", "f", "1", "null", "respond"]
adversarial = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.text() | adversarial, name=st.sampled_from(["hermes", "json", "openai", "python_call", "react", "auto"]))
def test_no_parser_ever_raises(text, name):
    turn = parser(name).parse(text)
    assert isinstance(turn.content, str)
    for call in turn.tool_calls:
        assert isinstance(call.name, str) and isinstance(call.arguments, dict)
        json.dumps(call.arguments)


@pytest.mark.parametrize("name, text", [
    ("hermes", '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W2378156"'),
    ("json", '{"name": "get_order_details", "arguments": {"order_id": "#W2378156"'),
    ("openai", '{"tool_calls": [{"type": "function", "function": {"name": "get_order_details", "arguments": "{\\"order_id\\": \\"#W2378156\\"}"}}'),
    ("react", 'Thought: look it up\nAction: get_order_details\nAction Input: {"order_id": "#W2378156"'),
])
def test_truncated_json_repair_is_a_parser_option_the_spec_can_turn_off(name, text):
    from ctu.registry import registry

    info = registry.parsers.get(name)
    repaired = info.build(info.params_model()).parse(text)
    assert repaired.tool_calls == (ToolCall("get_order_details", {"order_id": "#W2378156"}),) and not repaired.parse_errors
    strict = info.build(info.params_model(repair_truncated_json=False)).parse(text)
    assert strict.tool_calls == () and strict.is_parse_failure
    auto = registry.parsers.get("auto")
    assert auto.build(auto.params_model(order=[name], repair_truncated_json=False)).parse(text).is_parse_failure
    assert auto.build(auto.params_model(order=[name])).parse(text).tool_calls == repaired.tool_calls


def gold_turns() -> list:
    """Every distinct assistant turn of tau2's retail and airline gold replays (`GoldReplayAgent`), each a call or a
    reply, plus a reply with quotes, non-ASCII text and a newline."""
    from ctu.components.domains import build_domain
    from tau_bench_env.interfaces import ParsedTurn
    from tau_bench_env.replay import GoldReplayAgent

    turns = [ParsedTurn(content='Done: "café" refunded.\nAnything else?')]
    for name in ("retail", "airline"):
        for task in build_domain(name, {}).tasks("base"):
            turns += list(GoldReplayAgent(task).turns())
    return turns


@pytest.mark.parametrize("name", ["hermes", "json", "openai", "python_call", "react", "auto"])
def test_every_builtin_parser_reads_back_what_it_writes(name):
    """`write` is `parse`'s inverse on every gold turn of tau2's retail and airline tasks (the turns `ctu data sft`
    writes in text mode)."""
    from ctu.registry.config import ComponentConfig

    parser = ComponentConfig.named("parsers", name, {}).build()
    turns = gold_turns()
    assert len(turns) > 500
    for turn in turns:
        read = parser.parse(parser.write(turn))
        assert (read.content, read.tool_calls, read.parse_errors) == (turn.content.strip(), turn.tool_calls, ()), turn
