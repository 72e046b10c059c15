"""The `hermes` parser: Qwen-style <tool_call> blocks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctu.components.parsers.base import ToolCall
from ctu.components.parsers.hermes import HermesParser

parser = HermesParser()


def test_one_call_and_surrounding_text():
    turn = parser.parse(
        'Let me look that up.\n<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n</tool_call>'
    )
    assert turn.tool_calls == (ToolCall("get_order_details", {"order_id": "#W1"}),)
    assert turn.content == "Let me look that up."
    assert not turn.is_parse_failure


def test_several_calls_in_one_turn_keep_their_order():
    text = "".join(f'<tool_call>{{"name": "t{i}", "arguments": {{"i": {i}}}}}</tool_call>' for i in range(3))
    assert [c.name for c in parser.parse(text).tool_calls] == ["t0", "t1", "t2"]


def test_plain_text_is_a_reply_to_the_user():
    turn = parser.parse("Could you give me your zip code?")
    assert turn.tool_calls == () and turn.content == "Could you give me your zip code?" and not turn.is_parse_failure


def test_arguments_given_as_a_json_string_are_decoded():
    turn = parser.parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert turn.tool_calls == (ToolCall("f", {"a": 1}),)


def test_unclosed_final_block_with_complete_json_is_parsed():
    turn = parser.parse('<tool_call>{"name": "f", "arguments": {}}')
    assert turn.tool_calls == (ToolCall("f", {}),)


def test_truncated_json_is_repaired_when_only_closers_are_missing():
    turn = parser.parse('<tool_call>{"name": "f", "arguments": {"a": "b')
    assert turn.tool_calls == (ToolCall("f", {"a": "b"}),)
    turn = parser.parse('<tool_call>{"name": "f", "arguments": {"a": [1, 2</tool_call>')
    assert turn.tool_calls == (ToolCall("f", {"a": [1, 2]}),)


def test_malformed_calls_are_parse_failures_not_exceptions():
    for text in (
        "<tool_call>{not json}</tool_call>",
        '<tool_call>["f"]</tool_call>',
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
        '<tool_call>{"name": "f", "arguments": "nope"}</tool_call>',
        '<tool_call>{"name": "f", "arguments": {"a": 1]}</tool_call>',
    ):
        turn = parser.parse(text)
        assert turn.is_parse_failure, text
        assert turn.tool_calls == ()


def test_a_good_call_survives_a_bad_neighbour():
    turn = parser.parse('<tool_call>{bad}</tool_call><tool_call>{"name": "ok", "arguments": {}}</tool_call>')
    assert [c.name for c in turn.tool_calls] == ["ok"] and len(turn.parse_errors) == 1


@settings(max_examples=500, deadline=None)
@given(st.text() | st.builds(lambda a, b: f"{a}<tool_call>{b}", st.text(max_size=20), st.text(max_size=40)))
def test_never_raises(text: str):
    turn = parser.parse(text)
    assert isinstance(turn.content, str)
