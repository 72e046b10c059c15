"""`TinkerSampler`: the Tinker backend's policy sampler, over a Tinker `SamplingClient`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctu.rollout.sampling import SampleResult, SamplingParams

if TYPE_CHECKING:
    import tinker


@dataclass
class TinkerSampler:
    """A Tinker `SamplingClient` (any Tinker API server; on CPU, SkyRL's local JAX server)."""

    client: tinker.SamplingClient
    supports_chat: bool = False
    supports_tokens: bool = True
    policy_version: int | None = None
    process_bound: bool = False
    """True when its runner gives it a new sampling client at every step in this process (the Tinker training
    loop): a rollout worker's copy would sample the first step's weights for ever (`ctu.rollout.sampling.Sampler`).
    A sampler of one fixed policy (`ctu eval`'s) can go to workers: Tinker's client pickles."""

    async def sample(self, prompt_ids: list[int], params: SamplingParams, session: str | None = None) -> SampleResult:
        """One `sample_async` call (`session` is not used: a Tinker server routes requests itself)."""
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
        # no text: the agent loop decodes a token sampler's ids itself (`SampleResult.text`)
        return SampleResult(tokens, "", sequence.stop_reason, list(sequence.logprobs or []) or None)

    async def end_session(self, session: str) -> None:
        """Nothing to release."""

    async def chat(self, messages, tools, params, session=None) -> SampleResult:  # pragma: no cover - not a chat sampler
        raise NotImplementedError("Tinker samplers are token samplers; native mode renders tools in the template")
