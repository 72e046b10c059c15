"""The built-in user-fault detectors, each on real tau2 tasks: an episode where the simulated customer made the
fault (found, with its reason) and one where it did not (nothing found)."""

from __future__ import annotations

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
    assert StopBeforeWrite().detect(stopped) == (
        "the user stopped in its reply to the agent's confirmation request, before exchange_delivered_order_items ran")
    done = episode([*LOOKUP, CONFIRM, user("Yes, please go ahead."),
                    agent(None, ("exchange_delivered_order_items", {"order_id": "#W2378156"})), tool("ok"),
                    agent("The exchange is done."), user("Thanks! ###STOP###")])
    assert StopBeforeWrite().detect(done) is None
    asked_nothing = episode([*LOOKUP, agent("Your order is on its way."), user("Great. ###STOP###")])
    assert StopBeforeWrite().detect(asked_nothing) is None


def test_unfounded_exit():
    transfer = episode([user("I want to cancel reservation EHGLP3."), agent("Could you give me your user id?"),
                        user("###TRANSFER###")], CANCEL, AIRLINE)
    assert UnfoundedExit().detect(transfer) == "the user said ###TRANSFER### but the agent never transferred it"
    known = episode([user("I want to cancel reservation EHGLP3."), agent("What is your user id, please?"),
                     user("###OUT-OF-SCOPE###")], CANCEL, AIRLINE)
    assert UnfoundedExit().detect(known) == "the user said ###OUT-OF-SCOPE### when asked for its user id, which its scenario gives"
    transferred = episode([user("I want to cancel reservation EHGLP3."),
                           agent(None, ("transfer_to_human_agents", {"summary": "refund request"})), tool("Transfer successful"),
                           user("###TRANSFER###")], CANCEL, AIRLINE)
    assert UnfoundedExit().detect(transferred) is None
    unknown = episode([*LOOKUP, agent("What is your email address?"), user("###OUT-OF-SCOPE###")])  # it does not remember it
    assert UnfoundedExit().detect(unknown) is None


def test_identity_mismatch():
    wrong_zip = episode([user("I'm Yusuf Rossi, zip code 19123."), agent("Thanks, one moment.")])
    assert IdentityMismatch().detect(wrong_zip) == "the user gave the zip code '19123', which its scenario does not hold"
    made_up = episode([user("My user id is emma_kim_1234."), agent("Let me look.")], CANCEL, AIRLINE)
    assert IdentityMismatch().detect(made_up) == "the user gave the user id 'emma_kim_1234', which its scenario does not hold"
    email = episode([user("My email is yusuf.rossi@example.com"), agent("Thanks.")])
    assert "email 'yusuf.rossi@example.com'" in IdentityMismatch().detect(email)
    right = episode([*LOOKUP, agent("Which order?"), user("Order #W2378156, it cost $12345.")])  # amounts, order ids: not facts
    assert IdentityMismatch().detect(right) is None
    assert IdentityMismatch().detect(episode([user("My user id is emma_kim_9957.")], CANCEL, AIRLINE)) is None


def test_empty_user_message():
    assert EmptyUserMessage().detect(episode([*LOOKUP, agent("Anything else?"), user("")])) == "the user sent an empty message"
    assert EmptyUserMessage().detect(episode([*LOOKUP, agent("Anything else?"), user("...?!")])) == (
        "the user sent a message with no word in it: '...?!'")
    assert EmptyUserMessage().detect(episode([*LOOKUP, agent("Anything else?"), user("###STOP###")])) is None


def test_the_policy_reports_the_first_fault_and_survives_a_broken_detector():
    class Broken:
        def detect(self, episode):
            raise RuntimeError("bug")

    policy = UserFaultPolicy((("broken", Broken()), ("stop_before_write", StopBeforeWrite()), ("empty_user_message", EmptyUserMessage())))
    found = policy.check(episode([*LOOKUP, CONFIRM, user("Yes, please go ahead. ###STOP###")]))
    assert found is not None and found.kind == "stop_before_write"
    assert UserFaultPolicy().check(episode([user("")])) is None


def test_unperformed_device_action():
    ask = agent("Please toggle airplane mode on and off, then tell me what you see.")
    claimed = episode([user("My mobile data is very slow."), ask, user("OK, I've toggled airplane mode. Still slow.")],
                      SLOW_DATA, TELECOM)
    assert UnperformedDeviceAction().detect(claimed) == (
        "the user said \"I've toggled\" without a tool call on its device since the agent's last message")
    call = UserMessage(role="user", content=None, tool_calls=[ToolCall(id="u0", name="toggle_airplane_mode", arguments={},
                                                                         requestor="user")])
    done = episode([user("My mobile data is very slow."), ask, call,
                    ToolMessage(id="u0", role="tool", content="Airplane mode is ON", requestor="user"),
                    user("I've toggled airplane mode. Still slow.")], SLOW_DATA, TELECOM)
    assert UnperformedDeviceAction().detect(done) is None
    no_device = episode([*LOOKUP, agent("Anything else?"), user("I've changed my mind, thanks.")])  # retail: no user tools
    assert UnperformedDeviceAction().detect(no_device) is None


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
