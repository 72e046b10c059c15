"""A constructed user-simulator fault on retail task 0, for tests and benchmarks of the user-fault detectors: the
agent's gold turns with a request to confirm before the write (`confirming_turns`), and a scripted customer on
127.0.0.1 that hangs up right after agreeing to it in one conversation in five (`HastyCustomer`; tau2-bench issue
#182's fault)."""

from __future__ import annotations

import threading
from typing import Any

from tests.support.openai_server import Answer

CONFIRM = "I can exchange both items now. Do you confirm the exchange (yes/no)?"
"""The agent's request to confirm, asked before the write (as tau2's retail policy requires)."""


def confirming_turns() -> list[Any]:
    """Retail task 0's gold replay as `ParsedTurn`s, with `CONFIRM` asked right before the first write."""
    from ctu.components.parsers.base import ParsedTurn
    from tau_bench_env.env import shared_domain
    from tau_bench_env.replay import GoldReplayAgent, effective_writes

    domain = shared_domain("retail")
    task = domain.task("0")
    turns = list(GoldReplayAgent(task, None, effective_writes(domain.episode_environment(task), task)).turns())
    write = next(i for i, turn in enumerate(turns) if any(call.name in domain.write_tools for call in turn.tool_calls))
    turns.insert(write, ParsedTurn(content=CONFIRM))
    return turns


class HastyCustomer:
    """The customer of retail task 0, as a `ScriptedOpenAIServer`'s answer function: it gives its order, name and
    zip code, agrees to every request to confirm, and in its reply to every fifth (the 1st, 6th, ...) adds tau2's
    ``###STOP###``, hanging up before the agent's write."""

    def __init__(self) -> None:
        self.confirmations = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Answer:
        said = body["messages"][-1]["content"] or ""  # the agent's last message (the customer's view: roles flipped)
        if "(yes/no)" in said:
            with self.lock:
                self.confirmations += 1
                hasty = self.confirmations % 5 == 1
            return Answer.text("Yes, go ahead. ###STOP###" if hasty else "Yes, go ahead.")
        if len(body["messages"]) <= 2:
            return Answer.text("Hi, I'd like to exchange two items of order #W2378156. I'm Yusuf Rossi, zip code 19122.")
        return Answer.text("Thanks, that's all. ###STOP###")
