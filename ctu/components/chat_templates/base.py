"""The chat-template seam: how ctu turns conversations (and tools) into text and token ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from ctu.registry import registry


class ChatTemplate(Protocol):
    """A built chat-template policy (the `chat_templates` kind's contract, `ctu.registry.contracts`): the calls
    ctu's token accounting (`ctu.rollout.tokens`) makes, and the template's own arguments (e.g.
    ``{"enable_thinking": False}``), which SkyRL's generator and vLLM's chat endpoint are given too."""

    template_kwargs: ClassVar[dict[str, object]]

    def render(self, tokenizer: Any, messages: Sequence[Mapping[str, object]], tools: Sequence[Mapping[str, object]] | None, *,
               add_generation_prompt: bool = False) -> str:
        """The conversation (OpenAI-format messages; `tools` rendered by the template, None for none) as the model's
        prompt text, ending with the assistant header when `add_generation_prompt`."""
        ...

    def encode_text(self, tokenizer: Any, text: str) -> list[int]:
        """Token ids of an already-rendered piece of conversation text (no special tokens added)."""
        ...

    def decode(self, tokenizer: Any, ids: list[int]) -> str:
        """Text of `ids`, as a parser should see it."""
        ...


registry.chat_templates.declare_contract(ChatTemplate)
