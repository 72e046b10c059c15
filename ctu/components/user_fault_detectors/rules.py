"""The built-in user-fault detectors: rules over a finished episode's tau2 messages and its task, no model.

| detector | fault | source |
| --- | --- | --- |
| `stop_before_write` | the user ends the call (``###STOP###``) in its reply to the agent's request to confirm, and a write of the task's gold actions never ran | tau2-bench issue #182, PR #297 |
| `unfounded_exit` | ``###TRANSFER###`` with no transfer by the agent; ``###OUT-OF-SCOPE###`` in reply to a question for a fact (name, zip code, email, user id) the scenario gives | tau2-bench issue #517 |
| `identity_mismatch` | the user gives an email, zip code or user id that its scenario does not hold | tau2-bench PR #392 |
| `empty_user_message` | a user message with no text and no tool call, or text without a letter or a digit | tau2-bench PR #392 |
| `unperformed_device_action` | in a domain where the customer has tools (telecom's phone), it says it did something on its device without a tool call since the agent's last message | tau2-bench PR #392 |
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ctu.components.user_fault_detectors.base import Detector, FinishedEpisode
from tau_bench_env.episode import OUT_OF_SCOPE, STOP, TRANSFER, USER_STOP_TOKENS

if TYPE_CHECKING:
    from tau2.data_model.message import Message

CONFIRMATION = re.compile(r"\b(confirm|proceed|go ahead|shall i|should i|would you like|do you want|yes/no|\(yes\))",
                          re.IGNORECASE)
"""Words of an agent's request to confirm an action (tau2's retail and airline policies ask an explicit yes)."""
FACTS = {
    "email": re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    "zip code": re.compile(r"(?<![\w#$.,])\d{5}(?!\w|[.,]\d)"),
    "user id": re.compile(r"\b[a-z]+_[a-z]+_\d{3,}\b"),
}
"""Identity facts a user gives, as they are written in tau2's scenarios."""
ASKED = {"name": re.compile(r"\bname\b", re.I), "zip code": re.compile(r"\bzip\b", re.I),
         "email": re.compile(r"\be-?mail\b", re.I), "user id": re.compile(r"\buser ?id\b", re.I)}
"""What an agent's question asks for, by fact."""


def _text(message: Message) -> str:
    return str(getattr(message, "content", None) or "")


def _users(episode: FinishedEpisode) -> list[Message]:
    return [message for message in episode.messages if message.role == "user"]


def _called(messages: list[Message] | tuple[Message, ...]) -> set[str]:
    return {call.name for message in messages if message.role == "assistant" for call in (getattr(message, "tool_calls", None) or [])}


class StopBeforeWrite(Detector):
    """The user says ``###STOP###`` in its reply to the agent's request to confirm (its last text asks a
    question with a confirmation word), and a write the task's gold actions hold was never called: the customer
    agreed and hung up before the agent could act (tau2-bench issue #182: a prompt fix moved pass^1 from 63.1% to
    78.9%; PR #297)."""

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """The fault's line, or None."""
        messages = list(episode.messages)
        stop = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == "user" and STOP in _text(messages[i])), None)
        if stop is None:
            return None
        asked = next((messages[i] for i in range(stop - 1, -1, -1) if messages[i].role == "assistant"), None)
        if asked is None or getattr(asked, "tool_calls", None):
            return None
        question = _text(asked)
        if "?" not in question or not CONFIRMATION.search(question):
            return None
        gold = {action.name for action in (episode.task.evaluation_criteria.actions or [])
                if action.requestor == "assistant" and action.name in episode.write_tools} if episode.task.evaluation_criteria else set()
        missing = sorted(gold - _called(messages))
        if not missing:
            return None
        return f"the user stopped in its reply to the agent's confirmation request, before {', '.join(missing)} ran"


class UnfoundedExit(Detector):
    """``###TRANSFER###`` when the agent never called a transfer tool, or ``###OUT-OF-SCOPE###`` in reply to the
    agent asking for a fact (name, zip code, email, user id) that the scenario gives the user (tau2-bench issue #517:
    such exits are recorded and scored as ordinary user stops)."""

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """The fault's line, or None."""
        messages = list(episode.messages)
        scenario = str(episode.task.user_scenario)
        for index, message in enumerate(messages):
            if message.role != "user":
                continue
            text = _text(message)
            if TRANSFER in text and not any("transfer" in name for name in _called(messages[:index])):
                return "the user said ###TRANSFER### but the agent never transferred it"
            if OUT_OF_SCOPE in text:
                asked = next((_text(m) for m in reversed(messages[:index]) if m.role == "assistant" and _text(m)), "")
                known = [fact for fact, pattern in ASKED.items() if pattern.search(asked) and _gives(scenario, fact)]
                if known:
                    return f"the user said ###OUT-OF-SCOPE### when asked for its {known[0]}, which its scenario gives"
        return None


def _gives(scenario: str, fact: str) -> bool:
    """Whether a scenario states `fact` (a name is always given: "You are <name>")."""
    return fact == "name" or bool(FACTS[fact].search(scenario))


class IdentityMismatch(Detector):
    """The user gives an email address, zip code or user id that its scenario does not hold: a made-up or
    contradicting identity makes the agent's correct lookup fail (tau2-bench PR #392's user-simulator false
    negatives)."""

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """The fault's line, or None."""
        scenario = str(episode.task.user_scenario)
        for message in _users(episode):
            for fact, pattern in FACTS.items():
                for value in pattern.findall(_text(message)):
                    if value not in scenario:
                        return f"the user gave the {fact} {value!r}, which its scenario does not hold"
        return None


class EmptyUserMessage(Detector):
    """A user message with no text and no tool call, or whose text holds no letter or digit (garbled), other than
    a stop token alone (tau2-bench PR #392)."""

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """The fault's line, or None."""
        for message in _users(episode):
            text = _text(message).strip()
            if text in USER_STOP_TOKENS:
                continue
            if not text and not getattr(message, "tool_calls", None):
                return "the user sent an empty message"
            if text and not re.search(r"[^\W_]", text):
                return f"the user sent a message with no word in it: {text[:40]!r}"
        return None


DEVICE_CLAIM = re.compile(
    r"\bI(?:'ve| have)?\s+(?:just\s+|now\s+|already\s+)?(?:turned|toggled|switched|restarted|rebooted|reset|reseated|"
    r"enabled|disabled|connected|disconnected|granted|ran|run|set|changed|removed|reinserted|inserted)\b", re.IGNORECASE)
"""A customer's sentence saying it did something on its device ("I've toggled airplane mode", "I restarted")."""


class UnperformedDeviceAction(Detector):
    """In a domain where the customer has tools (telecom's phone), the customer says it did something on its
    device (turned, toggled, restarted, reset, reseated, ran a test...) with no tool call of its own since the
    agent's last message: the agent then reasons from a device state that never was (tau2-bench PR #392's
    user-simulator false negatives)."""

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """The fault's line, or None."""
        if not episode.user_tools:
            return None
        acted = False
        for message in episode.messages:
            if message.role == "assistant":
                acted = False
            elif message.role == "user":
                if getattr(message, "tool_calls", None):
                    acted = True
                claim = DEVICE_CLAIM.search(_text(message))
                if claim and not acted:
                    return f"the user said {claim.group(0)!r} without a tool call on its device since the agent's last message"
        return None
