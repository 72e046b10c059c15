"""Tool-call parsers: the policy's text in, a `ParsedTurn` out. They never raise on model output."""

from ctu.components.parsers.base import ParsedTurn, Parser, ToolCall

__all__ = ["ParsedTurn", "Parser", "ToolCall"]
