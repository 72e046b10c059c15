"""The chat-template seam: how ctu turns conversations (and tools) into text and token ids."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Protocol

from ctu.registry import registry


class Tokenizer(Protocol):
    """What ctu calls of a policy's tokenizer: a Hugging Face tokenizer (`transformers.PreTrainedTokenizerBase`) has
    all of it; the chat template's own calls (`apply_chat_template`, a fast tokenizer's Rust backend) are the
    template's business."""

    @property
    def eos_token(self) -> str | None:
        """The end-of-turn token's text."""
        ...

    @property
    def eos_token_id(self) -> int | None:
        """The end-of-turn token's id (sampling stops there)."""
        ...

    @property
    def all_special_tokens(self) -> list[str]:
        """Every special token's text."""
        ...

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`."""
        ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str | list[str]:
        """Text of `token_ids` (a Hugging Face tokenizer's type allows a batch's texts too)."""
        ...


class ChatTemplate(Protocol):
    """A built chat-template policy (the `chat_templates` kind's contract, `ctu.registry.contracts`): the calls
    ctu's token accounting (`ctu.rollout.tokens`) makes, and the template's own arguments (e.g.
    ``{"enable_thinking": False}``), which SkyRL's generator and vLLM's chat endpoint are given too."""

    template_kwargs: ClassVar[dict[str, object]]

    def render(self, tokenizer: Tokenizer, messages: Sequence[Mapping[str, object]], tools: Sequence[Mapping[str, object]] | None, *,
               add_generation_prompt: bool = False) -> str:
        """The conversation (OpenAI-format messages; `tools` rendered by the template, None for none) as the model's
        prompt text, ending with the assistant header when `add_generation_prompt`."""
        ...

    def encode_text(self, tokenizer: Tokenizer, text: str) -> list[int]:
        """Token ids of an already-rendered piece of conversation text (no special tokens added)."""
        ...

    def decode(self, tokenizer: Tokenizer, ids: list[int]) -> str:
        """Text of `ids`, as a parser should see it."""
        ...


registry.chat_templates.declare_contract(ChatTemplate)


def reasoning_splitter(template: object) -> Callable[[str], tuple[str, str]] | None:
    """A thinking template's optional ``split_reasoning(text) -> (reasoning, answer)`` (e.g. `qwen3_thinking`'s), or
    None: a template that has one samples reasoning the environment never sees and later prompts leave out, so the
    rollout renders each turn's prompt from the conversation and trains turn by turn (``rollout.trajectory:
    step_wise``). Optional, so templates written before it keep working."""
    split = getattr(template, "split_reasoning", None)
    return split if callable(split) else None
