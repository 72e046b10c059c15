"""The sampler seam: the policy behind one small protocol, with adapters for SkyRL, Tinker and scripts.

Token samplers take prompt token ids and return generated token ids (token-in, token-out: what was sampled
is exactly what is trained on). A sampler that `supports_chat` can also answer an OpenAI-style chat request
with tools (SkyRL's OpenAI-compatible endpoint), used for native tool calling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
class SkyRLSampler:
    """SkyRL's inference client (vLLM engines): `generate` for token-in/token-out, `chat_completion` for
    native tool calling (the engine's tool parser for the model family turns the text into `tool_calls`)."""

    client: Any
    model: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    supports_chat: bool = True

    def _vllm_params(self, params: SamplingParams) -> dict[str, Any]:
        """vLLM's sampling params for `params` (the end-of-turn ids as ``stop_token_ids``, so a template whose
        turns end with a token other than the tokenizer's EOS still stops there)."""
        return {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "repetition_penalty": params.repetition_penalty,
            "logprobs": 0,
            **({"stop_token_ids": list(params.stop_token_ids)} if params.stop_token_ids else {}),
            **({"seed": params.seed} if params.seed is not None else {}),
        }

    async def sample(self, prompt_ids: list[int], params: SamplingParams) -> SampleResult:
        """One `generate` call with `prompt_token_ids`."""
        output = await self.client.generate(
            {"prompt_token_ids": [prompt_ids], "prompts": None, "sampling_params": self._vllm_params(params)}, model=self.model
        )
        logprobs = output.get("response_logprobs")
        return SampleResult(
            token_ids=list(output["response_ids"][0]),
            text=output["responses"][0],
            stop_reason=output["stop_reasons"][0],
            logprobs=list(logprobs[0]) if logprobs else None,
        )

    async def chat(self, messages, tools, params) -> SampleResult:
        """One OpenAI-compatible `chat_completion` with `tools` (thinking switches come from the chat template
        policy's kwargs, so every server-side template call honours them). Asks vLLM for the sampled token ids
        (``return_token_ids``) and their logprobs, so the turn is trained on what was sampled; a server that
        returns neither gives a result without ids or logprobs."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": tools or None,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "repetition_penalty": params.repetition_penalty,
            "chat_template_kwargs": self.chat_template_kwargs,
            "logprobs": True,
            "return_token_ids": True,
            **({"stop_token_ids": list(params.stop_token_ids)} if params.stop_token_ids else {}),
            **({"seed": params.seed} if params.seed is not None else {}),
        }
        response = await self.client.chat_completion({"json": body, "headers": {}})
        choices = response.get("choices") or []
        if not choices:
            return SampleResult([], "", "stop")
        choice = choices[0]
        message = choice.get("message") or {}
        reason = choice.get("finish_reason") or "stop"
        ids = list(choice.get("token_ids") or [])
        content = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(entry["logprob"]) for entry in content] if len(content) == len(ids) and ids else None
        return SampleResult(ids if logprobs else [], message.get("content") or "", "length" if reason == "length" else "stop",
                            logprobs, message.get("tool_calls"))


@dataclass
class TinkerSampler:
    """A Tinker `SamplingClient` (any Tinker API server; on CPU, SkyRL's local JAX server)."""

    client: Any
    decode: Callable[[Sequence[int]], str]
    supports_chat: bool = False

    async def sample(self, prompt_ids: list[int], params: SamplingParams) -> SampleResult:
        """One `sample_async` call."""
        import tinker

        response = await self.client.sample_async(
            prompt=tinker.types.ModelInput.from_ints(list(prompt_ids)),
            num_samples=1,
            sampling_params=tinker.types.SamplingParams(
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                seed=params.seed,
                stop=list(params.stop_token_ids) or None,
            ),
        )
        sequence = response.sequences[0]
        tokens = list(sequence.tokens)
        return SampleResult(tokens, self.decode(tokens), sequence.stop_reason, list(sequence.logprobs or []) or None)

    async def chat(self, messages, tools, params) -> SampleResult:  # pragma: no cover - not a chat sampler
        raise NotImplementedError("Tinker samplers are token samplers; native mode renders tools in the template")


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
