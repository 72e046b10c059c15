"""The built-in chat-template policies over a Hugging Face tokenizer's `apply_chat_template`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from ctu.components.chat_templates.base import Tokenizer
from ctu.registry import ComponentParams


class DefaultChatTemplate:
    """The tokenizer's own chat template, called as the model's authors ship it."""

    template_kwargs: dict[str, object] = {}

    class Params(ComponentParams):
        pass

    def __init__(self, params: ComponentParams) -> None:
        self.params = params

    def chat_template(self) -> str | None:
        """The Jinja template to use instead of the tokenizer's own (None: the tokenizer's)."""
        return None

    def render(
        self,
        tokenizer: Any,  # a Hugging Face tokenizer: its apply_chat_template, not ctu's `Tokenizer`
        messages: Sequence[Mapping[str, object]],
        tools: Sequence[Mapping[str, object]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The conversation as the model's prompt text.

        Args:
            tokenizer: a Hugging Face tokenizer with `apply_chat_template`.
            messages: OpenAI-format messages (system, user, assistant with `tool_calls`, tool).
            tools: OpenAI tool schemas, rendered by the template; None for none.
            add_generation_prompt: end with the assistant header, ready for the next policy turn.
        """
        return tokenizer.apply_chat_template(
            messages,
            tools=tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            chat_template=self.chat_template(),
            **self.template_kwargs,
        )

    def encode(
        self,
        tokenizer: Tokenizer,
        messages: Sequence[Mapping[str, object]],
        tools: Sequence[Mapping[str, object]] | None = None,
        add_generation_prompt: bool = False,
    ) -> list[int]:
        """Token ids of `render(...)`'s text (no special tokens added beyond the template's own)."""
        return self.encode_text(tokenizer, self.render(tokenizer, messages, tools, add_generation_prompt))

    def encode_text(self, tokenizer: Tokenizer, text: str) -> list[int]:
        """Token ids of an already-rendered piece of conversation text.

        A fast tokenizer's Rust backend (`backend_tokenizer`) is called directly: the same ids as
        ``tokenizer.encode(text, add_special_tokens=False)`` without its Python wrapper (about a third of the
        cost of encoding a tool result).
        """
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            return backend.encode(text, add_special_tokens=False).ids
        return list(tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokenizer: Tokenizer, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids` (special tokens dropped by default: what a parser should see).

        As in `encode_text`, a fast tokenizer's Rust backend is called directly where
        ``tokenizer.decode`` would add nothing to it (no ``clean_up_tokenization_spaces``): the same text without
        the wrapper's check of every id (0.11 ms of a policy turn's CPU on the rollout benchmark's retail batch).
        """
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", True):
            return str(backend.decode(ids, skip_special_tokens=skip_special_tokens))
        return str(tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def server_kwargs(self) -> dict[str, object]:
        """What a server-side chat-template call (vLLM's OpenAI endpoint) needs to render as this policy does:
        ``chat_template_kwargs`` (e.g. ``enable_thinking``) and, for a custom template, ``chat_template``."""
        kwargs: dict[str, object] = {"chat_template_kwargs": dict(self.template_kwargs)}
        template = self.chat_template()
        if template is not None:
            kwargs["chat_template"] = template
        return kwargs


class Qwen3NoThinkingChatTemplate(DefaultChatTemplate):
    """Qwen3's template with thinking disabled (`enable_thinking=False`) in every call, prompts and re-tokenisation alike."""

    template_kwargs = {"enable_thinking": False}

    class Params(ComponentParams):
        pass


class Qwen3ThinkingChatTemplate(DefaultChatTemplate):
    """Qwen3's template with thinking on (`enable_thinking=True`): each turn may open with a ``<think>...</think>``
    block. The reasoning is kept in the turn's own training sample and never sent on: the environment (the customer,
    tau2's evaluator) gets the answer after it (`split_reasoning`), so later prompts hold no earlier reasoning, as
    Qwen3's template renders a conversation whose past assistant turns carry none (how a tau2 agent served by vLLM
    with a reasoning parser sees its history). Needs ``rollout.trajectory: step_wise``: a whole-episode sample would
    train each turn on a context with reasoning that the next turn never saw."""

    template_kwargs = {"enable_thinking": True}

    class Params(ComponentParams):
        pass

    def split_reasoning(self, text: str) -> tuple[str, str]:
        """``(reasoning, answer)`` of a sampled turn's text (special tokens already dropped), as Qwen3's template
        splits an assistant message: the answer is what follows the last ``</think>`` (its leading newlines dropped),
        the reasoning what precedes it, after ``<think>`` (stripped of the newlines around it). A turn without
        ``</think>`` is all answer, unless it opens with ``<think>`` (cut off while thinking): then all reasoning and
        no answer (an empty turn to the environment)."""
        opened = text.lstrip().startswith(THINK_OPEN)
        if THINK_CLOSE not in text:
            return (text.lstrip()[len(THINK_OPEN):].strip("\n"), "") if opened else ("", text)
        reasoning, answer = text.rsplit(THINK_CLOSE, 1)
        reasoning = reasoning.lstrip()
        if reasoning.startswith(THINK_OPEN):
            reasoning = reasoning[len(THINK_OPEN):]
        return reasoning.strip("\n"), answer.lstrip("\n")


THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


class JinjaFileChatTemplate(DefaultChatTemplate):
    """A Jinja chat template read from a file, used in place of the tokenizer's own."""

    class Params(ComponentParams):
        path: str = Field(min_length=1)
        """Template file; relative paths are resolved from the working directory."""

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        self.path = Path(params.path)
        self._template: str | None = None

    def chat_template(self) -> str:
        """The file's text (read once)."""
        if self._template is None:
            self._template = self.path.read_text(encoding="utf-8")
        return self._template
