"""The Tinker SDK's `ServiceClient` for one block of work, its session ended when the block ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tinker


@contextlib.contextmanager
def tinker_service(base_url: str, api_key: str) -> Iterator[tinker.ServiceClient]:
    """Yields a ``tinker.ServiceClient`` on `base_url`; on exit, ends what it started in the SDK.

    The SDK (tinker 0.25) keeps a heartbeat task for each client's session on its background event loop, every
    10 s, and gives `ServiceClient` no `close`. The task holds the client's `InternalClientHolder`, so the
    holder's own cleanup (`close`, which its `__del__` calls) never runs: in a process that outlives the server
    (a test session, a script evaluating one checkpoint after another) each client kept pinging its stopped
    server and, after two minutes, logged "Session heartbeat failed ... Tinker is down" every 10 s. On exit this
    calls `close` on the client's holders (the SDK's cleanup: the heartbeat and config-refresh tasks cancelled,
    telemetry stopped).
    """
    import tinker

    service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
    try:
        yield service
    finally:
        for name in ("_session_holder", "_rest_holder"):  # created lazily, so either may be None
            holder = getattr(service, name, None)
            if holder is not None:
                holder.close()
