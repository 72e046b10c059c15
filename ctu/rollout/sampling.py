"""The sampler seam: the policy behind one small protocol, with adapters for SkyRL, Tinker and scripts.

Token samplers take prompt token ids and return generated token ids (token-in, token-out: what was sampled
is exactly what is trained on). A sampler that `supports_chat` can also answer an OpenAI-style chat request
with tools (SkyRL's OpenAI-compatible endpoint), used for native tool calling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class SamplingParams:
    """Per-turn sampling settings (from the spec's `rollout` section)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    repetition_penalty: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass
class SampleResult:
    """One sampled turn.

    Attributes:
        token_ids: the generated ids (with the end-of-turn token when the sampler stopped on it).
        text: the decoded text (special tokens removed).
        stop_reason: ``stop`` (end of turn) or ``length`` (hit `max_tokens`).
        logprobs: one log-probability per generated id, when the sampler gives them.
        tool_calls: structured OpenAI tool calls (chat samplers only).
    """

    token_ids: list[int]
    text: str
    stop_reason: str = "stop"
    logprobs: list[float] | None = None
    tool_calls: list[dict[str, Any]] | None = None


class Sampler(Protocol):
    """The policy, as the agent loop sees it."""

    supports_chat: bool

    async def sample(self, prompt_ids: list[int], params: SamplingParams) -> SampleResult:
        """Continue `prompt_ids`."""
        ...

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, params: SamplingParams) -> SampleResult:
        """Answer an OpenAI-style chat request (only when `supports_chat`)."""
        ...


@dataclass
class OpenAIChatSampler:
    """A policy served by any OpenAI-compatible endpoint (a vLLM server, a benchmark's scripted server): chat
    requests with tools, answered with text or structured tool calls. For evaluation and benchmarks: it gives
    no token ids or logprobs, so the generator re-tokenises its turns."""

    endpoint: Any
    supports_chat: bool = True

    async def sample(self, prompt_ids: list[int], params: SamplingParams) -> SampleResult:  # pragma: no cover
        raise NotImplementedError("OpenAIChatSampler answers chat requests only (native tool calling)")

    async def chat(self, messages, tools, params: SamplingParams) -> SampleResult:
        """One chat completion through `endpoint` (a `ctu.components.endpoint.ChatEndpoint`)."""
        answer = await self.endpoint.complete(messages, tools, max_tokens=params.max_tokens, top_p=params.top_p)
        calls = [call.model_dump() for call in answer.tool_calls or []]
        return SampleResult([], answer.content or "", "stop", None, calls or None)
