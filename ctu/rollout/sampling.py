"""The sampler seam: the policy behind one small protocol, with adapters for SkyRL, Tinker and scripts.

Token samplers take prompt token ids and return generated token ids (token-in, token-out: what was sampled
is exactly what is trained on). A sampler that `supports_chat` can also answer an OpenAI-style chat request
with tools (SkyRL's OpenAI-compatible endpoint), used for native tool calling. A sampler without
`supports_tokens` (an OpenAI-compatible endpoint evaluated by `ctu eval`) answers chat requests only, in both
modes: with `tools` (native tool calling) or without, its text read by the spec's parser (text mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ctu.components.endpoint import ChatEndpoint


@dataclass(frozen=True)
class SamplingParams:
    """Per-turn sampling settings (from the spec's `rollout` section)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass
class SampleResult:
    """One sampled turn.

    Attributes:
        token_ids: the generated ids (with the end-of-turn token when the sampler stopped on it).
        text: the decoded text (special tokens removed). Read only from chat samplers: the agent loop decodes a
            token sampler's `token_ids` itself (`TokenAccount.decode`), and a token sampler may leave it empty.
        stop_reason: ``stop`` (end of turn) or ``length`` (hit `max_tokens`).
        logprobs: one log-probability per generated id, when the sampler gives them.
        tool_calls: structured OpenAI tool calls (chat samplers only).
        reasoning: what a chat server returned as the turn's reasoning, apart from `text` (a server with a reasoning
            parser: vLLM's ``--reasoning-parser`` puts it in the message's ``reasoning``, older vLLM and DeepSeek's
            API in ``reasoning_content``), else "".
    """

    token_ids: list[int]
    text: str
    stop_reason: str = "stop"
    logprobs: list[float] | None = None
    tool_calls: list[dict[str, object]] | None = None
    reasoning: str = ""


class Sampler(Protocol):
    """The policy, as the agent loop sees it."""

    supports_chat: bool
    supports_tokens: bool
    """False for a sampler that answers chat requests only (`sample` and `end_session` are never called)."""
    policy_version: int | None
    """The version of the policy's weights it samples (advanced by each weight sync; None where it has none). A
    rollout worker's copy of the sampler (`ctu.rollout.processes`) is given the parent's before each batch.

    A sampler whose runner replaces its client in this process as the weights change (the Tinker training loop's,
    given a new sampling client at every step) has an attribute ``process_bound`` set True: rollout worker
    processes never get it (`ctu.rollout.processes.unsendable`), pickled or not."""

    async def sample(self, prompt_ids: list[int], params: SamplingParams, session: str | None = None) -> SampleResult:
        """Continue `prompt_ids`. `session` names the episode the turn belongs to (the same for all its turns, none
        shared with another episode): a sampler over several inference engines keeps an episode's turns on one
        engine with it, where the episode's earlier turns are in the prefix cache."""
        ...

    async def end_session(self, session: str) -> None:
        """The episode `session` has ended (after its last `sample` or `chat`, whatever the outcome); never raises."""
        ...

    async def chat(self, messages: list[dict[str, object]], tools: list[dict[str, object]] | None, params: SamplingParams,
                   session: str | None = None) -> SampleResult:
        """Answer an OpenAI-style chat request (only when `supports_chat`) for the episode `session` (as in
        `sample`)."""
        ...


def tool_results_as_user_turns(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    """A text-mode conversation for a chat endpoint: each run of ``tool`` messages (results of calls the policy
    wrote as text, which the endpoint never saw as structured calls) becomes one ``user`` message holding them
    in ``<tool_response>`` blocks, as Qwen's and Hermes' chat templates render tool results. Other messages are
    kept as they are."""
    converted: list[dict[str, object]] = []
    for message in messages:
        if message.get("role") != "tool":
            converted.append(message)
            continue
        block = f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"
        previous = converted[-1] if converted else None
        if previous is not None and previous.get("role") == "user" and previous.get("_tool_results"):
            previous["content"] = f"{previous['content']}\n{block}"
        else:
            converted.append({"role": "user", "content": block, "_tool_results": True})
    return [{k: v for k, v in m.items() if k != "_tool_results"} for m in converted]


@dataclass
class OpenAIChatSampler:
    """A policy served by any OpenAI-compatible endpoint (a vLLM server, an API model, a test's scripted server):
    chat requests answered with text or structured tool calls. It gives no token ids or logprobs, so the
    generator re-tokenises its turns with the spec's tokenizer; for evaluation (`ctu eval`) and benchmarks.

    With `tools` (native tool calling) the request carries the tools and the conversation as it is; without
    (text mode) the tools are in the system prompt, rendered by the spec's parser, and tool results are sent as
    user turns (`tool_results_as_user_turns`). Temperature, top-p, the token limit, the seed and the frequency and presence
    penalties (when not 0) are the phase's `SamplingParams`; vLLM's repetition penalty is not an OpenAI parameter
    and is not sent.
    """

    endpoint: ChatEndpoint
    supports_chat: bool = True
    supports_tokens: bool = False
    policy_version: int | None = None

    async def sample(self, prompt_ids: list[int], params: SamplingParams, session: str | None = None) -> SampleResult:  # pragma: no cover
        raise NotImplementedError("OpenAIChatSampler answers chat requests only")

    async def end_session(self, session: str) -> None:
        """Nothing to do: the sampler holds nothing per session."""

    async def chat(self, messages, tools, params: SamplingParams, session: str | None = None) -> SampleResult:
        """One chat completion through `endpoint` (a `ctu.components.endpoint.ChatEndpoint`), sent with the
        episode's `session` (as `SESSION_HEADER`: a router keeps the episode on one replica). The answer's
        ``finish_reason`` ``length`` is the turn's `stop_reason`; its reasoning (``reasoning``, or the older
        ``reasoning_content``) is the result's `reasoning`. An empty answer is the policy's own (its turn, not an
        infrastructure error), and so is one cut off while reasoning.

        Raises:
            EndpointError: no usable answer after the endpoint's retries (the episode becomes an infrastructure
                error).
        """
        extra: dict[str, object] = {"max_tokens": params.max_tokens, "top_p": params.top_p, "temperature": params.temperature}
        for name in ("frequency_penalty", "presence_penalty"):  # OpenAI's own parameters, sent only when on
            if getattr(params, name):
                extra[name] = getattr(params, name)
        choice = await self.endpoint.complete_choice(messages if tools else tool_results_as_user_turns(messages), tools,
                                                     session=session, seed=params.seed, **extra)
        answer = choice.message
        calls = [call.model_dump() for call in answer.tool_calls or []]
        fields = answer.model_extra or {}
        reasoning = fields.get("reasoning") or fields.get("reasoning_content") or ""
        return SampleResult([], answer.content or "", "length" if choice.finish_reason == "length" else "stop", None,
                            calls or None, reasoning if isinstance(reasoning, str) else "")
