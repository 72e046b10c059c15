"""The parser seam: text -> `ParsedTurn` (content, tool calls, parse failures). Never raises on model output."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctu.registry import ComponentParams


@dataclass(frozen=True)
class ToolCall:
    """One tool call: the tool's `name` and its `arguments` as a JSON object."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedTurn:
    """One parsed policy turn.

    Attributes:
        content: the text outside tool calls, stripped (what the user sees when there are no tool calls).
        tool_calls: the well-formed tool calls, in order.
        parse_errors: one message per span that looked like a tool call but could not be parsed; a turn with
            any is a parse failure, counted in `reward/parse_failure_rate`.
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    parse_errors: tuple[str, ...] = field(default=())

    @property
    def is_parse_failure(self) -> bool:
        """True when some span looked like a tool call and could not be parsed."""
        return bool(self.parse_errors)


class Parser(Protocol):
    """Turns one turn of policy text into a `ParsedTurn`; must not raise on any input string."""

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn of policy text."""
        ...

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        """System-prompt text presenting `tools` (OpenAI schemas) and this parser's call format (text mode)."""
        ...


class JsonCallParams(ComponentParams):
    """Params of the parsers whose tool calls are JSON."""

    repair_truncated_json: bool = True
    """Run a tool call whose JSON is missing only its closing quotes and brackets (a turn that ended normally but
    slightly malformed) instead of counting it a parse failure. A turn cut off by the token limit is a parse
    failure either way, and its call never runs."""


class ParserBase:
    """Shared constructor of the built-in parsers: `params` default to the class's `Params`."""

    class Params(ComponentParams):
        pass

    def __init__(self, params: ComponentParams | None = None) -> None:
        self.params = params or self.Params()


def render_tool_list(tools: list[dict[str, Any]], call_format: str) -> str:
    """System-prompt text listing `tools` (OpenAI schemas, one JSON per line) followed by `call_format`."""
    schemas = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return f"# Tools\n\nYou can call these functions (JSON schemas):\n{schemas}\n\n{call_format}"
