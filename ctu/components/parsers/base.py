"""The parser seam: text -> `ParsedTurn` (content, tool calls, parse failures). Never raises on model output.

`ToolCall`, `ParsedTurn` and the `Parser` protocol are the environment's (`tau_bench_env.interfaces`), re-exported
here for parser authors; this module adds what ctu's built-in parsers share.
"""

from __future__ import annotations

import json
from typing import cast

from ctu.registry import ComponentParams, registry
from tau_bench_env.interfaces import ParsedTurn, Parser, ToolCall

__all__ = ["JsonCallParams", "ParsedTurn", "Parser", "ParserBase", "ToolCall", "compact_tool_schemas", "render_tool_list"]


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


def compact_tool_schemas(tools: list[dict[str, object]]) -> list[dict[str, object]]:
    """`tools` (OpenAI schemas) without their descriptions and pydantic's `title`s: names, argument names, types
    and required arguments only. Retail's 15 tools take about 1.3k tokens of the built-in tokenizer this way
    instead of 3.1k. New dicts; `tools` is unchanged."""
    noise = ("description", "title")

    def strip(node: object) -> object:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in noise or not isinstance(v, str)}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return [cast("dict[str, object]", strip(tool)) for tool in tools]


def render_tool_list(tools: list[dict[str, object]], call_format: str) -> str:
    """System-prompt text listing `tools` (OpenAI schemas, one JSON per line) followed by `call_format`."""
    schemas = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return f"# Tools\n\nYou can call these functions (JSON schemas):\n{schemas}\n\n{call_format}"


registry.parsers.declare_contract(Parser)
