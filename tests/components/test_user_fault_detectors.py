"""The built-in user-fault detectors, each on real tau2 tasks: an episode where the simulated customer made the
fault (found, with its reason) and one where it did not (nothing found)."""

from __future__ import annotations

import asyncio

import pytest
from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

from ctu.components.user_fault_detectors.base import FinishedEpisode, UserFaultPolicy
from ctu.components.user_fault_detectors.rules import (
    EmptyUserMessage,
    IdentityMismatch,
    StopBeforeWrite,
    UnfoundedExit,
    UnperformedDeviceAction,
)
from tau_bench_env.env import shared_domain

RETAIL = shared_domain("retail")
AIRLINE = shared_domain("airline")
TELECOM = shared_domain("telecom")
KEYBOARD = RETAIL.tasks("base")[0]  # Yusuf Rossi, zip 19122, exchanges two items of order #W2378156 (a write)
CANCEL = AIRLINE.tasks("base")[0]  # Emma Kim, user id emma_kim_9957, wants reservation EHGLP3 cancelled
SLOW_DATA = TELECOM.tasks("base")[0]  # John Smith abroad: mobile data slow; the gold has the user toggle airplane mode


def detect(detector, episode):
    return asyncio.run(detector.detect(episode))


def user(text: str) -> UserMessage:
    return UserMessage(role="user", content=text)


def agent(text: str | None = None, *calls: tuple[str, dict]) -> AssistantMessage:
    tool_calls = [ToolCall(id=f"c{i}", name=name, arguments=args, requestor="assistant") for i, (name, args) in enumerate(calls)]
    return AssistantMessage(role="assistant", content=text, tool_calls=tool_calls or None)


def tool(text: str, index: int = 0) -> ToolMessage:
    return ToolMessage(id=f"c{index}", role="tool", content=text, requestor="assistant")


def episode(messages: list, task=KEYBOARD, domain=RETAIL, termination: str = "user_stop") -> FinishedEpisode:
    user_tools = frozenset(tool.name for tool in domain.user_tools or ())
    return FinishedEpisode(domain.name, task, tuple(messages), termination, domain.write_tools, user_tools)


LOOKUP = [user("Hi, I'd like to exchange two items. I'm Yusuf Rossi, zip code 19122."),
          agent(None, ("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"})),
          tool("yusuf_rossi_9620")]
CONFIRM = agent("I can exchange the keyboard for item 7706410293. Do you confirm this exchange (yes/no)?")


def test_stop_before_write():
    stopped = episode([*LOOKUP, CONFIRM, user("Yes, please go ahead. ###STOP###")])
    assert detect(StopBeforeWrite(), stopped) == (
        "the user stopped in its reply to the agent's confirmation request, before exchange_delivered_order_items ran")
    done = episode([*LOOKUP, CONFIRM, user("Yes, please go ahead."),
                    agent(None, ("exchange_delivered_order_items", {"order_id": "#W2378156"})), tool("ok"),
                    agent("The exchange is done."), user("Thanks! ###STOP###")])
    assert detect(StopBeforeWrite(), done) is None
    asked_nothing = episode([*LOOKUP, agent("Your order is on its way."), user("Great. ###STOP###")])
    assert detect(StopBeforeWrite(), asked_nothing) is None


def test_unfounded_exit():
    transfer = episode([user("I want to cancel reservation EHGLP3."), agent("Could you give me your user id?"),
                        user("###TRANSFER###")], CANCEL, AIRLINE)
    assert detect(UnfoundedExit(), transfer) == "the user said ###TRANSFER### but the agent never transferred it"
    known = episode([user("I want to cancel reservation EHGLP3."), agent("What is your user id, please?"),
                     user("###OUT-OF-SCOPE###")], CANCEL, AIRLINE)
    assert detect(UnfoundedExit(), known) == "the user said ###OUT-OF-SCOPE### when asked for its user id, which its scenario gives"
    transferred = episode([user("I want to cancel reservation EHGLP3."),
                           agent(None, ("transfer_to_human_agents", {"summary": "refund request"})), tool("Transfer successful"),
                           user("###TRANSFER###")], CANCEL, AIRLINE)
    assert detect(UnfoundedExit(), transferred) is None
    unknown = episode([*LOOKUP, agent("What is your email address?"), user("###OUT-OF-SCOPE###")])  # it does not remember it
    assert detect(UnfoundedExit(), unknown) is None


def test_identity_mismatch():
    wrong_zip = episode([user("I'm Yusuf Rossi, zip code 19123."), agent("Thanks, one moment.")])
    assert detect(IdentityMismatch(), wrong_zip) == "the user gave the zip code '19123', which its scenario does not hold"
    made_up = episode([user("My user id is emma_kim_1234."), agent("Let me look.")], CANCEL, AIRLINE)
    assert detect(IdentityMismatch(), made_up) == "the user gave the user id 'emma_kim_1234', which its scenario does not hold"
    email = episode([user("My email is yusuf.rossi@example.com"), agent("Thanks.")])
    assert "email 'yusuf.rossi@example.com'" in detect(IdentityMismatch(), email)
    right = episode([*LOOKUP, agent("Which order?"), user("Order #W2378156, it cost $12345.")])  # amounts, order ids: not facts
    assert detect(IdentityMismatch(), right) is None
    assert detect(IdentityMismatch(), episode([user("My user id is emma_kim_9957.")], CANCEL, AIRLINE)) is None


def test_empty_user_message():
    assert detect(EmptyUserMessage(), episode([*LOOKUP, agent("Anything else?"), user("")])) == "the user sent an empty message"
    assert detect(EmptyUserMessage(), episode([*LOOKUP, agent("Anything else?"), user("...?!")])) == (
        "the user sent a message with no word in it: '...?!'")
    assert detect(EmptyUserMessage(), episode([*LOOKUP, agent("Anything else?"), user("###STOP###")])) is None


def test_the_policy_reports_the_first_fault_and_survives_a_broken_detector():
    class Broken:
        async def detect(self, episode):
            raise RuntimeError("bug")

    policy = UserFaultPolicy((("broken", Broken()), ("stop_before_write", StopBeforeWrite()), ("empty_user_message", EmptyUserMessage())))
    found = asyncio.run(policy.check(episode([*LOOKUP, CONFIRM, user("Yes, please go ahead. ###STOP###")])))
    assert found is not None and found.kind == "stop_before_write"
    assert asyncio.run(UserFaultPolicy().check(episode([user("")]))) is None


def test_unperformed_device_action():
    ask = agent("Please toggle airplane mode on and off, then tell me what you see.")
    claimed = episode([user("My mobile data is very slow."), ask, user("OK, I've toggled airplane mode. Still slow.")],
                      SLOW_DATA, TELECOM)
    assert detect(UnperformedDeviceAction(), claimed) == (
        "the user said \"I've toggled\" without a tool call on its device since the agent's last message")
    call = UserMessage(role="user", content=None, tool_calls=[ToolCall(id="u0", name="toggle_airplane_mode", arguments={},
                                                                         requestor="user")])
    done = episode([user("My mobile data is very slow."), ask, call,
                    ToolMessage(id="u0", role="tool", content="Airplane mode is ON", requestor="user"),
                    user("I've toggled airplane mode. Still slow.")], SLOW_DATA, TELECOM)
    assert detect(UnperformedDeviceAction(), done) is None
    no_device = episode([*LOOKUP, agent("Anything else?"), user("I've changed my mind, thanks.")])  # retail: no user tools
    assert detect(UnperformedDeviceAction(), no_device) is None


@pytest.mark.parametrize("name", ["stop_before_write", "unfounded_exit", "identity_mismatch", "empty_user_message",
                                  "unperformed_device_action"])
def test_each_detector_is_registered_and_a_spec_turns_it_on(name: str):
    from ctu.composition import build_components
    from ctu.spec import load_spec

    from ..conftest import REPO

    spec = load_spec(REPO / "specs" / "smoke.yaml", [f"environment.user_faults.detectors=[{name}]",
                                                     "environment.user_faults.action=keep"]).spec
    faults = build_components(spec).user_faults
    assert [n for n, _ in faults.detectors] == [name] and faults.action == "keep"


def test_the_llm_reviewer_keeps_its_reason_and_finds_nothing_when_it_cannot_answer():
    """The reviewer behind an OpenAI-compatible server on 127.0.0.1: a `deviated` verdict is a fault with its
    reason, `followed` none; an endpoint that stays down, or an answer without a verdict, finds no fault."""
    from ctu.components.user_fault_detectors.reviewer import LLMReviewer
    from tests.support.openai_server import Answer, ScriptedOpenAIServer

    def reviewer(server, **extra) -> LLMReviewer:
        return LLMReviewer(LLMReviewer.Params(model="reviewer", base_url=server.base_url, api_key_env=None,
                                              backoff_s=0.01, max_retries=1, timeout_s=2.0, **extra))

    stopped = episode([*LOOKUP, CONFIRM, user("Yes, please go ahead. ###STOP###")])
    answers = [Answer.text("Verdict: deviated\nReason: it hung up before the exchange was made."),
               Answer.text("Verdict: followed\nReason: it stayed in its scenario."), Answer.text("I cannot tell.")]
    with ScriptedOpenAIServer(answers) as server:
        found = [detect(reviewer(server), stopped) for _ in range(3)]
    assert found == ["the reviewer: it hung up before the exchange was made.", None, None]
    sent = server.requests[0]["messages"][0]["content"]
    assert "Yusuf Rossi" in sent and "user: Yes, please go ahead. ###STOP###" in sent and "[calls find_user_id_by_name_zip(" in sent
    with ScriptedOpenAIServer(default=Answer.error(500)) as down:
        assert detect(reviewer(down), stopped) is None and len(down.requests) == 2  # retried once, then no verdict


def test_retry_with_a_greedy_customer_is_warned_about():
    from ctu.spec import load_spec

    from ..conftest import REPO

    user = "environment.user_simulator={type: llm, model: u, base_url: 'http://127.0.0.1:9/v1', api_key_env: null}"
    faults = ["environment.user_faults.detectors=[stop_before_write]", "environment.user_faults.action=retry"]
    greedy = load_spec(REPO / "specs" / "smoke.yaml", [user, *faults])
    assert [w.path for w in greedy.warnings if "temperature 0" in w.message] == ["environment.user_faults.action"]
    sampled = load_spec(REPO / "specs" / "smoke.yaml", [user, *faults, "environment.user_simulator.temperature=0.7"])
    assert not [w for w in sampled.warnings if w.path == "environment.user_faults.action"]


def test_retry_with_a_customer_that_replays_identically_is_warned_about():
    """The scripted customer answers a replay exactly as before (`replays_identically`): every retry would repeat
    the fault."""
    from ctu.spec import load_spec

    from ..conftest import REPO

    faults = ["environment.user_faults.detectors=[stop_before_write]", "environment.user_faults.action=retry"]
    scripted = load_spec(REPO / "specs" / "smoke.yaml", faults)  # smoke.yaml's customer is the scripted one
    assert [w.message for w in scripted.warnings if w.path == "environment.user_faults.action"] == [
        "`retry` plays an episode again to draw another customer, but the scripted user simulator answers a replay "
        "exactly as before, so every retry repeats the fault: use `exclude`, or a user simulator that samples"]
    excluded = load_spec(REPO / "specs" / "smoke.yaml", [faults[0]])
    assert not [w for w in excluded.warnings if w.path == "environment.user_faults.action"]
