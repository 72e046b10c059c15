"""`ChatEndpoint`'s connection handling: one session per event loop, closed when the loop ends or on `aclose`;
no cookies kept."""

from __future__ import annotations

import asyncio
import gc
import warnings

from ctu.components.endpoint import KEEPALIVE_S, ChatEndpoint, EndpointError, OpenAIEndpointParams
from tests.support.openai_server import Answer, ScriptedOpenAIServer

HELLO = [{"role": "user", "content": "hi"}]


def endpoint(server: ScriptedOpenAIServer) -> ChatEndpoint:
    return ChatEndpoint(OpenAIEndpointParams(model="m", base_url=server.base_url, api_key_env=None, timeout_s=5))


def test_one_session_per_loop_closed_when_the_loop_ends_without_a_warning():
    with ScriptedOpenAIServer(default=Answer.text("hello")) as server:
        client = endpoint(server)

        async def twice():
            first = await client.complete(HELLO)
            session = next(iter(client._sessions.values()))
            second = await client.complete(HELLO)
            assert next(iter(client._sessions.values())) is session  # reused within the loop
            return session, first.content, second.content

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session, *answers = asyncio.run(twice())
            later, *_ = asyncio.run(twice())  # a new loop gets a new session
            gc.collect()
    assert answers == ["hello", "hello"]
    assert session is not later and session.closed and later.closed
    assert not [w for w in caught if "Unclosed" in str(w.message)]


def test_aclose_closes_the_session_and_a_later_call_opens_another():
    with ScriptedOpenAIServer(default=Answer.text("hello")) as server:
        client = endpoint(server)

        async def main():
            await client.complete(HELLO)
            session = next(iter(client._sessions.values()))
            await client.aclose()
            assert session.closed and not client._sessions
            answer = await client.complete(HELLO)
            return answer.content

        assert asyncio.run(main()) == "hello"


def test_cookies_set_by_the_endpoint_are_not_sent_back():
    """A sticky-session cookie (a load balancer's) must not pin every later request to one replica."""
    sticky = Answer(content="hello", headers=(("Set-Cookie", "replica=3; Path=/"),))
    with ScriptedOpenAIServer([sticky], default=Answer.text("again")) as server:
        url = server.base_url.replace("127.0.0.1", "localhost")  # a client's default jar ignores cookies of IPs
        client = ChatEndpoint(OpenAIEndpointParams(model="m", base_url=url, api_key_env=None, timeout_s=5))

        async def twice():
            return [(await client.complete(HELLO)).content for _ in range(2)]

        assert asyncio.run(twice()) == ["hello", "again"]
    assert [headers.get("cookie") for headers in server.request_headers] == [None, None]


def test_an_endpoint_error_is_a_ctu_error_printed_without_a_traceback():
    from ctu.errors import CtuError

    assert issubclass(EndpointError, CtuError)


def test_tools_are_sent_as_given_and_serialised_once_per_list():
    """The tools' JSON, kept for a list object (see `ChatEndpoint.complete`), goes out as the request's "tools"
    field beside the other fields, on every request that gives the same list."""
    tools = [{"type": "function", "function": {"name": "find_order", "parameters": {"type": "object", "properties": {
        "order_id": {"type": "string", "description": "Like \"#W1\"; ünïcode kept."}}}}}]
    other = [{"type": "function", "function": {"name": "cancel", "parameters": {"type": "object", "properties": {}}}}]
    with ScriptedOpenAIServer(default=Answer.text("hello")) as server:
        client = endpoint(server)

        async def three():
            await client.complete(HELLO, tools, max_tokens=7)
            kept = client._serialised(tools)
            await client.complete(HELLO, tools, max_tokens=8)
            assert client._serialised(tools) is kept  # not serialised again
            await client.complete(HELLO, other)
            await client.complete(HELLO)

        asyncio.run(three())
    sent = server.requests
    assert [r.get("tools") for r in sent] == [tools, tools, other, None]
    assert [r.get("max_tokens") for r in sent] == [7, 8, None, None]
    assert all(r["messages"] == HELLO and r["model"] == "m" and r["temperature"] == 0.0 for r in sent)


def test_an_idle_connection_is_kept_for_the_next_steps_requests(monkeypatch):
    """Requests after an idle spell (a training step's update and weight sync, shortened to 0.5 s) go over the
    connection the request before used, for as long as `KEEPALIVE_S` says; aiohttp's own 15 s would have every
    step reopen one connection per concurrent episode. With a keep-alive shorter than the spell, a new one."""
    assert KEEPALIVE_S >= 600  # longer than a step's update on GPUs

    async def two_steps(client: ChatEndpoint) -> None:
        await client.complete([{"role": "user", "content": "step 1"}])
        await asyncio.sleep(0.5)
        await client.complete([{"role": "user", "content": "step 2"}])

    with ScriptedOpenAIServer(default=Answer.text("hello")) as server:
        asyncio.run(two_steps(endpoint(server)))
        monkeypatch.setattr("ctu.components.endpoint.KEEPALIVE_S", 0.2)
        asyncio.run(two_steps(endpoint(server)))
    kept, closed = server.peers[:2], server.peers[2:]
    assert kept[0] == kept[1] and closed[0] != closed[1]


def test_an_empty_answer_is_retried_by_complete_and_returned_by_complete_choice_with_its_reasoning():
    """A user simulator's or judge's empty answer is a glitch worth retrying; a policy's (nothing said, or its token
    limit spent reasoning, which a reasoning parser returns apart from the content) is its own turn."""
    thought = Answer(content=None, reasoning="The order id is", finish_reason="length")
    with ScriptedOpenAIServer([thought, Answer.text("hello"), thought]) as server:
        client = ChatEndpoint(OpenAIEndpointParams(model="m", base_url=server.base_url, api_key_env=None, timeout_s=5,
                                                   backoff_s=0.01))

        async def both():
            message = await client.complete(HELLO)
            choice = await client.complete_choice(HELLO)
            return message, choice

        message, choice = asyncio.run(both())
    assert message.content == "hello" and len(server.requests) == 3  # the first, empty, answer retried once
    assert choice.message.content is None and choice.finish_reason == "length"
    assert choice.message.model_extra == {"reasoning": "The order id is"}


def test_a_subclass_overriding_complete_still_receives_the_policys_turns_with_a_deprecation_warning():
    """Written when ctu's sampler called `complete` for a policy's turn: its override (here, a header's worth of
    bookkeeping and a rewrite of the answer) still sees each turn, warned once; a subclass overriding
    `complete_choice` too is its own, unwarned."""
    import pytest

    from ctu.rollout.sampling import OpenAIChatSampler, SamplingParams

    class Logged(ChatEndpoint):
        async def complete(self, messages, tools=None, *, session=None, seed=None, **extra):
            self.seen = [*getattr(self, "seen", []), (session, seed, extra["max_tokens"])]
            message = await super().complete(messages, tools, session=session, seed=seed, **extra)
            return message.model_copy(update={"content": f"[logged] {message.content}"})

    class Current(Logged):
        async def complete_choice(self, messages, tools=None, *, session=None, seed=None, **extra):
            return await super(Logged, self).complete_choice(messages, tools, session=session, seed=seed, **extra)

    with ScriptedOpenAIServer(default=Answer.text("hello")) as server:
        params = OpenAIEndpointParams(model="m", base_url=server.base_url, api_key_env=None, timeout_s=5)
        old, new = Logged(params), Current(params)

        async def turns(client):
            sampler = OpenAIChatSampler(client)
            return [await sampler.chat(HELLO, None, SamplingParams(max_tokens=7, seed=3), session=f"episode-{i}")
                    for i in range(2)]

        with pytest.warns(DeprecationWarning, match="Logged overrides ChatEndpoint.complete") as caught:
            logged = asyncio.run(turns(old))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            current = asyncio.run(turns(new))
    assert len([w for w in caught if issubclass(w.category, DeprecationWarning)]) == 1  # once a class
    assert [turn.text for turn in logged] == ["[logged] hello"] * 2 and [turn.stop_reason for turn in logged] == ["stop"] * 2
    assert old.seen == [("episode-0", 3, 7), ("episode-1", 3, 7)]
    assert [turn.text for turn in current] == ["hello"] * 2 and not hasattr(new, "seen")
