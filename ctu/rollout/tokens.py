"""Token accounting for multi-turn rollouts: prompt ids, observation ids and re-tokenised assistant turns,
all through the chat-template policy (the one place ctu tokenises conversations).

Observation tokens are found the way SkyRL's multi-turn generator finds them: render a fixed base
conversation followed by the observations, and keep what comes after the base assistant turn's end-of-turn
token. The base's end is located by a marker, not by prefix length, so templates that render the last
assistant turn differently (Qwen3's thinking blocks) still give the right delta. A structured assistant turn
(native tool calling) is rendered the same way, after a fixed two-message base, so every turn costs the same
whatever the conversation's length.

A prompt's system block (the system prompt and the tool schemas, thousands of tokens and the same for every
episode of a domain) is tokenised once: prompts are split where the first message's block ends, just before
the template's next special token, where a Hugging Face tokenizer never merges across (added tokens split the
text before pre-tokenisation); the first split of each distinct block is checked against a whole encoding.

Within one batch of rollouts (`new_batch()` starts one), a prompt, an observation or a structured assistant
turn whose messages were tokenised before gets the same ids again without rendering (a memo keyed by the
messages' JSON): a GRPO group's samples share their prompt, often make the same tool calls and mostly get the
same tool results back. Tool-call ids are left out of an assistant turn's key when the template does not
render them (checked once on probe turns, `renders_call_ids`): an inference server gives every call a random
id, so samples making the same call would otherwise never share a key. So the samples of a group get
identical ids even if the template's output changes mid-batch (a date in it); the next batch renders anew.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from cachetools import LRUCache

from ctu.components.chat_templates.base import ChatTemplate, Tokenizer

MARKER = "ctu-base-assistant-turn"
CONTEXT = [
    {"role": "system", "content": "ctu"},
    {"role": "user", "content": "ctu"},
]
BASE = [*CONTEXT, {"role": "assistant", "content": MARKER}]
PROBE_CALLS = [
    [{"id": "ctu-probe-0", "type": "function", "function": {"name": "ctu_probe", "arguments": '{"x": 1}'}}],
    [
        {"id": "ctu-probe-0", "type": "function", "function": {"name": "ctu_probe", "arguments": '{"x": 1}'}},
        {"id": "ctu-probe-1", "type": "function", "function": {"name": "ctu_probe", "arguments": "{}"}},
    ],
]
"""Tool calls of the probe turns that tell whether a template renders call ids (`renders_call_ids`)."""
SYSTEM_BLOCKS = 64  # distinct (system prompt, tools) pairs kept rendered: a few per domain
ENCODING_CACHE_TOKENS = 2_000_000  # ids held (8 MB, plus their texts): a few steps' distinct observations
LONGEST_CACHED_TOKENS = 65_536  # longer texts are encoded every time
BATCH_MEMO_TOKENS = 1_000_000  # ids held by the memo of one batch's prompts, observations and turns (<= 36 MB)


@dataclass
class TokenAccount:
    """Tokenisation of one rollout's conversation with a chat-template `policy` over `tokenizer`."""

    policy: ChatTemplate
    tokenizer: Tokenizer

    def __post_init__(self) -> None:
        self.eos_text: str = self.tokenizer.eos_token or ""
        self.eos_id: int | None = self.tokenizer.eos_token_id
        self._system_blocks: dict[str, list[int]] = {}
        self._block_texts: dict[bytes, str] = {}
        self._encoded: LRUCache[str, array] = LRUCache(maxsize=ENCODING_CACHE_TOKENS, getsizeof=len)
        self.encoding_cache_hits = 0
        self.encoding_cache_misses = 0
        self._memo: LRUCache[bytes, tuple[int, ...]] = LRUCache(maxsize=BATCH_MEMO_TOKENS, getsizeof=len)
        self.memo_hits = 0
        self.memo_misses = 0
        self._render_context()
        self.renders_call_ids = self._renders_call_ids()

    def new_batch(self) -> None:
        """Start a batch of rollouts: forget the memo of prompts, observations and assistant turns (see the module
        docstring)."""
        self._memo.clear()

    def _memoised(self, key: object, tokenise: Callable[[], list[int]]) -> list[int]:
        """`tokenise()`, or the ids it gave for the same `key` (JSON data) earlier in the batch; a new list on
        every call. A key that is not JSON data is never memoised."""
        try:
            packed = orjson.dumps(key)
        except TypeError:
            return tokenise()
        ids = self._memo.get(packed)
        if ids is not None:
            self.memo_hits += 1
            return list(ids)  # from a tuple: ~12x faster than from an array (no new int objects)
        self.memo_misses += 1
        fresh = tokenise()
        if len(fresh) <= LONGEST_CACHED_TOKENS:
            self._memo[packed] = tuple(fresh)
        return fresh

    def _render_context(self) -> None:
        """Render the fixed context of `assistant_ids` (again when the template's output for it changed, e.g.
        Llama 3.1's system header, which holds today's date)."""
        plain = self.policy.render(self.tokenizer, CONTEXT, None, add_generation_prompt=False)
        prompted = self.policy.render(self.tokenizer, CONTEXT, None, add_generation_prompt=True)
        if not prompted.startswith(plain):
            raise ValueError("the chat template's generation prompt does not extend the conversation")
        self._context_text = plain
        self._generation_prompt = prompted[len(plain):]

    def _renders_call_ids(self) -> bool:
        """Whether the template's rendering of an assistant turn depends on its tool calls' ids: probe turns
        (one and two calls, with and without text) rendered with two sets of ids differ. A template that
        fails on a probe counts as rendering them (assistant turns are then keyed with their ids)."""
        for content in (None, "ctu"):
            for calls in PROBE_CALLS:
                try:
                    renders = {
                        self.policy.render(self.tokenizer, [*CONTEXT, {"role": "assistant", "content": content, "tool_calls": [
                            {**call, "id": f"{call['id']}-{variant}"} for call in calls
                        ]}], None, add_generation_prompt=False)
                        for variant in ("a", "b")
                    }
                except Exception:
                    return True
                if len(renders) > 1:
                    return True
        return False

    def encode_text(self, text: str) -> list[int]:
        """Ids of a piece of rendered conversation text, through the policy's `encode_text` and the cache above
        (a new list on every call; `encoding_cache_hits` and `encoding_cache_misses` count the calls)."""
        ids = self._encoded.get(text)
        if ids is not None:
            self.encoding_cache_hits += 1
            return ids.tolist()
        self.encoding_cache_misses += 1
        encoded = self.policy.encode_text(self.tokenizer, text)
        if len(encoded) <= LONGEST_CACHED_TOKENS:  # one huge text must not flush the cache
            self._encoded[text] = array("I", encoded)
        return list(encoded)

    def prompt_ids(self, messages: list[dict[str, object]], tools: list[dict[str, object]] | None) -> list[int]:
        """Ids of the prompt, ending with the generation prompt (memoised in the batch, and the system block's
        ids cached, see above)."""
        return self._memoised(("prompt", messages, tools), lambda: self._prompt_ids(messages, tools))

    def _prompt_ids(self, messages: list[dict[str, object]], tools: list[dict[str, object]] | None) -> list[int]:
        text = self.policy.render(self.tokenizer, messages, tools, add_generation_prompt=True)
        if len(messages) < 2:
            return self.policy.encode_text(self.tokenizer, text)
        block = self._system_block(messages[0], tools)
        if not text.startswith(block):  # the template renders it differently now (a date in it): render it anew
            block = self._system_block(messages[0], tools, fresh=True)
        if not block or not text.startswith(block) or not self._splits_at_special_token(text, len(block)):
            return self.policy.encode_text(self.tokenizer, text)
        rest = self.encode_text(text[len(block):])
        cached = self._system_blocks.get(block)
        if cached is None:
            cached = self.policy.encode_text(self.tokenizer, block)
            whole = self.policy.encode_text(self.tokenizer, text)
            if whole != cached + rest:  # this tokenizer merges across the split: never cache its blocks
                return whole
            if len(self._system_blocks) >= SYSTEM_BLOCKS:
                self._system_blocks.clear()
            self._system_blocks[block] = cached
        return cached + rest

    def _system_block(self, first: dict[str, object], tools: list[dict[str, object]] | None, fresh: bool = False) -> str:
        """The rendered text of the conversation's first message with `tools`, cached by their JSON (the same
        for every episode of a domain, and a full render of the tool schemas costs ~0.3 ms); `fresh`: render
        it again and replace the cached text."""
        try:
            key = orjson.dumps([first, tools])
        except TypeError:  # not plain JSON: render it every time
            return self.policy.render(self.tokenizer, [first], tools, add_generation_prompt=False)
        block = None if fresh else self._block_texts.get(key)
        if block is None:
            if len(self._block_texts) >= SYSTEM_BLOCKS:
                self._block_texts.clear()
            block = self._block_texts[key] = self.policy.render(self.tokenizer, [first], tools, add_generation_prompt=False)
        return block

    def _splits_at_special_token(self, text: str, position: int) -> bool:
        """Whether `text[position:]` starts with one of the tokenizer's added special tokens."""
        return any(text.startswith(token, position) for token in self.tokenizer.all_special_tokens if token)

    def _after_base(self, text: str) -> str:
        position = text.find(MARKER)
        if position == -1:
            raise ValueError("the chat template dropped the base assistant turn; cannot tokenise observations")
        position += len(MARKER)
        if self.eos_text and text.startswith(self.eos_text, position):
            position += len(self.eos_text)
        return text[position:]

    def observation_ids(self, observations: list[dict[str, object]], turn_closed: bool) -> list[int]:
        """Ids that follow a policy turn: the rest of the turn's closing (plus the end-of-turn token itself if
        the turn was cut by the length limit, `turn_closed` False), the observations, and the next generation
        prompt (memoised in the batch)."""
        return self._memoised(("observation", observations, turn_closed), lambda: self._observation_ids(observations, turn_closed))

    def _observation_ids(self, observations: list[dict[str, object]], turn_closed: bool) -> list[int]:
        text = self._after_base(self.policy.render(self.tokenizer, [*BASE, *observations], None, add_generation_prompt=True))
        if not turn_closed:
            text = self.eos_text + text
        return self.encode_text(text)

    def assistant_ids(self, message: dict[str, object]) -> list[int]:
        """Ids of a structured assistant turn (native tool calling), ending with the end-of-turn token: the
        re-tokenisation of a chat-completion answer, i.e. what the policy would have generated after the
        generation prompt (memoised in the batch; keyed without tool-call ids when the template does not
        render them).

        The turn is rendered after a fixed two-message context. Where the template renders a past assistant
        turn without part of the generation prompt (a Qwen-style template whose generation prompt opens an
        empty thinking block that past turns leave out), the turn's text starts after the longest line-ending
        part of the generation prompt it repeats.

        Raises:
            ValueError: the template renders the context differently once an assistant turn follows it.
        """
        key = message
        calls = message.get("tool_calls")
        if not self.renders_call_ids and isinstance(calls, list) and calls:
            key = {**message, "tool_calls": [
                {name: value for name, value in call.items() if name != "id"} if isinstance(call, dict) else call
                for call in calls
            ]}
        return self._memoised(("assistant", key), lambda: self._assistant_ids(message))

    def _assistant_ids(self, message: dict[str, object]) -> list[int]:
        after = self.policy.render(self.tokenizer, [*CONTEXT, message], None, add_generation_prompt=False)
        if not after.startswith(self._context_text):  # the context renders differently now (a date in it)?
            self._render_context()
            after = self.policy.render(self.tokenizer, [*CONTEXT, message], None, add_generation_prompt=False)
        if not after.startswith(self._context_text):
            raise ValueError("the chat template is not prefix-stable for an assistant turn")
        turn = after[len(self._context_text):]
        header = self._generation_prompt
        if turn.startswith(header):
            turn = turn[len(header):]
        else:
            cut = 0
            for end in range(len(header)):
                if header[end] == "\n" and turn.startswith(header[: end + 1]):
                    cut = end + 1
            turn = turn[cut:]
        end = turn.find(self.eos_text) if self.eos_text else -1
        if end != -1:
            turn = turn[: end + len(self.eos_text)]
        return self.encode_text(turn)

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, special tokens dropped (what the parser sees)."""
        return self.policy.decode(self.tokenizer, ids)
