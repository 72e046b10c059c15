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
    """Retries (with exponential backoff) on timeouts, 429 and 5xx before the call is flagged as failed."""
