"""`openai`: calls written in OpenAI's response shape, ``{"tool_calls": [{"function": {...}}]}``."""

from __future__ import annotations

import json

from ctu.components.parsers.base import JsonCallParams, ParsedTurn, ParserBase, ToolCall
from ctu.components.parsers.hermes import tool_call_from_json
from ctu.components.parsers.json_call import render_json_tools
from ctu.components.parsers.jsonutil import iter_json_objects, repair_truncated


class OpenAIFormatParser(ParserBase):
    """``{"tool_calls": [{"type": "function", "function": {"name": ..., "arguments": ...}}]}`` in the text."""

    class Params(JsonCallParams):
        pass

    params: JsonCallParams

    def render_tools(self, tools: list[dict[str, object]]) -> str:
        """The tools and OpenAI's `tool_calls` format."""
        example = '{"tool_calls": [{"type": "function", "function": {"name": "<function-name>", "arguments": "<args as JSON>"}}]}'
        return render_json_tools(tools, example)

    def write(self, turn: ParsedTurn) -> str:
        """`turn` as this parser reads it: its reply, then one `tool_calls` object (arguments as JSON strings)."""
        calls = [{"type": "function", "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
                 for call in turn.tool_calls]
        block = json.dumps({"tool_calls": calls}, ensure_ascii=False) if calls else ""
        return "\n".join(part for part in (turn.content.strip(), block) if part)

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn; never raises."""
        calls: list[ToolCall] = []
        errors: list[str] = []
        spans = []
        for start, end, value in iter_json_objects(text):
            if isinstance(value, dict) and "tool_calls" in value:
                spans.append((start, end))
                self._collect(value["tool_calls"], calls, errors)
        rest = text
        for start, end in reversed(spans):
            rest = rest[:start] + rest[end:]
        marker = rest.find('"tool_calls"')
        if marker != -1:
            start = rest.rfind("{", 0, marker)
            repair = start != -1 and self.params.repair_truncated_json
            repaired = repair_truncated(rest[start:].strip()) if repair else None
            try:
                value = json.loads(repaired) if repaired else None
            except json.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                self._collect(value.get("tool_calls"), calls, errors)
            else:
                errors.append("unparsable tool_calls object")
            rest = rest[: start if start != -1 else marker]
        return ParsedTurn(content=rest.strip(), tool_calls=tuple(calls), parse_errors=tuple(errors))

    @staticmethod
    def _collect(items: object, calls: list[ToolCall], errors: list[str]) -> None:
        if not isinstance(items, list):
            errors.append("`tool_calls` must be a list")
            return
        for item in items:
            function = item.get("function", item) if isinstance(item, dict) else None
            if not isinstance(function, dict):
                errors.append(f"malformed tool call {item!r}"[:200])
                continue
            result = tool_call_from_json(json.dumps(function))
            if isinstance(result, ToolCall):
                calls.append(result)
            else:
                errors.append(result)
