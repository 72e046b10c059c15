"""The built-in model's training data, from tau2's own domains: the tokenizer's corpus and added tokens, the gold
agent turns of the warm-up, and gold policy turns in their real context (`ctu.models.tiny_qwen3` builds with
them). Nothing here is downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.models.tiny_qwen3_format import CALL_SCAFFOLD_TOKENS, CHAT_TEMPLATE

CONTEXT_TASKS = 40
"""The retail training tasks whose gold turns the build trains on in their real context."""

if TYPE_CHECKING:
    from tau_bench_env.outcome import EpisodeResult


def call_tokens() -> list[str]:
    """`CALL_SCAFFOLD_TOKENS`, then every tool name and ``"<argument>": `` of tau2's retail, airline and telecom
    tools, sorted (a fixed order)."""
    from tau_bench_env.env import shared_domain

    names: set[str] = set()
    keys: set[str] = set()
    for domain in ("retail", "airline", "telecom"):
        for tool in shared_domain(domain).make_environment().get_tools():
            schema = tool.openai_schema["function"]
            names.add(schema["name"])
            keys.update(f'"{key}": ' for key in (schema.get("parameters") or {}).get("properties", {}))
    return CALL_SCAFFOLD_TOKENS + sorted(names) + sorted(keys)

def agent_turns() -> list[str]:
    """Gold agent turns of tau2's retail and airline training tasks, as Qwen writes them: a Hermes tool call
    per gold assistant action, and the replay agent's closing message. In a fixed order."""
    from tau_bench_env.env import shared_domain
    from tau_bench_env.replay import GoldReplayAgent

    turns: list[str] = []
    for name in ("retail", "airline"):
        for task in shared_domain(name).tasks("train"):
            for turn in GoldReplayAgent(task).turns():
                if turn.tool_calls:
                    call = turn.tool_calls[0]
                    turns.append(f'<tool_call>\n{json.dumps({"name": call.name, "arguments": call.arguments})}\n</tool_call>')
                else:
                    turns.append(turn.content)
    return turns


def training_corpus() -> list[str]:
    """The tokenizer's training text, in a fixed order: the chat template, tau2's domain policies, user
    scenarios and tool schemas, and gold agent turns."""
    from tau_bench_env.runtime import prepare

    prepare()
    from tau2.utils import DATA_DIR

    from tau_bench_env.env import shared_domain

    texts: list[str] = [CHAT_TEMPLATE]
    root = Path(DATA_DIR) / "tau2" / "domains"
    for path in sorted(root.glob("*/*.md")) + sorted(root.glob("*/tasks.json")):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            tasks = json.loads(text)[:200]
            text = "\n".join(json.dumps(task.get("user_scenario"), sort_keys=True) for task in tasks)
        texts.append(text)
    for name in ("retail", "airline", "telecom"):
        tools = shared_domain(name).make_environment().get_tools()
        texts.append("\n".join(json.dumps(tool.openai_schema, ensure_ascii=False) for tool in tools))
    texts.append("\n".join(agent_turns()))
    return texts


def gold_examples(limit: int = CONTEXT_TASKS) -> list[tuple[list[dict], list[dict], int]]:
    """Gold replays of the first `limit` retail training tasks with the scripted user, as
    ``(conversation, tools, policy_turn_index)`` triples: every policy turn of every replay.

    Callable from any context: inside a running event loop the replays run on a loop of their own in a new
    thread (`tau_bench_env.env.run_sync`).
    """
    from ctu.components.parsers.hermes import HermesParser
    from ctu.components.user_simulators.scripted import ScriptedUserSimulator
    from tau_bench_env.env import run_sync, shared_domain
    from tau_bench_env.episode import Episode
    from tau_bench_env.outcome import EpisodeConfig
    from tau_bench_env.replay import GoldReplayAgent, play

    domain = shared_domain("retail")
    tasks = domain.tasks("train")[:limit]

    async def replays() -> list[EpisodeResult]:
        config = EpisodeConfig(max_turns=40, native_tool_calling=True)
        return [await play(Episode(domain, task, ScriptedUserSimulator(), HermesParser(), config), GoldReplayAgent(task))
                for task in tasks]

    examples = []
    for result in run_sync(replays()):
        conversation = result.conversation
        turns = [i for i, m in enumerate(conversation) if m["role"] == "assistant" and i > 1]
        examples += [(conversation, result.tools, i) for i in turns]
    return examples


def _as_text_mode(messages: list[dict], tools: list[dict]) -> list[dict]:
    """The conversation as text mode shows it: tools in the system prompt, calls as Hermes text."""
    from ctu.components.parsers.base import ToolCall
    from ctu.components.parsers.hermes import HermesParser, format_hermes_calls

    converted = []
    for message in messages:
        message = dict(message)
        if message["role"] == "system":
            message["content"] = message["content"] + "\n\n" + HermesParser().render_tools(tools)
        if message.get("tool_calls"):
            calls = [ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.pop("tool_calls")]
            message["content"] = format_hermes_calls(calls)
        converted.append(message)
    return converted


def reasoning_line(turn: dict) -> str:
    """What the thinking variant (`ctu.models.tiny_qwen3.build_thinking`) reasons before a gold turn: the tool it calls,
    or that it answers."""
    calls = turn.get("tool_calls")
    return f"I call {calls[0]['function']['name']}." if calls else "I answer the customer."


def context_example(tokenizer, example: tuple[list[dict], list[dict], int], native: bool, thinking: bool,
                    reasoning: bool = False) -> tuple[list[int], list[int]]:
    """``(prompt_ids, target_ids)``: the conversation before a gold policy turn as the sampler sees it, and the
    turn itself ended by the end-of-turn token; with `reasoning` (and `thinking`), the turn opens with Qwen3's
    ``<think>`` block holding `reasoning_line`."""
    from ctu.components.parsers.base import ToolCall
    from ctu.components.parsers.hermes import format_hermes_calls

    conversation, tools, index = example
    history = conversation[:index] if native else _as_text_mode(conversation[:index], tools)
    prompt = tokenizer.apply_chat_template(history, tools=tools if native else None, add_generation_prompt=True,
                                           tokenize=False, enable_thinking=thinking)
    turn = conversation[index]
    if turn.get("tool_calls"):
        calls = [ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in turn["tool_calls"]]
        content = format_hermes_calls(calls)
    else:
        content = turn.get("content") or ""
    if reasoning and thinking:
        content = f"<think>\n{reasoning_line(turn)}\n</think>\n\n{content}"
    return (tokenizer.encode(prompt, add_special_tokens=False), tokenizer.encode(content + tokenizer.eos_token, add_special_tokens=False))
