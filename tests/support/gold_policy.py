"""A policy endpoint for `ScriptedOpenAIServer` that plays tau2 tasks' gold actions: the test suite's stand-in for a
policy that succeeds (tests/evaluation/test_eval.py, benchmarks/view_page.py). Test support only."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from ctu.components.user_simulators.scripted import opening_line
from tau_bench_env.domains import tau2_domain
from tau_bench_env.replay import Corruption, GoldReplayAgent, effective_writes

from .openai_server import Answer


class GoldPolicy:
    """Answers each request as the gold replay of the task whose opening line starts the conversation: native tool
    calls when `native`, else Hermes ``<tool_call>`` text (the request must then carry no ``tools``).

    Sample k of task i (k: from the request's seed, `ctu.rollout.generator.episode_seed` of `seed`, the spec's
    experiment seed; i: the task's index in `tasks`) is a gold replay missing its last write (reward 0) when (i, k)
    is in `spoiled`, and answered with HTTP 500 when it is `down` (an infrastructure error).

    Args:
        domain: a tau2 domain (``retail``); split: its task split; tasks: how many of the split's first tasks.
    """

    def __init__(self, native: bool, seed: int, domain: str = "retail", split: str = "test", tasks: int = 3,
                 spoiled: Collection[tuple[int, int]] = (), down: tuple[int, int] | None = None) -> None:
        self.native, self.seed, self.spoiled, self.down, self.domain = native, seed, set(spoiled), down, domain
        environment = tau2_domain(domain)
        self.tasks = environment.tasks(split)[:tasks]
        self.writes = [effective_writes(environment.episode_environment(task), task) for task in self.tasks]

    def __call__(self, body: dict[str, Any]) -> Answer:
        messages = body["messages"]
        opener = next(m["content"] for m in messages if m["role"] == "user")
        index = next(i for i, task in enumerate(self.tasks) if opening_line(task) == opener)
        from ctu.rollout.generator import SEED_SPACE, episode_seed

        sample = (body["seed"] - episode_seed(self.seed, f"{self.domain}/{self.tasks[index].id}", 0)) % SEED_SPACE
        if (index, sample) == self.down:
            return Answer.error(500)
        assert ("tools" in body) == self.native  # text mode: tools only in the system prompt
        corruption = Corruption.MISSING_ACTION if (index, sample) in self.spoiled else None
        turns = list(GoldReplayAgent(self.tasks[index], corruption, self.writes[index]).turns())
        played = sum(m["role"] == "assistant" for m in messages) - 1  # tau2's greeting is the first
        turn = turns[min(played, len(turns) - 1)]
        if self.native:
            return Answer(content=turn.content or None, tool_calls=[
                {"id": f"c{played}_{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for i, c in enumerate(turn.tool_calls)] or None)
        calls = "".join(f'<tool_call>\n{json.dumps({"name": c.name, "arguments": c.arguments})}\n</tool_call>'
                        for c in turn.tool_calls)
        return Answer.text(f"{turn.content}\n{calls}".strip())
