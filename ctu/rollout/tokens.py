"""Token accounting for multi-turn rollouts: prompt ids, observation ids and re-tokenised assistant turns,
all through the chat-template policy (the one place ctu tokenises conversations).

Observation tokens are found the way SkyRL's multi-turn generator finds them: render a fixed base
conversation followed by the observations, and keep what comes after the base assistant turn's end-of-turn
token. The base's end is located by a marker, not by prefix length, so templates that render the last
assistant turn differently (Qwen3's thinking blocks) still give the right delta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MARKER = "ctu-base-assistant-turn"
BASE = [
    {"role": "system", "content": "ctu"},
    {"role": "user", "content": "ctu"},
    {"role": "assistant", "content": MARKER},
]


@dataclass
class TokenAccount:
    """Tokenisation of one rollout's conversation with a chat-template `policy` over `tokenizer`."""

    policy: Any
    tokenizer: Any

    def __post_init__(self) -> None:
        self.eos_text: str = self.tokenizer.eos_token or ""
        self.eos_id: int | None = self.tokenizer.eos_token_id

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """Ids of the prompt, ending with the generation prompt."""
        return self.policy.encode(self.tokenizer, messages, tools, add_generation_prompt=True)

    def _after_base(self, text: str) -> str:
        position = text.find(MARKER)
        if position == -1:
            raise ValueError("the chat template dropped the base assistant turn; cannot tokenise observations")
        position += len(MARKER)
        if self.eos_text and text.startswith(self.eos_text, position):
            position += len(self.eos_text)
        return text[position:]

    def observation_ids(self, observations: list[dict[str, Any]], turn_closed: bool) -> list[int]:
        """Ids that follow a policy turn: the rest of the turn's closing (plus the end-of-turn token itself if
        the turn was cut by the length limit, `turn_closed` False), the observations, and the next generation
        prompt."""
        text = self._after_base(self.policy.render(self.tokenizer, BASE + observations, None, add_generation_prompt=True))
        if not turn_closed:
            text = self.eos_text + text
        return self.policy.encode_text(self.tokenizer, text)

    def assistant_ids(self, conversation: list[dict[str, Any]], message: dict[str, Any], tools: list[dict[str, Any]] | None) -> list[int]:
        """Ids of a structured assistant turn (native tool calling) as the template renders it, ending with the
        end-of-turn token: the re-tokenisation of a chat-completion answer."""
        before = self.policy.render(self.tokenizer, conversation, tools, add_generation_prompt=True)
        after = self.policy.render(self.tokenizer, [*conversation, message], tools, add_generation_prompt=False)
        if not after.startswith(before):
            raise ValueError("the chat template is not prefix-stable for an assistant turn")
        turn = after[len(before):]
        end = turn.find(self.eos_text) if self.eos_text else -1
        if end != -1:
            turn = turn[: end + len(self.eos_text)]
        return self.policy.encode_text(self.tokenizer, turn)

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, special tokens dropped (what the parser sees)."""
        return self.policy.decode(self.tokenizer, ids)
