"""`xml_call`: a parser for tool calls written as ``<call name="tool">{"arg": "value"}</call>``.

A parser turns one turn of policy text into a `ParsedTurn` (the text the user sees, the tool calls, and one error
per span that looked like a call but was malformed) and renders the tools into the system prompt in the format it
reads. It must never raise on model output: a malformed call is a parse failure, counted and shown to the policy.
"""

from __future__ import annotations

import json
import re

from ctu.components.parsers import ParsedTurn, ToolCall
from ctu.registry import ComponentParams, registry

CALL = re.compile(r"<call\s+name=\"([^\"]*)\"\s*>(.*?)</call>", re.DOTALL)
OPENING = re.compile(r"<call\b")


@registry.parsers.register("xml_call")
class XmlCallParser:
    """Tool calls as ``<call name="tool">{json arguments}</call>``, any number per turn."""

    class Params(ComponentParams):
        allow_empty_arguments: bool = True
        """Read ``<call name="t"></call>`` as a call with no arguments (else a parse failure)."""

    def __init__(self, params: Params) -> None:
        self.params = params

    def write(self, turn: ParsedTurn) -> str:
        """`turn` as this parser reads it: its reply, then one ``<call>`` per tool call (for `ctu data sft`)."""
        calls = [f'<call name="{call.name}">{json.dumps(call.arguments)}</call>' for call in turn.tool_calls]
        return "\n".join(part for part in (turn.content.strip(), *calls) if part)

    def parse(self, text: str) -> ParsedTurn:
        """The turn's calls in order; a call whose name is empty or whose body is not a JSON object, or a
        ``<call`` never closed, is a parse error."""
        calls: list[ToolCall] = []
        errors: list[str] = []
        for match in CALL.finditer(text):
            name, body = match.group(1).strip(), match.group(2).strip()
            if not name:
                errors.append("a call without a tool name")
                continue
            if not body and self.params.allow_empty_arguments:
                calls.append(ToolCall(name, {}))
                continue
            try:
                arguments = json.loads(body)
            except ValueError as exc:
                errors.append(f"call to {name}: arguments are not JSON ({exc})")
                continue
            if not isinstance(arguments, dict):
                errors.append(f"call to {name}: arguments must be a JSON object")
                continue
            calls.append(ToolCall(name, arguments))
        rest = CALL.sub("", text)
        if OPENING.search(rest):
            errors.append('a <call name="..."> that is never closed with </call>')
        return ParsedTurn(OPENING.split(rest)[0].strip(), tuple(calls), tuple(errors))

    def render_tools(self, tools: list[dict]) -> str:
        """The tool schemas, one JSON per line, and how to call them."""
        schemas = "\n".join(json.dumps(tool) for tool in tools)
        return (f"# Tools\n\n{schemas}\n\nTo call a tool, write <call name=\"TOOL\">{{\"arg\": \"value\"}}</call>. "
                "Write nothing after your calls; their results come back in the next message.")
