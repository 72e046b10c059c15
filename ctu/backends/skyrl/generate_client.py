"""`TokenGenerateClient`: SkyRL's per-request generate client with request bodies written by orjson and SkyRL's
cap on in-flight requests, for the SkyRL sampler's token-in/token-out turns; and `release_ended_loop_sessions`,
for the sessions SkyRL's own client leaves on event loops that have ended.

Imports SkyRL (and aiohttp); import it only where a SkyRL client is in hand.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteGenerateClient
from skyrl.env_vars import SKYRL_GENERATE_CONCURRENCY_PER_ENGINE, SKYRL_HTTP_CONNECTION_LIMIT

from ctu.components.endpoint import KEEPALIVE_S


@dataclass
class TokenGenerateClient(RemoteGenerateClient):
    """SkyRL's `RemoteGenerateClient` (one ``/inference/v1/generate`` request to the router: its retries, its
    error handling, the session header) with two changes for a rollout loop that sends thousands of turns a
    second:

    - Request bodies are written by orjson (aiohttp's ``json_serialize_bytes``). SkyRL's session writes them with
      Python's `json` module, which took 0.40 ms of the loop's CPU for a retail turn's prompt ids and 0.59 ms for
      a telecom one (a third of the training path's CPU per turn; 6,000 ids: 0.47 ms by `json`, 0.03 by orjson;
      `benchmarks/rollout_concurrency.py`, docs/benchmarks.md). The server reads the same JSON document (orjson writes no
      spaces, and non-ASCII text as UTF-8).
    - At most `concurrency` requests are in flight per event loop (0: no cap), SkyRL's cap for
      `RemoteInferenceClient.generate`: ``SKYRL_GENERATE_CONCURRENCY_PER_ENGINE`` x engines (`for_engines`).

    And idle connections are kept `KEEPALIVE_S` seconds (ctu's endpoints' keep-alive), not SkyRL's 2, so that a
    step's turns reuse the last step's connections. SkyRL's 2 s is shorter than uvicorn's 5 s; the router SkyRL 0.4
    starts (vllm-router, on hyper) keeps idle connections open (one aiohttp connection served two requests 65 s
    apart, 2026-11-26). With 2 s every step opened a connection per concurrent episode at its first policy turn: a
    retail batch of 256 episodes after a 3 s pause ran at 0.81 x ideal against 0.86-0.88 without the pause
    (`benchmarks/rollout_concurrency.py --runners ctu-tokens --pause 3`). A request caught by a server's close in
    flight is retried by SkyRL's `_post`. The aiohttp session is otherwise made as SkyRL's `_get_session` makes it
    (one per event loop, the same connection limit), which this overrides: `tests/rollout/test_samplers.py` checks
    the bodies that reach a server are orjson's, so a SkyRL release that renames the hook fails there, not
    silently.
    """

    concurrency: int = 0
    _caps: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def for_engines(cls, proxy_url: str, engines: int) -> TokenGenerateClient:
        """The client for the router at `proxy_url` in front of `engines` inference engines (SkyRL's cap scaled
        by them, as `RemoteInferenceClient` scales it)."""
        return cls(proxy_url=proxy_url, concurrency=max(SKYRL_GENERATE_CONCURRENCY_PER_ENGINE, 0) * engines)

    async def _get_session(self) -> aiohttp.ClientSession:
        self._drop_closed_loop_sessions()
        loop = asyncio.get_running_loop()
        session: aiohttp.ClientSession | None = self._sessions.get(loop)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=SKYRL_HTTP_CONNECTION_LIMIT, keepalive_timeout=KEEPALIVE_S)
            session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                            json_serialize_bytes=orjson.dumps)
            self._sessions[loop] = session
        return session

    async def capped_generate(self, **request: Any) -> Any:
        """`generate(**request)` (SkyRL's `RemoteGenerateResult`) once fewer than `concurrency` requests of this
        event loop are in flight. Raises what `generate` raises (`aiohttp.ClientResponseError` for an error
        status, the last connection error after SkyRL's retries)."""
        if self.concurrency <= 0:
            return await self.generate(**request)
        loop = asyncio.get_running_loop()
        for old in [old for old in self._caps if old.is_closed()]:
            del self._caps[old]
        cap = self._caps.get(loop)
        if cap is None:
            cap = self._caps[loop] = asyncio.Semaphore(self.concurrency)
        async with cap:
            return await self.generate(**request)

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = super().__getstate__()
        state["_caps"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._caps = {}


def release_ended_loop_sessions(client: object) -> int:
    """Release the aiohttp sessions `client` (SkyRL's HTTP inference client) keeps for event loops that have
    ended; returns how many.

    SkyRL keeps a session per event loop. Its colocated start-up puts the engines to sleep through
    ``asyncio.run(client.sleep())``, whose loop then ends with the session open; at the first weight sync SkyRL
    drops it unclosed, and aiohttp reports "Unclosed client session" and "Unclosed connector" (SkyRL 0.4.0). A
    session cannot be closed once its loop has ended (closing its connections schedules on that loop): it is
    detached, and its connector closed as far as an ended loop allows, so neither is left open.
    """
    holders = (client, getattr(client, "_generate_client", None))  # SkyRL's client keeps them in its generate client
    ended = [(sessions, loop) for holder in holders if isinstance(sessions := getattr(holder, "_sessions", None), dict)
             for loop in sessions if loop.is_closed()]
    for sessions, loop in ended:
        session = sessions.pop(loop)
        connector = session.connector
        session.detach()
        if connector is not None:
            closing = asyncio.new_event_loop()  # (called where no loop runs, as SkyRL's start-up is)
            try:
                closing.run_until_complete(connector.close())  # marks it closed, then closes its connections...
            except RuntimeError:  # ...on their ended loop ("Event loop is closed"): their sockets go with the GC
                pass
            finally:
                closing.close()
    return len(ended)
