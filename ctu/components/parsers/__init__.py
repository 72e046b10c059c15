"""Tool-call parsers: the policy's text in, a `ParsedTurn` out. They never raise on model output."""

from ctu.components.parsers import auto as auto  # registers "auto" (after the parsers it tries)
from ctu.components.parsers import hermes as hermes  # registers "hermes"
from ctu.components.parsers import json_call as json_call  # registers "json"
from ctu.components.parsers import openai_format as openai_format  # registers "openai"
from ctu.components.parsers import python_call as python_call  # registers "python_call"
from ctu.components.parsers import react as react  # registers "react"
from ctu.components.parsers.base import ParsedTurn, Parser, ToolCall

__all__ = ["ParsedTurn", "Parser", "ToolCall"]
