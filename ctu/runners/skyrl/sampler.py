"""`SkyRLSampler`: the SkyRL backend's policy sampler, over SkyRL's inference client (vLLM engines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctu.rollout.sampling import SampleResult, SamplingParams


@dataclass
class SkyRLSampler:
    """SkyRL's inference client (vLLM engines), token-in/token-out only (`generate`), native tool calling included:
    the policy then samples from exactly the ids it is trained on (a chat request would be sampled from vLLM's own
    rendering of the history)."""

    client: Any
    model: str | None = None
    supports_chat: bool = False
    supports_tokens: bool = True

    def _vllm_params(self, params: SamplingParams) -> dict[str, object]:
        """vLLM's sampling params for `params` (the end-of-turn ids as ``stop_token_ids``, so a template whose
        turns end with a token other than the tokenizer's EOS still stops there)."""
        return {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "repetition_penalty": params.repetition_penalty,
            "frequency_penalty": params.frequency_penalty,
            "presence_penalty": params.presence_penalty,
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

    async def chat(self, messages, tools, params) -> SampleResult:  # pragma: no cover - not a chat sampler
        raise NotImplementedError("SkyRL's sampler is token-in/token-out; native mode renders tools in the template")
