"""The `llm` user simulator against a real OpenAI-compatible server on 127.0.0.1 (scripted answers, faults)."""

from __future__ import annotations

import asyncio

import pytest

from ctu.components.endpoint import ChatEndpoint, EndpointError
from ctu.components.parsers.base import ParsedTurn
from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.llm import SCHEMA_LISTS, LLMUserSession, LLMUserSimulator
from tau_bench_env.env import shared_domain
from tau_bench_env.episode import Episode
from tau_bench_env.outcome import EpisodeConfig
from tests.support.openai_server import Answer, ScriptedOpenAIServer


def simulator(server: ScriptedOpenAIServer, **params) -> LLMUserSimulator:
    values = {"model": "user-model", "base_url": server.base_url, "api_key_env": None, "backoff_s": 0.01, "timeout_s": 2.0}
    return LLMUserSimulator(LLMUserSimulator.Params(**{**values, **params}))


def episode(user, domain="retail", task_index=0, **config) -> Episode:
    d = shared_domain(domain)
    return Episode(d, d.tasks("base")[task_index], user, HermesParser(), EpisodeConfig(**config))


def test_conversation_proceeds_with_tau2_prompts_and_flipped_roles():
    answers = [Answer.text("Hi, I want to exchange a keyboard."), Answer.text("My zip is 19122."), Answer.text("###STOP###")]
    with ScriptedOpenAIServer(answers) as server:
        ep = episode(simulator(server))
        prompt = asyncio.run(ep.reset())
        assert prompt[-1] == {"role": "user", "content": "Hi, I want to exchange a keyboard."}
        asyncio.run(ep.step(ParsedTurn(content="Sure, what is your zip code?")))
        result = asyncio.run(ep.step(ParsedTurn(content="Thanks, anything else?")))
    assert result.done and ep.termination.value == "user_stop"
    first, second = server.requests[0], server.requests[1]
    assert first["model"] == "user-model"
    system = first["messages"][0]
    assert system["role"] == "system" and "<scenario>" in system["content"] and "exchange" in system["content"]
    # the agent's greeting reaches the user LLM as a user message (roles flipped, as tau2 does)
    assert first["messages"][1] == {"role": "user", "content": "Hi! How can I help you today?"}
    assert [m["role"] for m in second["messages"][1:]] == ["user", "assistant", "user"]
    assert second["messages"][-1]["content"] == "Sure, what is your zip code?"


def test_each_customers_replies_share_a_session_header_of_their_own():
    """A router with session affinity keeps one customer's conversation on one replica by `X-Session-ID`; a
    customer's reply checks (verify) are single requests and carry none."""
    answers = [Answer.text("Hi, I want to exchange a keyboard."), Answer.text("Yes"), Answer.text("My zip is 19122."),
               Answer.text("Yes")]
    with ScriptedOpenAIServer([*answers, *answers]) as server:
        user = simulator(server, strategy="verify")
        for _ in range(2):
            ep = episode(user)
            asyncio.run(ep.reset())
            asyncio.run(ep.step(ParsedTurn(content="Sure, what is your zip code?")))
    sessions = [headers.get("x-session-id") for headers in server.request_headers]
    assert sessions[1::2] == [None] * 4  # the checks
    replies = sessions[0::2]
    assert None not in replies and replies[0] == replies[1] != replies[2] == replies[3]


def test_faults_are_retried_until_an_answer_arrives():
    faults = [Answer.error(429), Answer.error(500), Answer.malformed(), Answer.malformed(b'{"choices": []}'), Answer.slow(1.0)]
    with ScriptedOpenAIServer([*faults, Answer.text("Hello there.")]) as server:
        ep = episode(simulator(server, max_retries=6, timeout_s=0.3))
        prompt = asyncio.run(ep.reset())
    assert prompt[-1]["content"] == "Hello there."
    assert len(server.requests) == 6
    assert not ep.done


def test_a_dead_endpoint_ends_the_episode_flagged_without_raising():
    with ScriptedOpenAIServer(default=Answer.error(503)) as server:
        ep = episode(simulator(server, max_retries=2))
        prompt = asyncio.run(ep.reset())
    assert ep.done and ep.termination.value == "user_error" and ep.reward == 0.0
    assert "503" in ep.user_error and "3 attempts" in ep.user_error
    assert len(server.requests) == 3
    assert prompt[-1]["role"] == "assistant"  # the greeting; no user message came


def test_an_unreachable_endpoint_is_a_user_error_too():
    with ScriptedOpenAIServer() as server:
        url = server.base_url
    sim = LLMUserSimulator(LLMUserSimulator.Params(model="m", base_url=url, api_key_env=None, max_retries=1, backoff_s=0.01, timeout_s=1))
    ep = episode(sim)
    asyncio.run(ep.reset())
    assert ep.termination.value == "user_error" and "Connection" in ep.user_error


def test_client_errors_are_not_retried():
    with ScriptedOpenAIServer(default=Answer.error(401)) as server:
        endpoint = ChatEndpoint(simulator(server).params)
        with pytest.raises(EndpointError, match="refused"):
            asyncio.run(endpoint.complete([{"role": "user", "content": "hi"}]))
    assert len(server.requests) == 1


def test_user_tool_calls_run_on_the_users_device():
    """Telecom: the user model may call its own tools; their results go back to it before it replies."""
    answers = [Answer.text("My phone has no service."), Answer.calls(("check_status_bar", {})), Answer.text("It shows no signal.")]
    with ScriptedOpenAIServer(answers) as server:
        ep = episode(simulator(server), domain="telecom")
        asyncio.run(ep.reset())
        result = asyncio.run(ep.step(ParsedTurn(content="What does your status bar show?")))
    assert result.observations == [{"role": "user", "content": "It shows no signal."}]
    assert server.requests[0]["tools"], "telecom's user tools are offered to the user model"
    tool_result = server.requests[2]["messages"][-1]
    assert tool_result["role"] == "tool" and "tool_call_id" in tool_result
    user_calls = [m for m in ep.trajectory if m.role == "user" and m.tool_calls]
    assert user_calls[0].tool_calls[0].requestor == "user"


def test_every_request_holds_the_whole_history_flipped_as_tau2_flips_it(monkeypatch):
    """The customer's chat is flipped message by message as the history grows (`LLMUserSession._prompt`): each
    request holds what tau2's `flip_roles` makes of the whole history at that point, user tool calls and their
    results included, over several turns."""
    from tau2.user.base import UserState

    from tau_bench_env.messages import conversation_to_openai

    answers = [Answer.text("My phone has no service."), Answer.calls(("check_status_bar", {})), Answer.text("No signal."),
               Answer.text("Done, still nothing."), Answer.calls(("check_status_bar", {})), Answer.text("Now it works.")]
    sent_histories = []
    original = LLMUserSession._prompt

    def recording(session, note=None):
        sent_histories.append(list(session.history))
        return original(session, note)

    monkeypatch.setattr(LLMUserSession, "_prompt", recording)
    with ScriptedOpenAIServer(answers) as server:
        ep = episode(simulator(server), domain="telecom")
        asyncio.run(ep.reset())
        asyncio.run(ep.step(ParsedTurn(content="What does your status bar show?")))
        asyncio.run(ep.step(ParsedTurn(content="Please restart your phone.")))
        asyncio.run(ep.step(ParsedTurn(content="Please look again.")))
    assert len(server.requests) == len(sent_histories) == 6
    for request, history in zip(server.requests, sent_histories, strict=True):
        expected = conversation_to_openai(UserState(system_messages=[], messages=history).flip_roles())
        assert request["messages"][1:] == expected
    assert [m["role"] for m in server.requests[-1]["messages"][1:]].count("tool") == 2


def test_user_tool_schemas_are_tau2s_built_once_per_domain():
    """Every telecom episode offers the user tau2's schemas of its tools; they are built once, not per episode."""
    domain = shared_domain("telecom")
    with ScriptedOpenAIServer([]) as server:
        user = simulator(server)
        first, second = (user.session(task, domain.user_tools, []) for task in domain.tasks("base")[:2])
    assert first.tools == [tool.openai_schema for tool in domain.user_tools]
    assert first.tools and second.tools is first.tools
    assert user.session(domain.tasks("base")[0], list(domain.user_tools), []).tools == first.tools
    for _ in range(SCHEMA_LISTS + 4):  # a caller handing over a new list each time: the memo stays bounded
        assert user.tool_schemas(list(domain.user_tools)) == first.tools
    assert len(user._schemas) == SCHEMA_LISTS


@pytest.mark.parametrize("strategy", ["react", "verify", "reflection"])
def test_strategies(strategy):
    if strategy == "react":
        answers = [Answer.text("Thought: I should greet.\nUser Response: Hello, my order is late.")]
        expected = "Hello, my order is late."
    elif strategy == "verify":
        answers = [Answer.text("I am an AI."), Answer.text("No"), Answer.text("Hello, my order is late."), Answer.text("Yes")]
        expected = "Hello, my order is late."
    else:
        answers = [Answer.text("I am an AI."), Answer.text("No"), Answer.text("Stay in role."), Answer.text("Hi, order late."), Answer.text("Yes")]
        expected = "Hi, order late."
    with ScriptedOpenAIServer(answers) as server:
        ep = episode(simulator(server, strategy=strategy))
        prompt = asyncio.run(ep.reset())
    assert prompt[-1]["content"] == expected
    if strategy == "reflection":
        assert "Stay in role." in server.requests[3]["messages"][0]["content"]


def test_slow_user_does_not_block_other_episodes():
    """Eight episodes' users are all in flight at once: the server answers none until all eight requests have
    arrived (a barrier), so a simulator that blocked the event loop would never get an answer."""
    import threading

    barrier = threading.Barrier(8, timeout=60)

    def answer(body):
        barrier.wait()
        return Answer.text("Hello.")

    with ScriptedOpenAIServer(default=answer) as server:
        user = simulator(server, max_retries=0, timeout_s=90)

        async def main():
            episodes = [episode(user, task_index=i) for i in range(8)]
            await asyncio.gather(*(ep.reset() for ep in episodes))
            return episodes

        episodes = asyncio.run(main())
    assert all(ep.conversation[-1]["content"] == "Hello." for ep in episodes), [ep.user_error for ep in episodes]
    assert len(server.requests) == 8


def test_the_users_tool_errors_count_against_max_errors_as_in_tau2():
    """tau2's orchestrator counts every tool error, the user's (telecom's device tools) as much as the agent's."""
    answers = [Answer.text("My phone has no service."), Answer.calls(("toggle_airplane_mode", {"not_an_argument": 1})),
               Answer.text("It did not work.")]
    with ScriptedOpenAIServer(answers) as server:
        ep = episode(simulator(server), domain="telecom", max_errors=1)
        asyncio.run(ep.reset())
        result = asyncio.run(ep.step(ParsedTurn(content="Please turn airplane mode off and on.")))
    assert ep.user_tool_errors == 1 and ep.tool_errors == 0
    assert result.done and ep.termination.value == "too_many_errors"
    assert ep.result().user_tool_errors == 1


@pytest.mark.parametrize("version", ["tau2", "ctu-v1"])
def test_the_customers_guidelines_are_the_named_version(version: str):
    """`tau2`: tau2's system prompt to the character; `ctu-v1`: tau2's guidelines, then ctu's rules, then the
    scenario (what the server receives)."""
    from tau2.user.user_simulator import UserSimulator as Tau2UserSimulator

    from ctu.components.user_simulators.guidelines import CTU_V1

    with ScriptedOpenAIServer([Answer.text("Hi, I want to exchange a keyboard.")]) as server:
        ep = episode(simulator(server, guidelines=version))
        asyncio.run(ep.reset())
    sent = server.requests[0]["messages"][0]["content"]
    tau2 = Tau2UserSimulator(tools=None, instructions=str(ep.task.user_scenario))
    if version == "tau2":
        assert sent == tau2.system_prompt
    else:
        assert sent.startswith(tau2.global_simulation_guidelines + CTU_V1) and sent.endswith(tau2.system_prompt[-200:])
        assert "Confirming an action is not the end of the task" in sent and sent.index(CTU_V1) < sent.index("<scenario>")
