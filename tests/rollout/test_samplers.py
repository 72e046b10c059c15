"""What the SkyRL sampler sends to SkyRL's inference client (vLLM behind it)."""

from __future__ import annotations

import asyncio
from typing import Any

from ctu.backends.skyrl.sampler import SkyRLSampler
from ctu.rollout.sampling import SamplingParams


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
            assert sampler._direct  # through ctu's generate client (`TokenGenerateClient`)
            client.increment_weight_version()  # a weight sync while episode a is still running
            await sampler.sample([1, 2, 5, 2, 3], SamplingParams(), "episode-a")
            await sampler.sample([1, 4], SamplingParams(), "episode-b")
            await sampler.end_session("episode-a")
            await sampler.end_session("episode-b")
            assert result.token_ids == [5, 2] and result.logprobs == [-0.1, -0.2]
        finally:
            await sampler.aclose()
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


class GenerateServer:
    """SkyRL's router on 127.0.0.1 as the sampler's requests reach it: records each raw body, answers after
    `delay` seconds with the ids of the turn, and counts the requests in flight."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.bodies: list[bytes] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def generate(self, request: Any) -> Any:
        from aiohttp import web

        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.bodies.append(await request.read())
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        return web.json_response({"choices": [{"token_ids": [5, 2], "finish_reason": "stop",
                                               "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.2}]}}]})

    async def run(self, body: Any) -> Any:
        """Serve while `body(url)` runs; returns what it returns."""
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/inference/v1/generate", self.generate)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            return await body(f"http://127.0.0.1:{runner.addresses[0][1]}")
        finally:
            await runner.cleanup()


def skyrl_client(url: str, **options: Any) -> Any:
    from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient

    return RemoteInferenceClient(proxy_url=url, server_urls=[url], model_name="policy", data_parallel_size=1,
                                 tokenizer=Decoder(), **options)


def test_turns_reach_the_router_as_orjson_bodies_and_the_ids_come_back_undecoded():
    """SkyRL's own client writes a body with Python's `json` (``", "`` between ids); ctu's generate client with
    orjson (no spaces), and leaves the decoding to the agent loop. The body says the same either way."""
    import json

    server = GenerateServer()

    async def turn(url: str) -> Any:
        sampler = SkyRLSampler(skyrl_client(url), "policy", cache_salt=False)
        try:
            return await sampler.sample(list(range(300)), SamplingParams(max_tokens=8, stop_token_ids=(2,)), "episode")
        finally:
            await sampler.aclose()

    result = asyncio.run(server.run(turn))
    assert result.token_ids == [5, 2] and result.logprobs == [-0.1, -0.2] and result.stop_reason == "stop"
    assert result.text == ""
    (body,) = server.bodies
    assert b", " not in body and b": " not in body
    request = json.loads(body)
    assert request["token_ids"] == list(range(300)) and request["model"] == "policy"
    assert request["sampling_params"]["max_tokens"] == 8 and request["sampling_params"]["stop_token_ids"] == [2]


def test_in_flight_turns_are_capped_as_skyrls_client_caps_them():
    from ctu.backends.skyrl.generate_client import TokenGenerateClient

    server = GenerateServer(delay=0.05)

    async def turns(url: str) -> list[Any]:
        sampler = SkyRLSampler(skyrl_client(url), "policy", cache_salt=False)
        sampler._direct = TokenGenerateClient(proxy_url=url, concurrency=3)
        try:
            return list(await asyncio.gather(*(sampler.sample([1, i], SamplingParams(), f"e{i}") for i in range(10))))
        finally:
            await sampler.aclose()

    results = asyncio.run(server.run(turns))
    assert len(results) == 10 and server.most_in_flight == 3
    from skyrl.env_vars import SKYRL_GENERATE_CONCURRENCY_PER_ENGINE

    assert TokenGenerateClient.for_engines("http://router", 4).concurrency == 4 * SKYRL_GENERATE_CONCURRENCY_PER_ENGINE


def test_the_next_steps_turns_reuse_the_last_steps_connections_to_the_router():
    """A turn after 2.5 s idle (a training step's update, shortened) goes over the connection the turn before used:
    SkyRL's own session keeps idle connections 2 s, and a step's first turns would each open a new one."""
    from aiohttp import web

    server = GenerateServer()
    peers: list[object] = []
    generate = server.generate

    async def recording(request: web.Request) -> Any:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return await generate(request)

    server.generate = recording

    async def two_steps(url: str) -> None:
        sampler = SkyRLSampler(skyrl_client(url), "policy", cache_salt=False)
        try:
            await sampler.sample([1, 2], SamplingParams(), "step-1")
            await asyncio.sleep(2.5)
            await sampler.sample([1, 2], SamplingParams(), "step-2")
        finally:
            await sampler.aclose()

    asyncio.run(server.run(two_steps))
    assert len(peers) == 2 and peers[0] is not None and peers[0] == peers[1]


def test_router_replay_and_an_unnamed_lora_adapter_keep_skyrls_generate():
    """Rollout router replay's expert indices come only from SkyRL's `generate`; with LoRA and no adapter named,
    SkyRL's `generate` raises its error for it. Any other client is called through `generate` too."""
    url = "http://127.0.0.1:9"
    assert SkyRLSampler(skyrl_client(url), "policy")._direct_client()
    assert SkyRLSampler(skyrl_client(url, enable_return_routed_experts=True), "policy")._direct_client() is False
    assert SkyRLSampler(skyrl_client(url, uses_lora_weight_sync=True), None)._direct_client() is False
    assert SkyRLSampler(skyrl_client(url, uses_lora_weight_sync=True), "adapter")._direct_client()
    assert SkyRLSampler(RecordingClient(), "policy")._direct_client() is False
