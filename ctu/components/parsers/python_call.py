"""`python_call`: ``tool_name(arg="value", n=3)`` lines, bare or in a code block."""

from __future__ import annotations

import ast
import json
import re

from ctu.components.parsers.base import ParsedTurn, ParserBase, ToolCall, render_tool_list

_BLOCK = re.compile(r"```(?:python|py|tool_code)?\s*\n?(.*?)```", re.DOTALL)
_LOOKS_LIKE_CALL = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*\(.*\)?\s*$")


def _literal(node: ast.expr) -> object:
    return ast.literal_eval(node)


def call_from_line(line: str) -> ToolCall | str | None:
    """A call parsed from one line: a `ToolCall`, an error message (it looks like a call but is not a valid
    one), or None (it is not a call)."""
    if not _LOOKS_LIKE_CALL.match(line) or " " in line.split("(", 1)[0].strip():
        return None
    try:
        tree = ast.parse(line.strip(), mode="eval")
    except SyntaxError as exc:
        return f"invalid call syntax: {exc.msg}"
    node = tree.body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    if node.args:
        return f"call {node.func.id!r} must use keyword arguments"
    arguments: dict[str, object] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return f"call {node.func.id!r} cannot use **kwargs"
        try:
            arguments[keyword.arg] = _literal(keyword.value)
        except (ValueError, SyntaxError, TypeError):
            return f"argument {keyword.arg!r} of {node.func.id!r} is not a literal"
    try:
        json.dumps(arguments)
    except (TypeError, ValueError):
        return f"arguments of {node.func.id!r} are not JSON values"
    return ToolCall(node.func.id, arguments)


class PythonCallParser(ParserBase):
    """Python-style calls with keyword literals, ``get_order_details(order_id="#W1")``, one per line or in a block."""

    def render_tools(self, tools: list[dict[str, object]]) -> str:
        """The tools and the call format."""
        return render_tool_list(
            tools,
            'To call one, write a line such as:\nfunction_name(argument="value")\n'
            "using keyword arguments only. To talk to the user, reply with plain text.",
        )

    def write(self, turn: ParsedTurn) -> str:
        """`turn` as this parser reads it: its reply, then one ``name(arg=literal)`` line per call (JSON's
        true/false/null written as Python's)."""
        lines = [f"{call.name}({', '.join(f'{key}={value!r}' for key, value in call.arguments.items())})"
                 for call in turn.tool_calls]
        return "\n".join(part for part in (turn.content.strip(), *lines) if part)

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn; never raises."""
        calls: list[ToolCall] = []
        errors: list[str] = []
        kept: list[str] = []
        body = _BLOCK.sub(lambda m: m.group(1), text)
        for line in body.splitlines():
            result = call_from_line(line)
            if result is None:
                kept.append(line)
            elif isinstance(result, ToolCall):
                calls.append(result)
            else:
                errors.append(result)
        return ParsedTurn(content="\n".join(kept).strip(), tool_calls=tuple(calls), parse_errors=tuple(errors))
