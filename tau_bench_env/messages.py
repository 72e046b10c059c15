"""tau2 messages <-> OpenAI chat messages: the one conversion used by episodes, user simulators and logs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tau2.data_model.message import Message, ToolCall


def tool_call_to_openai(call: ToolCall) -> dict[str, object]:
    """``{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}``."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
    }


def to_openai(message: Message) -> list[dict[str, object]]:
    """One tau2 message as OpenAI chat messages (a `MultiToolMessage` becomes several ``tool`` messages).

    Roles are kept as they are (no flipping): system, user, assistant (with ``tool_calls``), tool (with
    ``tool_call_id``). A message with tool calls has ``content`` None unless it also carries text.
    """
    role = message.role
    if role == "tool" and hasattr(message, "tool_messages"):
        return [item for tool_message in message.tool_messages for item in to_openai(tool_message)]
    if role == "tool":
        return [{"role": "tool", "tool_call_id": message.id, "content": message.content or ""}]
    converted: dict[str, object] = {"role": role, "content": message.content}
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        converted["tool_calls"] = [tool_call_to_openai(call) for call in tool_calls]
    elif converted["content"] is None:
        converted["content"] = ""
    return [converted]


def conversation_to_openai(messages: list[Message]) -> list[dict[str, object]]:
    """Every message of `messages`, converted with `to_openai`, in order."""
    return [item for message in messages for item in to_openai(message)]


def parse_openai_tool_calls(tool_calls: list[Any] | None, requestor: str) -> tuple[list[ToolCall], list[str]]:
    """OpenAI ``tool_calls`` (dicts or SDK objects) -> tau2 `ToolCall`s with `requestor`, and parse errors.

    A call whose arguments are not a JSON object is left out and reported, never raised.
    """
    from tau2.data_model.message import ToolCall

    calls: list[ToolCall] = []
    errors: list[str] = []
    for index, raw in enumerate(tool_calls or []):
        data = raw if isinstance(raw, dict) else raw.model_dump()
        function = data.get("function") or {}
        name = function.get("name")
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError as exc:
            errors.append(f"arguments of tool call {name!r} are not JSON: {exc.msg}")
            continue
        if not isinstance(name, str) or not name or not isinstance(parsed, dict):
            errors.append(f"malformed tool call {data!r}")
            continue
        calls.append(ToolCall(id=data.get("id") or f"call_{index}", name=name, arguments=parsed, requestor=requestor))
    return calls, errors
