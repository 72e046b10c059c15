"""`SkyRLSampler`: the SkyRL backend's policy sampler, over SkyRL's inference client (vLLM engines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctu.rollout.sampling import SampleResult, SamplingParams


@dataclass
class SkyRLSampler:
    """SkyRL's inference client (vLLM engines): `generate` for token-in/token-out, `chat_completion` for
    native tool calling (the engine's tool parser for the model family turns the text into `tool_calls`)."""

    client: Any
    model: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    supports_chat: bool = True
    supports_tokens: bool = True

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
