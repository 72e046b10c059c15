"""What the SkyRL sampler sends to SkyRL's inference client (vLLM behind it)."""

from __future__ import annotations

import asyncio
from typing import Any

from ctu.rollout.sampling import SamplingParams
from ctu.runners.skyrl.sampler import SkyRLSampler


class RecordingClient:
    """SkyRL's inference client as the sampler calls it: records each request, answers one short turn."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def generate(self, request: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        self.requests.append(request)
        return {"response_ids": [[5, 2]], "responses": ["hi"], "stop_reasons": ["stop"], "response_logprobs": [[-0.1, -0.2]]}


def test_token_requests_carry_the_end_of_turn_ids_and_the_seed():
    client = RecordingClient()
    sampler = SkyRLSampler(client, "policy")
    result = asyncio.run(sampler.sample([1, 2, 3], SamplingParams(max_tokens=8, stop_token_ids=(2, 7), seed=11)))
    params = client.requests[0]["sampling_params"]
    assert params["stop_token_ids"] == [2, 7] and params["seed"] == 11 and params["max_tokens"] == 8
    assert result.token_ids == [5, 2] and result.logprobs == [-0.1, -0.2]
    asyncio.run(sampler.sample([1], SamplingParams()))
    assert "stop_token_ids" not in client.requests[1]["sampling_params"] and "seed" not in client.requests[1]["sampling_params"]
