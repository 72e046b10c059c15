"""`ScriptedSampler`: a token sampler that plays scripted turns, for tests and benchmarks of the agent loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ctu.rollout.sampling import SampleResult, SamplingParams


@dataclass
class ScriptedSampler:
    """A sampler that plays scripted turns: for tests and benchmarks of the agent loop, never for training.

    `script` returns the next turn's text given the prompt ids (and a call counter); the text is encoded with
    `encode` and ended with `eos_id` unless `stop_reason` of the script's choice is ``length``. Logprobs are
    a constant -1.0 per token so their bookkeeping is exercised.
    """

    script: Callable[[list[int], int], str]
    encode: Callable[[str], list[int]]
    eos_id: int
    supports_chat: bool = False
    supports_tokens: bool = True
    policy_version: int | None = None
    calls: int = 0
    prompts: list[list[int]] = field(default_factory=list)
    sessions: list[str | None] = field(default_factory=list)
    """The session of each call, in order."""
    ended: list[str] = field(default_factory=list)
    """The sessions ended, in order."""

    async def sample(self, prompt_ids: list[int], params: SamplingParams, session: str | None = None) -> SampleResult:
        """The script's next turn, cut at `params.max_tokens`."""
        self.calls += 1
        self.prompts.append(list(prompt_ids))
        self.sessions.append(session)
        text = self.script(prompt_ids, self.calls)
        ids = self.encode(text) + [self.eos_id]
        stop = "stop"
        if len(ids) > params.max_tokens:
            ids, stop = ids[: params.max_tokens], "length"
        return SampleResult(ids, text, stop, [-1.0] * len(ids))

    async def end_session(self, session: str) -> None:
        """Record that `session` ended."""
        self.ended.append(session)

    async def chat(self, messages, tools, params, session=None) -> SampleResult:  # pragma: no cover - not a chat sampler
        raise NotImplementedError("ScriptedSampler is a token sampler")
