"""The `scripted` user: deterministic openings, consent, stopping, and telecom's device actions."""

from __future__ import annotations

import asyncio

from ctu.components.user_simulators.scripted import ScriptedUserSimulator, opening_line, pending_user_actions
from tau_bench_env.env import shared_domain


def reply(session, text: str):
    from tau2.data_model.message import AssistantMessage

    return asyncio.run(session.reply(AssistantMessage(role="assistant", content=text)))


def test_opens_with_reason_and_known_info_then_consents_and_stops():
    task = shared_domain("retail").task("0")
    session = ScriptedUserSimulator(ScriptedUserSimulator.Params(turn_budget=3)).session(task, None, [])
    first = reply(session, "Hi! How can I help you today?")
    assert first.content == opening_line(task) and "exchange" in first.content
    assert reply(session, "Shall I proceed?").content == "Yes, please go ahead."
    assert reply(session, "Done.").content == "Okay, thank you."
    assert reply(session, "Anything else?").content == "###STOP###"


def test_turn_budget_ends_the_call():
    task = shared_domain("retail").task("1")
    session = ScriptedUserSimulator(ScriptedUserSimulator.Params(turn_budget=2)).session(task, None, [])
    texts = [reply(session, "Tell me more.").content for _ in range(4)]
    assert texts[-1] == "###STOP###" and texts[1] != "###STOP###"


def test_telecom_device_actions_are_performed_when_due():
    task = shared_domain("telecom").tasks("base")[0]
    trajectory: list = []
    session = ScriptedUserSimulator().session(task, None, trajectory)
    reply(session, "Hi!")
    due = pending_user_actions(task, trajectory)
    assert due and due[0].requestor == "user"
    message = reply(session, "Please toggle airplane mode.")
    assert [call.name for call in message.tool_calls] == [a.name for a in due]
    assert all(call.requestor == "user" for call in message.tool_calls)
    trajectory.append(message)
    assert pending_user_actions(task, trajectory) != due


def test_same_task_same_answers():
    task = shared_domain("airline").task(shared_domain("airline").tasks("base")[3].id)
    runs = []
    for _ in range(2):
        session = ScriptedUserSimulator().session(task, None, [])
        runs.append([reply(session, text).content for text in ("Hi!", "Your name?", "Confirm?", "Anything else?")])
    assert runs[0] == runs[1]
