"""A real OpenAI-compatible HTTP server on 127.0.0.1 with scripted answers and injected faults.

Test support (never shipped) for tests and benchmarks of everything that calls an endpoint (user simulators,
judges, samplers): it listens on loopback only, answers ``POST /v1/chat/completions`` (any path ending in
``/chat/completions``) from a queue of `Answer`s, and records every request body. Never point it, or anything
it starts, at another host.

    with ScriptedOpenAIServer([Answer.error(429), Answer.text("Hi, I need help.")]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Answer:
    """One scripted answer: a chat message, an HTTP error status, a raw body, after an optional delay (s),
    with optional extra response `headers`; a message may carry `reasoning` (as vLLM's reasoning parser returns it,
    in the field `reasoning_field`) and a `finish_reason` other than the default (``tool_calls`` or ``stop``)."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    status: int = 200
    raw_body: bytes | None = None
    delay_s: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    reasoning: str | None = None
    reasoning_field: str = "reasoning"
    finish_reason: str | None = None

    @classmethod
    def text(cls, content: str, delay_s: float = 0.0) -> Answer:
        """An assistant message with `content`."""
        return cls(content=content, delay_s=delay_s)

    @classmethod
    def calls(cls, *calls: tuple[str, dict[str, Any]]) -> Answer:
        """An assistant message with tool calls, each ``(name, arguments)``."""
        tool_calls = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ]
        return cls(tool_calls=tool_calls)

    @classmethod
    def error(cls, status: int) -> Answer:
        """An HTTP error with an OpenAI-style error body."""
        return cls(status=status, raw_body=json.dumps({"error": {"message": f"injected {status}"}}).encode())

    @classmethod
    def malformed(cls, body: bytes = b"{not json") -> Answer:
        """A 200 response whose body is not a chat completion."""
        return cls(raw_body=body)

    def body(self, model: str, number: int) -> bytes:
        """The HTTP response body: `raw_body`, or a chat completion (id ``chatcmpl-<number>``) for `model`."""
        if self.raw_body is not None:
            return self.raw_body
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.reasoning is not None:
            message[self.reasoning_field] = self.reasoning
        finish_reason = self.finish_reason or ("tool_calls" if self.tool_calls else "stop")
        completion = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        return json.dumps(completion).encode()

    @classmethod
    def slow(cls, delay_s: float, content: str = "late") -> Answer:
        """An answer that arrives after `delay_s` seconds (longer than a client's timeout: a timeout)."""
        return cls(content=content, delay_s=delay_s)


class _Server(ThreadingHTTPServer):
    request_queue_size = 4096
    """Listen backlog: hundreds of clients connect at once (the default 5 drops their SYNs for a second)."""


@dataclass
class ScriptedOpenAIServer:
    """The server. Answers come from `answers` in order, then from `default` (a fixed answer or a function of
    the request body). Use as a context manager; `base_url` ends in ``/v1``.

    Attributes:
        requests: every request body received (parsed JSON), in arrival order.
        arrivals: `time.monotonic()` of each request's arrival, in the same order.
        request_headers: each request's HTTP headers (lower-cased names), in the same order.
        peers: each request's client address (host, port), in the same order: the same on a reused connection.
    """

    answers: Iterable[Answer] = ()
    default: Answer | Callable[[dict[str, Any]], Answer] = field(default_factory=lambda: Answer.text("ok"))
    requests: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    request_headers: list[dict[str, str]] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)
    models_status: int = 200
    """HTTP status of ``GET /v1/models`` (the endpoint probe's request): 200 with a model list, or an error."""
    api_key: str | None = None
    """The key every request must carry (``Authorization: Bearer <key>``), as a vLLM server started with
    ``--api-key`` asks: others are answered 401 and counted in `refused` (and not in `requests`). None: no key."""
    refused: list[dict[str, str]] = field(default_factory=list)
    """The headers of each request refused for its key, in arrival order."""
    echo_refused: bool = False
    """Answer a refused request's 401 with its ``Authorization`` header in the error's message, as a misbehaving
    endpoint may: the way a key comes back in text ctu writes."""

    def __post_init__(self) -> None:
        self._queue: deque[Answer] = deque(self.answers)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        if self._server is None:
            raise RuntimeError("the server is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def push(self, *answers: Answer) -> None:
        """Queue more answers."""
        with self._lock:
            self._queue.extend(answers)

    def _next(self, body: dict[str, Any], headers: dict[str, str], peer: tuple[str, int]) -> Answer:
        with self._lock:
            self.peers.append(peer)
            self.requests.append(body)
            self.arrivals.append(time.monotonic())
            self.request_headers.append(headers)
            if self._queue:
                return self._queue.popleft()
        return self.default(body) if callable(self.default) else self.default

    def __enter__(self) -> Self:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:
                pass

            def authorised(self) -> bool:
                """Whether the request carries the server's key; if not, it is answered 401 here."""
                if server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                with server._lock:
                    server.refused.append({name.lower(): value for name, value in self.headers.items()})
                said = f"invalid API key: {self.headers.get('Authorization')}" if server.echo_refused else "invalid API key"
                self._send(401, json.dumps({"error": {"message": said}}).encode())
                return False

            def do_GET(self) -> None:
                path = self.path.rstrip("/")
                if path != "/health" and not self.authorised():
                    return
                if path == "/health":  # a liveness probe (vLLM's, which routers poll): 200 with an empty body
                    self._send(200, b"")
                elif path.endswith("/models"):
                    self._send(server.models_status, json.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]}).encode())
                else:
                    self._send(404, json.dumps({"error": {"message": "not found"}}).encode())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, json.dumps({"error": {"message": "not found"}}).encode())
                    return
                if not self.authorised():
                    return
                answer = server._next(body, {name.lower(): value for name, value in self.headers.items()}, self.client_address)
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                self._send(answer.status, answer.body(body.get("model", "scripted"), len(server.requests)), answer.headers)

            def _send(self, status: int, payload: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
                try:
                    self.send_response(status)
                    for name, value in headers:
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout): nothing to answer

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-openai", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
