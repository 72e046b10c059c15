"""Params shared by every component that calls an OpenAI-compatible endpoint (user simulator, judge)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from pydantic import Field

from ctu.components.identity_memo import IdentityMemo
from ctu.errors import CtuError
from ctu.registry import ComponentParams

if TYPE_CHECKING:
    from aiohttp import ClientSession
    from openai.types.chat import ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice


class OpenAIEndpointParams(ComponentParams):
    """An OpenAI-compatible chat-completions endpoint. The API key is named by environment variable, never inlined."""

    model: str = Field(min_length=1)
    """Model name sent in each request."""
    base_url: str = Field(min_length=1, pattern=r"^https?://")
    """Endpoint base URL, e.g. `http://127.0.0.1:8000/v1`."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """Environment variable holding the API key; null for endpoints that need none. Exported where `ctu run` starts:
    on `skyrl`, ctu hands its value to the Ray task that runs the rollouts, in memory (never in a file)."""
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    """Sampling temperature of the endpoint's model."""
    timeout_s: float = Field(60.0, gt=0.0)
    """Seconds before a request is abandoned and retried."""
    max_retries: int = Field(3, ge=0)
    """Retries (with exponential backoff) on timeouts, 429, 5xx and malformed answers before the call fails."""
    backoff_s: float = Field(1.0, gt=0.0)
    """First retry delay in seconds; doubled after each failed attempt, capped at `max_backoff_s`."""
    max_backoff_s: float = Field(30.0, gt=0.0)
    """Longest delay between two attempts."""


class EndpointError(CtuError):
    """An OpenAI-compatible endpoint gave no usable answer after every retry (or refused the request). A
    `CtuError`: where one ends a command, it is printed in a line, not as a traceback."""


RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses retried besides 5xx (OpenAI's own client retries the same ones)."""


SESSION_HEADER = "X-Session-ID"
"""The HTTP header naming the conversation a request belongs to (`ChatEndpoint.complete`'s `session`): the header
a router with session affinity reads (SkyRL's generator sends it; vllm-router's ``consistent_hash`` policy,
SkyRL's default, routes by it), so that all of a conversation's turns go to the replica whose prefix cache holds
its earlier turns."""


TOOL_LISTS = 16
"""Tool-schema lists whose JSON a `ChatEndpoint` keeps (one per domain is what a run meets)."""


KEEPALIVE_S = 3600.0
"""Seconds an idle connection is kept for the next request, longer than a training step's update and weight sync,
so each step's requests reuse the connections of the step before wherever the server keeps them open (aiohttp's
default is 15 s). A server closes an idle connection when it chooses (vLLM's uvicorn after 5 s unless
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` says otherwise): its FIN arrives while the connection idles, and aiohttp drops
it from the pool. Reopening them cost a step's batch 0.78 x ideal against 0.88 (retail, chat path, after a 20 s
pause: `benchmarks/rollout_concurrency.py --pause 20`, docs/benchmarks.md)."""


class _Retryable(Exception):
    """One attempt failed in a way worth retrying (timeout, connection, 408/409/429/5xx, malformed answer)."""


_WARNED_SUBCLASSES: set[type] = set()
"""Subclasses of `ChatEndpoint` already warned that their `complete` stands in for `complete_choice`."""


class ChatEndpoint:
    """An async OpenAI-compatible chat-completions client with timeouts and retries.

    Retries (exponential backoff from `backoff_s`, capped at `max_backoff_s`) on timeouts, connection errors,
    HTTP 408/409/429/5xx and malformed answers (not JSON, no choices, an empty message save in `complete_choice`);
    fails at once on other 4xx. Answers are validated into the OpenAI SDK's `ChatCompletion`.

    Built for hundreds of concurrent episodes: one aiohttp session per event loop (connections reused across
    episodes, no limit on connections in flight), the request body serialised once with orjson (a list of tool
    schemas once for all the requests it goes with: see `complete`), and no per-request client-side processing.
    Cookies are neither kept nor sent (OpenAI-compatible endpoints take none; a load balancer's sticky-session
    cookie would send every episode to one replica). The OpenAI SDK's own client costs ~1.4 ms of CPU per
    request at tau-bench sizes (its walk over every message and tool schema, httpx's connection pool, response
    construction), more than the whole per-turn budget of a rollout (benchmarks/rollout_concurrency.py).
    A session is closed by `aclose()`, or when its event loop shuts down (`asyncio.run`'s end).
    """

    def __init__(self, params: OpenAIEndpointParams) -> None:
        self.params = params
        self._sessions: dict[int, ClientSession] = {}
        self._closers: dict[int, AsyncIterator[None]] = {}
        self._tools_json: IdentityMemo[list[dict[str, object]], bytes] = IdentityMemo(TOOL_LISTS)
        self.url = params.base_url.rstrip("/") + "/chat/completions"

    def __reduce__(self) -> tuple[type[ChatEndpoint], tuple[OpenAIEndpointParams]]:
        """Pickled as its params (sent to rollout worker processes): a copy opens sessions of its own."""
        return (ChatEndpoint, (self.params,))

    async def _session(self) -> ClientSession:
        import asyncio
        import os

        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(id(loop))
        if session is None or session.closed:
            key = os.environ.get(self.params.api_key_env or "", "") if self.params.api_key_env else ""
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
                cookie_jar=aiohttp.DummyCookieJar(),  # no cookies: ~25 us less per request, no pinning to a replica
                timeout=aiohttp.ClientTimeout(total=self.params.timeout_s),
                headers={"Authorization": f"Bearer {key or 'EMPTY'}", "Content-Type": "application/json"},
            )
            self._sessions = {id(loop): session}
            closer = _close_at_loop_shutdown(session)
            await closer.__anext__()  # now known to the loop, which finalises it in `shutdown_asyncgens`
            self._closers = {id(loop): closer}  # held here: collected early, it would close the session early
        return session

    async def aclose(self) -> None:
        """Close this endpoint's session on the running event loop (a later call opens a new one)."""
        import asyncio

        loop_id = id(asyncio.get_running_loop())
        session = self._sessions.pop(loop_id, None)
        self._closers.pop(loop_id, None)
        if session is not None:
            await session.close()

    async def _attempt(self, body: bytes, headers: dict[str, str] | None, empty_ok: bool) -> Choice:
        """One request (with `headers` besides the session's); returns the first choice (an empty message only if
        `empty_ok`). Raises `_Retryable` or `EndpointError`."""

        import aiohttp
        import pydantic
        from openai.types.chat import ChatCompletion

        session = await self._session()
        try:
            async with session.post(self.url, data=body, headers=headers) as response:
                payload = await response.read()
                status = response.status
        except TimeoutError as exc:
            raise _Retryable(f"timed out after {self.params.timeout_s} s") from exc
        except aiohttp.ClientError as exc:
            raise _Retryable(f"Connection error: {type(exc).__name__}: {exc}") from exc
        if status >= 400:
            message = f"HTTP {status}: {payload[:300].decode('utf-8', 'replace')}"
            if status in RETRYABLE_STATUS or status >= 500:
                raise _Retryable(message)
            raise EndpointError(f"{self.params.base_url} refused the request: {message}")
        try:
            completion = ChatCompletion.model_validate_json(payload)
        except pydantic.ValidationError as exc:
            raise _Retryable(f"malformed answer: {payload[:200].decode('utf-8', 'replace')!r}") from exc
        if not completion.choices:
            raise _Retryable("the answer has no choices")
        choice = completion.choices[0]
        if not empty_ok and not choice.message.content and not choice.message.tool_calls:
            raise _Retryable("the answer's message is empty")
        return choice

    def _serialised(self, tools: list[dict[str, object]]) -> bytes:
        """`tools` as JSON, serialised on its first request (see `complete`)."""
        import orjson

        return self._tools_json.get(tools, orjson.dumps)

    async def complete(self, messages: list[dict[str, object]], tools: list[dict[str, object]] | None = None, *,
                       session: str | None = None, seed: int | None = None, **extra: object) -> ChatCompletionMessage:
        """One chat completion; returns the first choice's message (an openai `ChatCompletionMessage`), never an
        empty one (no content and no tool calls: retried). A policy's turn, whose empty answer is its own, is
        `complete_choice`'s.

        Args:
            messages: OpenAI chat messages.
            tools: OpenAI tool schemas, or None.
            session: the conversation the request belongs to (the same for all its requests), sent as the
                `SESSION_HEADER` header; None for a request that belongs to none (a judge's).
            seed: the request's ``seed`` field (OpenAI's; vLLM seeds the request's sampling with it), or None to send
                none.
            extra: more request fields (e.g. ``max_tokens``).

        A list of tool schemas is serialised once and reused for every request given the same list object (a
        domain hands every episode the same list, ~11 KB of JSON for retail's: most of a request's bytes); the
        last `TOOL_LISTS` lists are kept. Do not change a list once it has been sent.

        Raises:
            EndpointError: after `max_retries` retries, or at once on a non-retryable 4xx.
        """
        choice = await self._request(messages, tools, session, seed, extra, empty_ok=False)
        return choice.message

    async def complete_choice(self, messages: list[dict[str, object]], tools: list[dict[str, object]] | None = None, *,
                              session: str | None = None, seed: int | None = None, **extra: object) -> Choice:
        """One chat completion as `complete` sends it; returns the first choice (an openai `Choice`: its
        ``message`` and ``finish_reason``), an empty message included: a policy that answers nothing, or spends its
        ``max_tokens`` reasoning (a server's reasoning parser puts that in the message's ``reasoning``, not its
        content), failed its turn, which is no infrastructure error.

        A subclass written before this method existed (f0565cd), when a policy's turns went through `complete`,
        keeps intercepting them: where it overrides `complete` and not this, this calls its `complete` (with a
        `DeprecationWarning`, once a class) and returns its message as a choice finished by ``stop`` (what such a
        subclass cannot say: an empty answer or a cut-off one, which its `complete` retried, as it always did).

        Raises:
            EndpointError: as `complete`.
        """
        cls = type(self)
        if cls.complete is not ChatEndpoint.complete and cls.complete_choice is ChatEndpoint.complete_choice:
            if cls not in _WARNED_SUBCLASSES:
                _WARNED_SUBCLASSES.add(cls)
                import warnings

                warnings.warn(f"{cls.__qualname__} overrides ChatEndpoint.complete, through which a policy's turns "
                              "went before ctu's sampler called complete_choice: it still receives them; override "
                              "complete_choice (returning an openai Choice) to also pass on finish_reason and empty "
                              "answers", DeprecationWarning, stacklevel=2)
            from openai.types.chat.chat_completion import Choice

            message = await self.complete(messages, tools, session=session, seed=seed, **extra)
            return Choice(index=0, message=message, finish_reason="stop")
        return await self._request(messages, tools, session, seed, extra, empty_ok=True)

    async def _request(self, messages: list[dict[str, object]], tools: list[dict[str, object]] | None, session: str | None,
                       seed: int | None, extra: dict[str, object], empty_ok: bool) -> Choice:
        """The request of `complete` and `complete_choice`, retried as the class says."""
        import asyncio

        import orjson

        params = self.params
        request: dict[str, object] = {"model": params.model, "messages": messages, "temperature": params.temperature, **extra}
        if seed is not None:
            request["seed"] = seed
        body = orjson.dumps(request)
        if tools:  # the same bytes as `request["tools"] = tools` serialised with the rest
            body = b"".join((body[:-1], b',"tools":', self._serialised(tools), b"}"))
        headers = {SESSION_HEADER: session} if session is not None else None
        last: BaseException | None = None
        for attempt in range(params.max_retries + 1):
            try:
                return await self._attempt(body, headers, empty_ok)
            except _Retryable as exc:
                last = exc
            if attempt < params.max_retries:
                await asyncio.sleep(min(params.backoff_s * 2**attempt, params.max_backoff_s))
        raise EndpointError(f"{params.base_url} gave no usable answer after {params.max_retries + 1} attempts: {last}")


async def _close_at_loop_shutdown(session: ClientSession) -> AsyncIterator[None]:
    """Yields once and is never resumed: the event loop finalises it (closing `session`) when it shuts down."""
    try:
        yield
    finally:
        if not session.closed:
            await session.close()


def probe(params: OpenAIEndpointParams, timeout_s: float = 10.0) -> str | None:
    """Whether the endpoint of `params` answers, checked once before a run starts; None if it does, else why not.

    Sends ``GET {base_url}/models`` (served by OpenAI, vLLM and most compatible servers) with the key from
    `api_key_env`. Any HTTP answer means the server is there, except 401/403 (the key is refused); a refused
    connection, an unknown host or no answer within `timeout_s` seconds is a problem. A run checks its endpoints
    this way so that a wrong URL fails in seconds, not as infrastructure errors in every episode of the first
    step; an outage later in the run is retried and flagged per episode as before.
    """
    import os
    import urllib.error
    import urllib.request

    key = os.environ.get(params.api_key_env, "") if params.api_key_env else ""
    request = urllib.request.Request(params.base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            if params.api_key_env and not key:
                return (f"{params.base_url} asks for a key ({error.code}) and {params.api_key_env} (api_key_env) is not set: "
                        "export it where `ctu run` starts")
            return f"{params.base_url} refuses the key ({error.code}): check the variable named by api_key_env ({params.api_key_env})"
        return None
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        return f"{params.base_url} does not answer ({reason})"
