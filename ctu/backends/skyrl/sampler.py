"""`SkyRLSampler`: the SkyRL backend's policy sampler, over SkyRL's inference client (vLLM engines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ctu.rollout.sampling import SampleResult, SamplingParams

if TYPE_CHECKING:
    from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface

    from ctu.backends.skyrl.generate_client import TokenGenerateClient


@dataclass
class SkyRLSampler:
    """SkyRL's inference client (vLLM engines), token-in/token-out only (`generate`), native tool calling included:
    the policy then samples from exactly the ids it is trained on (a chat request would be sampled from vLLM's own
    rendering of the history).

    Each episode's turns carry its session id, as SkyRL's own generator sends them (`SkyRLGymGenerator.agent_loop`,
    as ``X-Session-ID``): the router's ``consistent_hash`` policy, SkyRL's default, then sends every turn of an
    episode to the same vLLM engine, whose prefix cache holds the episode's earlier turns (without a session id,
    turns are spread over the engines and each is prefilled whole). SkyRL's generator also posts each episode's
    end to the router (`finish_session`, for routers that hold capacity per session); this sampler does not: the
    locked router (vllm-router 0.1.14) has no such endpoint and forwards it to a vLLM engine, which answers 404
    (seen in a run of CI's SkyRL test), and SkyRL's client then logs a warning for every episode. With
    `cache_salt` (SkyRL's ``generator.use_cache_salt``, on by default), requests also carry vLLM's prefix-cache
    salt for the policy version of the episode's first turn (SkyRL's `build_vllm_cache_salt` of
    `policy_version`, the client's `weight_version`), so that in fully asynchronous training an episode never
    reuses cache blocks computed by other weights than its first turn's.

    Over SkyRL's HTTP client (`RemoteInferenceClient`, what SkyRL 0.4 builds for every run), each turn is one
    request through SkyRL's per-request client with orjson bodies (`TokenGenerateClient`, under SkyRL's cap on
    in-flight requests) rather than through `RemoteInferenceClient.generate`, which also decodes the ids (ctu
    decodes them itself, for its parser) and writes bodies with Python's `json`: CPU per turn on the benchmark's
    retail batch fell from 1.03-1.12 ms to 0.54-0.65 (`benchmarks/rollout_concurrency.py --runners ctu-tokens`,
    docs/benchmarks.md). `text` is then left empty. Any other client (and SkyRL's with rollout router replay on, whose
    expert indices come only from `generate`) is called through `generate`.
    """

    client: InferenceEngineInterface
    model: str | None = None
    cache_salt: bool = True
    supports_chat: bool = False
    supports_tokens: bool = True
    _salts: dict[str, str | None] = field(default_factory=dict, repr=False)
    """The cache salt of each live session, fixed at its first turn."""
    _version: int | None = field(default=None, repr=False)
    _direct: TokenGenerateClient | Literal[False] | None = field(default=None, repr=False)
    """The `TokenGenerateClient` over the client's router, False where the client is called through `generate`
    (None until the first turn)."""

    @property
    def policy_version(self) -> int | None:
        """The client's `weight_version` (SkyRL advances it at each weight sync), or the version set here: a
        rollout worker's copy of the client stays at the version it was pickled with, so the parent's is set
        before each batch (`ctu.rollout.processes`)."""
        return self._version if self._version is not None else getattr(self.client, "weight_version", None)

    @policy_version.setter
    def policy_version(self, version: int | None) -> None:
        self._version = version

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

    def _salt(self) -> str | None:
        """The prefix-cache salt of the policy version now (None when off or the sampler has no version)."""
        version = self.policy_version
        if not self.cache_salt or version is None:
            return None
        from skyrl.train.generators.utils import build_vllm_cache_salt

        return str(build_vllm_cache_salt(version, self.model))

    async def sample(self, prompt_ids: list[int], params: SamplingParams, session: str | None = None) -> SampleResult:
        """One `generate` call with `prompt_token_ids`, for the episode `session` (see the class docstring)."""
        salt = None
        if session is not None:
            if session not in self._salts:
                self._salts[session] = self._salt()
            salt = self._salts[session]
        sampling_params = self._vllm_params(params)
        if direct := self._direct_client():
            result = await direct.capped_generate(
                prompt_token_ids=prompt_ids, sampling_params=sampling_params, session_id=session,
                model=self.model or self.client.model_name, cache_salt=salt)
            return SampleResult(token_ids=result.response_ids, text="", stop_reason=result.stop_reason,
                                logprobs=result.response_logprobs)
        request: dict[str, object] = {"prompt_token_ids": [prompt_ids], "prompts": None, "sampling_params": sampling_params}
        if session is not None:
            request["session_ids"] = [session]
            if salt is not None:
                request["cache_salt"] = salt
        output = await self.client.generate(request, model=self.model)
        logprobs = output.get("response_logprobs")
        return SampleResult(
            token_ids=list(output["response_ids"][0]),
            text=output["responses"][0],
            stop_reason=output["stop_reasons"][0],
            logprobs=list(logprobs[0]) if logprobs else None,
        )

    def _direct_client(self) -> TokenGenerateClient | Literal[False]:
        """The `TokenGenerateClient` for SkyRL's HTTP client, made at the first turn; False for any other client,
        for SkyRL's with router replay on, and for one with LoRA and no adapter named (whose `generate` raises
        SkyRL's error for it)."""
        if self._direct is None:
            from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient

            self._direct = False
            client = self.client
            if (isinstance(client, RemoteInferenceClient) and not client.enable_return_routed_experts
                    and (self.model or not client.uses_lora_weight_sync)):
                from ctu.backends.skyrl.generate_client import TokenGenerateClient

                self._direct = TokenGenerateClient.for_engines(client.proxy_url, len(client.server_urls))
        return self._direct

    async def aclose(self) -> None:
        """Close this event loop's HTTP session of the sampler's own generate client (SkyRL's client is closed by
        its owner, `RemoteInferenceClient.aclose`)."""
        if self._direct:
            await self._direct.aclose()

    async def end_session(self, session: str) -> None:
        """Forget the session's salt (nothing is sent: see the class docstring)."""
        self._salts.pop(session, None)

    async def chat(self, messages, tools, params, session=None) -> SampleResult:  # pragma: no cover - not a chat sampler
        raise NotImplementedError("SkyRL's sampler is token-in/token-out; native mode renders tools in the template")
