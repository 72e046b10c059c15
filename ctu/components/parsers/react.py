"""`react`: ``Thought: ... / Action: tool_name / Action Input: {json}`` (ReAct, Yao et al. 2023, arXiv:2210.03629)."""

from __future__ import annotations

import json
import re

from ctu.components.parsers.base import JsonCallParams, ParsedTurn, ParserBase, ToolCall, render_tool_list
from ctu.components.parsers.jsonutil import loads_lenient

_ACTION = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.MULTILINE)
_INPUT = re.compile(r"^\s*Action Input\s*:\s*(.*)", re.MULTILINE | re.DOTALL)
_THOUGHT = re.compile(r"^\s*Thought\s*:[^\n]*\n?", re.MULTILINE)
RESPOND = "respond"
"""The action name that means "reply to the user" (its input is the reply, or `{"content": ...}`)."""


def _first_json(raw: str, repair: bool) -> object:
    """The first JSON value at the start of `raw` (text after it is ignored); a truncated one is repaired when
    `repair`."""
    try:
        return json.JSONDecoder().raw_decode(raw)[0]
    except json.JSONDecodeError:
        return loads_lenient(raw, repair)


class ReactParser(ParserBase):
    """ReAct turns: a `Thought:`, then `Action:` with a tool name and `Action Input:` with JSON arguments;
    `Action: respond` (or no action) is a reply to the user. The thought is never shown to the user."""

    class Params(JsonCallParams):
        pass

    params: JsonCallParams

    def render_tools(self, tools: list[dict[str, object]]) -> str:
        """The tools and the ReAct format."""
        return render_tool_list(
            tools,
            f"Answer in this format:\nThought: <your reasoning>\nAction: <function name, or {RESPOND}>\n"
            'Action Input: <JSON arguments, or {"content": "<your message to the user>"}>',
        )

    def write(self, turn: ParsedTurn) -> str:
        """`turn` as this parser reads it: ``Action: <tool>`` with its JSON input, or ``Action: respond`` with the
        reply. ReAct has one action a turn: a turn with a reply and calls, or several calls, cannot be written.

        Raises:
            ValueError: such a turn.
        """
        if len(turn.tool_calls) > 1 or (turn.tool_calls and turn.content.strip()):
            raise ValueError("a ReAct turn is one action: a tool call, or a reply")
        if turn.tool_calls:
            call = turn.tool_calls[0]
            return f"Thought: I call {call.name}.\nAction: {call.name}\nAction Input: {json.dumps(call.arguments, ensure_ascii=False)}"
        reply = json.dumps({"content": turn.content.strip()}, ensure_ascii=False)
        return f"Thought: I reply to the user.\nAction: {RESPOND}\nAction Input: {reply}"

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn; never raises."""
        action = _ACTION.search(text)
        if action is None:
            return ParsedTurn(content=_THOUGHT.sub("", text).strip())
        name = action.group(1).strip()
        raw_input = _INPUT.search(text, action.end())
        raw = raw_input.group(1).strip() if raw_input else ""
        if name == RESPOND:
            try:
                value = loads_lenient(raw, self.params.repair_truncated_json) if raw.startswith("{") else raw
            except json.JSONDecodeError:
                value = raw
            content = value.get("content", "") if isinstance(value, dict) else str(value)
            return ParsedTurn(content=str(content).strip())
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            return ParsedTurn(content="", parse_errors=(f"invalid action name {name!r}",))
        try:
            arguments = _first_json(raw, self.params.repair_truncated_json) if raw else {}
        except json.JSONDecodeError as exc:
            return ParsedTurn(content="", parse_errors=(f"Action Input of {name!r} is not JSON: {exc.msg}",))
        if not isinstance(arguments, dict):
            return ParsedTurn(content="", parse_errors=(f"Action Input of {name!r} must be a JSON object",))
        return ParsedTurn(content="", tool_calls=(ToolCall(name, arguments),))
