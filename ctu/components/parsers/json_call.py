"""`json`: a bare ``{"name": ..., "arguments": {...}}`` object (or a list of them), as many models write calls."""

from __future__ import annotations

import json
import re

from ctu.components.parsers.base import JsonCallParams, ParsedTurn, ParserBase, ToolCall, render_tool_list
from ctu.components.parsers.hermes import tool_call_from_json
from ctu.components.parsers.jsonutil import iter_json_objects, repair_truncated

_FENCE = re.compile(r"```(?:json)?\s*|```")
_CALL_START = re.compile(r'\{\s*"name"\s*:')


def calls_in_json(value: object) -> list[dict[str, object]] | None:
    """The call objects in a parsed JSON value (an object with `name`, or a list of them); None if not calls."""
    items = value if isinstance(value, list) else [value]
    calls = [item for item in items if isinstance(item, dict) and "name" in item]
    if items and len(calls) == len(items):
        return calls
    return None


def render_json_tools(tools: list[dict[str, object]], example: str) -> str:
    """System-prompt text listing `tools` and showing the call format `example`."""
    return render_tool_list(tools, f"To call a function, reply with only:\n{example}\nTo talk to the user, reply with plain text.")


class JsonParser(ParserBase):
    """Bare JSON calls, ``{"name": ..., "arguments": {...}}`` (or a list of them), fenced or not; the rest is text."""

    class Params(JsonCallParams):
        pass

    params: JsonCallParams

    def render_tools(self, tools: list[dict[str, object]]) -> str:
        """The tools and the bare-JSON call format."""
        return render_json_tools(tools, '{"name": "<function-name>", "arguments": {<args>}}')

    def write(self, turn: ParsedTurn) -> str:
        """`turn` as this parser reads it: its reply, then each call as a bare JSON object on a line."""
        calls = [json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False) for call in turn.tool_calls]
        return "\n".join(part for part in (turn.content.strip(), *calls) if part)

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn; never raises."""
        plain = _FENCE.sub("", text)
        calls: list[ToolCall] = []
        errors: list[str] = []
        spans: list[tuple[int, int]] = []
        for start, end, value in iter_json_objects(plain):
            items = calls_in_json(value)
            if items is None:
                continue
            spans.append((start, end))
            for item in items:
                result = tool_call_from_json(json.dumps(item))
                if isinstance(result, ToolCall):
                    calls.append(result)
                else:
                    errors.append(result)
        rest = plain
        for start, end in reversed(spans):
            rest = rest[:start] + rest[end:]
        dangling = _CALL_START.search(rest)
        if dangling:  # a call that does not parse: repair a truncation, else report it
            tail = rest[dangling.start():].strip()
            repaired = repair_truncated(tail) if self.params.repair_truncated_json else None
            result = tool_call_from_json(repaired) if repaired else "unparsable JSON tool call"
            if isinstance(result, ToolCall):
                calls.append(result)
            else:
                errors.append(result)
            rest = rest[: dangling.start()]
        return ParsedTurn(content=rest.strip(), tool_calls=tuple(calls), parse_errors=tuple(errors))
