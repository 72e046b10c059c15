"""Rollout test helpers: the tiny tokenizer, a replaying sampler, and specs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ctu.components.parsers.base import ParsedTurn
from ctu.components.parsers.hermes import format_hermes_calls
from ctu.composition import build_components
from ctu.rollout.requests import EpisodeRequest, TaskRow
from ctu.rollout.sampling import SampleResult, SamplingParams
from ctu.spec import spec_from_dict
from tau_bench_env.env import shared_domain
from tau_bench_env.replay import GoldReplayAgent, effective_writes

from ..support.scripted_sampler import ScriptedSampler


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    from ctu.models.tiny_qwen3 import tokenizer_path

    return AutoTokenizer.from_pretrained(str(tokenizer_path()))


def hermes_text(turn: ParsedTurn) -> str:
    """A parsed turn written as Qwen writes it."""
    return format_hermes_calls(turn.tool_calls) if turn.tool_calls else turn.content


class ReplayScript:
    """Plays the gold replay of whichever task a prompt belongs to (found by the user's opening line); the
    policy turn's index is the number of assistant headers in the prompt, less the greeting and the new one."""

    def __init__(self, tokenizer, domain: str, task_ids: list[str]) -> None:
        from ctu.components.user_simulators.scripted import opening_line

        self.tokenizer = tokenizer
        self.turns: dict[str, list[ParsedTurn]] = {}
        for task_id in task_ids:
            task = shared_domain(domain).task(task_id)
            writes = effective_writes(shared_domain(domain).episode_environment(task), task)
            self.turns[opening_line(task)] = list(GoldReplayAgent(task, None, writes).turns())
        self.texts: list[str] = []

    def turn(self, prompt_ids: list[int]) -> ParsedTurn:
        text = self.tokenizer.decode(prompt_ids)
        opening = next(o for o in self.turns if o in text)
        index = text.count("<|im_start|>assistant") - 2
        turns = self.turns[opening]
        return turns[min(index, len(turns) - 1)]

    def __call__(self, prompt_ids: list[int], call: int) -> str:
        text = hermes_text(self.turn(prompt_ids))
        self.texts.append(text)
        return text


def scripted_sampler(tokenizer, script) -> ScriptedSampler:
    return ScriptedSampler(script, lambda t: tokenizer.encode(t, add_special_tokens=False), tokenizer.eos_token_id)


class ChatReplaySampler:
    """A chat-only sampler (as an OpenAI-compatible endpoint under evaluation is) that answers with structured tool
    calls."""

    supports_chat = True
    supports_tokens = False
    policy_version = None

    def __init__(self, tokenizer, script: ReplayScript) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.ended: list[str] = []

    async def sample(self, prompt_ids, params, session=None):  # pragma: no cover - chat only
        raise AssertionError("a chat-only sampler is asked for chats only")

    async def end_session(self, session: str) -> None:
        self.ended.append(session)

    async def chat(self, messages, tools, params: SamplingParams, session: str | None = None) -> SampleResult:
        self.requests.append({"messages": messages, "tools": tools, "max_tokens": params.max_tokens, "session": session})
        prompt = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=True, return_dict=False)
        turn = self.script.turn(prompt)
        calls: list[dict[str, object]] = [
            {"id": f"c{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(turn.tool_calls)
        ]
        return SampleResult([], turn.content, "stop", None, calls or None)


TASKS = ["0", "1", "2"]


def components(minimal, **sections):
    data = {**minimal, **sections}
    data.setdefault("model", {"path": "builtin:tiny-qwen3", "max_model_len": 32768})
    return build_components(spec_from_dict(data).spec)


def batch(task_ids, phase="train", samples=2, domain="retail"):
    """`Rollout.run_batch`'s arguments for `samples` episodes of each task, at step 1 (each task's samples
    consecutive, numbered by the rollout)."""
    prompt = [{"role": "system", "content": "replaced by the episode"}]
    return [EpisodeRequest(TaskRow(domain, task_id), prompt) for task_id in task_ids for _ in range(samples)], phase, 1


def run(generator, episodes):
    return asyncio.run(generator.run_batch(*episodes))
