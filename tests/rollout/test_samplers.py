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
    assert "session_ids" not in client.requests[1] and "cache_salt" not in client.requests[1]  # no session, no salt


def test_a_policy_version_set_on_the_sampler_keys_the_cache_salt():
    """A rollout worker's copy of the client keeps the version it was sent with; the parent's is set on the sampler
    (`ctu.rollout.processes`), and the salt follows it."""
    from skyrl.train.generators.utils import build_vllm_cache_salt

    client = RecordingClient()  # no weight_version of its own
    sampler = SkyRLSampler(client, "policy")
    asyncio.run(sampler.sample([1], SamplingParams(), "a"))
    sampler.policy_version = 7
    asyncio.run(sampler.sample([1], SamplingParams(), "b"))
    assert "cache_salt" not in client.requests[0] and client.requests[1]["cache_salt"] == build_vllm_cache_salt(7, "policy")
    assert [request["session_ids"] for request in client.requests] == [["a"], ["b"]]


def test_an_episode_stays_on_one_engine_with_the_cache_salt_it_started_with():
    """Through SkyRL's own client to a server on 127.0.0.1 standing for SkyRL's router: every turn of an episode
    carries its session (the ``X-Session-ID`` header the router's ``consistent_hash`` policy routes by) and the
    prefix-cache salt of the policy version it started with, a weight sync mid-episode included. Its end is not
    posted (the locked router has no ``/finish_session``: see `SkyRLSampler`)."""
    from aiohttp import web
    from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient
    from skyrl.train.generators.utils import build_vllm_cache_salt

    seen: list[tuple[str | None, str | None]] = []
    finished: list[str] = []

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.headers.get("X-Session-ID"), body.get("cache_salt")))
        return web.json_response({"choices": [{"token_ids": [5, 2], "finish_reason": "stop",
                                               "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.2}]}}]})

    async def finish(request: web.Request) -> web.Response:
        finished.append(request.query["session_id"])
        return web.json_response({})

    async def episodes(cache_salt: bool) -> SkyRLSampler:
        app = web.Application()
        app.router.add_post("/inference/v1/generate", generate)
        app.router.add_post("/finish_session", finish)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        client = RemoteInferenceClient(proxy_url=url, server_urls=[url], model_name="policy", data_parallel_size=1,
                                       tokenizer=Decoder())
        sampler = SkyRLSampler(client, "policy", cache_salt=cache_salt)
        try:
            result = await sampler.sample([1, 2], SamplingParams(), "episode-a")
            client.increment_weight_version()  # a weight sync while episode a is still running
            await sampler.sample([1, 2, 5, 2, 3], SamplingParams(), "episode-a")
            await sampler.sample([1, 4], SamplingParams(), "episode-b")
            await sampler.end_session("episode-a")
            await sampler.end_session("episode-b")
            assert result.token_ids == [5, 2] and result.logprobs == [-0.1, -0.2]
        finally:
            await client.aclose()
            await runner.cleanup()
        return sampler

    sampler = asyncio.run(episodes(cache_salt=True))
    first, second = build_vllm_cache_salt(0, "policy"), build_vllm_cache_salt(1, "policy")
    assert seen == [("episode-a", first), ("episode-a", first), ("episode-b", second)]
    assert finished == [] and sampler._salts == {}
    seen.clear()
    asyncio.run(episodes(cache_salt=False))  # SkyRL's generator.use_cache_salt off: sessions still, no salt
    assert seen == [("episode-a", None), ("episode-a", None), ("episode-b", None)]


class Decoder:
    """The tokenizer SkyRL's client decodes responses with (ids as text)."""

    def batch_decode(self, ids: list[list[int]]) -> list[str]:
        return [" ".join(map(str, row)) for row in ids]
