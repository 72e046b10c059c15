"""Finding and repairing JSON objects in model text, shared by the parsers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

_DECODER = json.JSONDecoder()


def repair_truncated(text: str) -> str | None:
    """Close what a cut-off JSON text left open (an unterminated string, then brackets in order).

    Only a truncation is repaired: a text whose brackets close in the wrong order, or that has text after
    its closing bracket, is not. Returns the repaired text, or None when nothing unambiguous can be done.
    """
    stack: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":  # noqa: SIM102 - the pop is a side effect, kept out of the branch's condition
            if not stack or stack.pop() != char:
                return None
    if not stack and not in_string:
        return None
    repaired = text + ('"' if in_string else "")
    stripped = repaired.rstrip()
    if stripped.endswith(","):
        repaired = stripped[:-1]
    elif stripped.endswith(":"):
        return None
    return repaired + "".join(reversed(stack))


def loads_lenient(text: str, repair: bool = True) -> Any:
    """`json.loads`, else (when `repair`) the same after `repair_truncated`.

    Raises:
        json.JSONDecodeError: neither parses.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if not repair:
            raise
        repaired = repair_truncated(text.strip())
        if repaired is None:
            raise
        return json.loads(repaired)


def iter_json_objects(text: str) -> Iterator[tuple[int, int, Any]]:
    """Every top-level JSON object or array in `text`: ``(start, end, value)``, left to right, not overlapping."""
    index = 0
    while index < len(text):
        starts = [i for i in (text.find("{", index), text.find("[", index)) if i != -1]
        if not starts:
            return
        start = min(starts)
        try:
            value, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            index = start + 1
            continue
        yield start, end, value
        index = end
