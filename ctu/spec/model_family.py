"""Model families: inferred from a model path, and what each needs (native tool-call parser, thinking switch)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctu.spec.models import Spec

NATIVE_TOOL_PARSERS: dict[str, str] = {
    "qwen2.5": "hermes",
    "qwen3": "hermes",
    "llama3": "llama3_json",
}
"""vLLM's tool-call parser for each family that supports native tool calling (vLLM `--tool-call-parser`).
On token samplers (Tinker) ctu parses the same format client-side with its parser of that name, or `auto`."""

THINKING_FAMILIES: frozenset[str] = frozenset({"qwen3"})
"""Families whose chat template thinks unless told not to (`enable_thinking=False`)."""

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("qwen3", re.compile(r"qwen-?3")),
    ("qwen2.5", re.compile(r"qwen-?2[._]?5")),
    ("llama3", re.compile(r"llama-?3")),
)


def infer_family(model_path: str) -> str:
    """The family of `model_path` ("qwen3", "qwen2.5", "llama3"), or "other" when the name says nothing.

    >>> infer_family("Qwen/Qwen2.5-3B-Instruct"), infer_family("meta-llama/Llama-3.1-8B-Instruct")
    ('qwen2.5', 'llama3')
    """
    name = model_path.lower()
    for family, pattern in _PATTERNS:
        if pattern.search(name):
            return family
    return "other"


def model_family(spec: Spec) -> str:
    """The spec's model family: `model.family`, or inferred from `model.path` when it is `auto`."""
    return infer_family(spec.model.path) if spec.model.family == "auto" else spec.model.family
