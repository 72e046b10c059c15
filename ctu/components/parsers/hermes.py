"""`hermes`: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, as Qwen2.5 and Qwen3 emit them."""

from __future__ import annotations

import json
import re

from ctu.components.parsers.base import JsonCallParams, ParsedTurn, ParserBase, ToolCall, compact_tool_schemas
from ctu.components.parsers.jsonutil import loads_lenient

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def tool_call_from_json(payload: str, repair: bool = True) -> ToolCall | str:
    """Parse one ``{"name": str, "arguments": object | JSON string}`` payload (a truncated one is repaired when
    `repair`).

    Returns:
        The `ToolCall`, or a message saying why the payload is not one (never raises).
    """
    try:
        data: object = loads_lenient(payload, repair)
    except json.JSONDecodeError as exc:
        return f"invalid JSON in tool call: {exc.msg} at char {exc.pos}"
    if not isinstance(data, dict):
        return f"tool call must be a JSON object, got {type(data).__name__}"
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return "tool call has no string `name`"
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return f"arguments of tool call {name!r} are a string that is not JSON"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"arguments of tool call {name!r} must be a JSON object, got {type(arguments).__name__}"
    return ToolCall(name=name, arguments=arguments)


def format_hermes_calls(calls: list[ToolCall] | tuple[ToolCall, ...]) -> str:
    """Tool calls written as Qwen writes them: one `<tool_call>` block per call, JSON inside."""
    return "\n".join(
        f'<tool_call>\n{json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)}\n</tool_call>' for c in calls
    )


class HermesParser(ParserBase):
    """Hermes-style `<tool_call>` JSON blocks (Qwen2.5, Qwen3); text outside the blocks is the reply to the user.

    A call missing only its closing quotes, braces or `</tool_call>` is repaired (`repair_truncated_json`).
    """

    class Params(JsonCallParams):
        tool_descriptions: bool = True
        """Render each tool's schema with its descriptions. false leaves them out (`compact_tool_schemas`: names,
        arguments and types only): a shorter prompt for a small model or a CPU check, not for tau2's figures."""

    params: Params

    def render_tools(self, tools: list[dict[str, object]]) -> str:
        """The tools as Qwen's chat template presents them: JSON schemas in <tools>, calls in <tool_call>."""
        shown = tools if self.params.tool_descriptions else compact_tool_schemas(tools)
        schemas = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in shown)
        return (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{schemas}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )

    def write(self, turn: ParsedTurn) -> str:
        """`turn` as this parser reads it: its reply, then one `<tool_call>` block per call."""
        return "\n".join(part for part in (turn.content.strip(), format_hermes_calls(turn.tool_calls)) if part)

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn; see `ParsedTurn`. Never raises."""
        calls: list[ToolCall] = []
        errors: list[str] = []
        for match in _BLOCK.finditer(text):
            result = tool_call_from_json(match.group(1).strip(), self.params.repair_truncated_json)
            if isinstance(result, ToolCall):
                calls.append(result)
            else:
                errors.append(result)
        content = _BLOCK.sub("", text).strip()
        return ParsedTurn(content=content, tool_calls=tuple(calls), parse_errors=tuple(errors))
