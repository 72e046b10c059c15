"""Params shared by every component that calls an OpenAI-compatible endpoint (user simulator, judge)."""

from __future__ import annotations

from pydantic import Field

from ctu.registry import ComponentParams


class OpenAIEndpointParams(ComponentParams):
    """An OpenAI-compatible chat-completions endpoint. The API key is named by environment variable, never inlined."""

    model: str = Field(min_length=1)
    """Model name sent in each request."""
    base_url: str = Field(min_length=1, pattern=r"^https?://")
    """Endpoint base URL, e.g. `http://127.0.0.1:8000/v1`."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """Environment variable holding the API key; null for endpoints that need none."""
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


class EndpointError(Exception):
    """An OpenAI-compatible endpoint gave no usable answer after every retry (or refused the request)."""


def _is_retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return isinstance(exc, (openai.APIError, ValueError, TypeError, KeyError, AttributeError, IndexError))


class ChatEndpoint:
    """An async OpenAI-compatible chat-completions client with timeouts and retries.

    Retries (exponential backoff from `backoff_s`, capped at `max_backoff_s`) on timeouts, connection errors,
    HTTP 408/409/429/5xx and malformed answers (no choices, an empty message, an unparsable body); fails at once
    on other 4xx. One `openai.AsyncOpenAI` client is kept per event loop, so calls never block the loop and
    connections are reused across episodes.

    Built for hundreds of concurrent episodes: the client runs on aiohttp (`openai.DefaultAioHttpClient`;
    httpx's connection pool costs CPU quadratic in the requests in flight), and requests are posted as built
    (`AsyncOpenAI.post`, which skips the SDK's client-side walk over every message and tool schema, ~4 ms per
    request at tau-bench sizes); answers are parsed into the SDK's `ChatCompletion` as usual.
    """

    def __init__(self, params: OpenAIEndpointParams) -> None:
        self.params = params
        self._clients: dict[int, object] = {}

    def _client(self):
        import asyncio
        import os

        import openai

        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None:
            key = os.environ.get(self.params.api_key_env or "", "") if self.params.api_key_env else ""
            client = openai.AsyncOpenAI(
                base_url=self.params.base_url,
                api_key=key or "EMPTY",
                timeout=self.params.timeout_s,
                max_retries=0,
                http_client=openai.DefaultAioHttpClient(timeout=self.params.timeout_s),
            )
            self._clients = {id(loop): client}
        return client

    async def complete(self, messages: list[dict], tools: list[dict] | None = None, **extra: object):
        """One chat completion; returns the first choice's message (an openai `ChatCompletionMessage`).

        Args:
            messages: OpenAI chat messages.
            tools: OpenAI tool schemas, or None.
            extra: more request fields (e.g. ``max_tokens``).

        Raises:
            EndpointError: after `max_retries` retries, or at once on a non-retryable 4xx.
        """
        import asyncio

        from openai.types.chat import ChatCompletion

        params = self.params
        request: dict = {"model": params.model, "messages": messages, "temperature": params.temperature, **extra}
        if tools:
            request["tools"] = tools
        last: BaseException | None = None
        for attempt in range(params.max_retries + 1):
            try:
                response = await self._client().post("/chat/completions", body=request, cast_to=ChatCompletion)
                if not response.choices:
                    raise ValueError("the answer has no choices")
                message = response.choices[0].message
                if message is None or (not message.content and not message.tool_calls):
                    raise ValueError("the answer's message is empty")
                return message
            except Exception as exc:  # classified below; anything unexpected is a malformed answer
                if not _is_retryable(exc):
                    raise EndpointError(f"{params.base_url} refused the request: {exc}") from exc
                last = exc
            if attempt < params.max_retries:
                await asyncio.sleep(min(params.backoff_s * 2**attempt, params.max_backoff_s))
        raise EndpointError(
            f"{params.base_url} gave no usable answer after {params.max_retries + 1} attempts: "
            f"{type(last).__name__}: {last}"
        )
