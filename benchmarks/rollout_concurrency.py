"""Rollout concurrency: many episodes against an OpenAI-compatible server on 127.0.0.1 that answers both the
policy and the simulated user after an injected latency.

Run: `uv run python benchmarks/rollout_concurrency.py [--episodes N] [--latency S] [--turns T]`. Each episode
is a retail task; the policy (native tool calling over the server) looks an order up, then closes; the user
(the `llm` simulator over the same server) opens and then ends the call. Prints achieved turns per second
against the ideal (episodes / latency), and ctu's own CPU time per turn (process CPU time, which excludes the
injected latency, divided by turns). Goals from the performance issue: >= 0.9 x ideal, <= 1 ms per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
from ctu.registry import populate_registry
from ctu.testing.openai_server import Answer, ScriptedOpenAIServer


def answer(latency: float):
    def respond(body: dict) -> Answer:
        if body.get("tools") and any("get_order_details" in json.dumps(t) for t in body["tools"]):
            said = sum(1 for m in body["messages"] if m["role"] == "assistant")
            if said < 2:  # the greeting only: look the order up first
                call = ("get_order_details", {"order_id": "#W2378156"})
                return Answer(tool_calls=Answer.calls(call).tool_calls, delay_s=latency)
            return Answer.text("Is there anything else I can help you with?", delay_s=latency)
        users = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return Answer.text("Hi, where is my order #W2378156?" if users == 0 else "###STOP###", delay_s=latency)

    return respond


async def run(episodes: int, latency: float, base_url: str) -> tuple[float, float]:
    from transformers import AutoTokenizer

    from ctu.models.tiny_qwen3 import tokenizer_path
    from ctu.rollout.sampling import OpenAIChatSampler
    from ctu.rollout.setup import build_generator
    from ctu.runners.tinker import generator_input
    from ctu.runners.tasks import TaskRow
    from ctu.spec import spec_from_dict

    user = {"type": "llm", "model": "user", "base_url": base_url, "api_key_env": None, "timeout_s": 60}
    spec = spec_from_dict({
        "experiment": {"name": "bench"}, "model": {"path": "builtin:tiny-qwen3", "max_model_len": 32768},
        "data": {"train": [{"domain": "retail"}]}, "environment": {"user_simulator": user, "max_turns": 5},
        "rollout": {"native_tool_calling": True, "generator": {"type": "tau_multiturn", "max_concurrent_episodes": episodes}},
        "backend": {"type": "tinker"}, "algorithm": {"use_kl_loss": False},
    }).spec
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path()))
    policy = OpenAIChatSampler(ChatEndpoint(OpenAIEndpointParams(model="policy", base_url=base_url, api_key_env=None, timeout_s=60)))
    generator = build_generator(spec, tokenizer, policy)
    rows = [TaskRow({"domain": "retail", "task_id": "0", "split": "base", "domain_params": {}})] * episodes
    await generator.generate(generator_input(rows[:2], 1, "eval", 0))  # warm-up: imports and caches, not measured
    cpu, wall = time.process_time(), time.perf_counter()
    await generator.generate(generator_input(rows, 1, "eval", 0))
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    populate_registry()
    with ScriptedOpenAIServer(default=answer(args.latency)) as server:
        wall, cpu = asyncio.run(run(args.episodes, args.latency, server.base_url))
        turns = len(server.requests) - 8  # every policy and user turn is one request; 8 were the warm-up's
    ideal = args.episodes / args.latency
    print(f"{args.episodes} concurrent episodes, {args.latency * 1000:.0f} ms injected latency per request")
    print(f"  requests answered (policy and user turns): {turns} in {wall:.2f} s")
    print(f"  achieved {turns / wall:8.1f} turns/s   ideal {ideal:8.1f}   ratio {turns / wall / ideal:5.2f}   (goal >= 0.9)")
    print(f"  ctu CPU per turn {cpu / turns * 1000:8.2f} ms   (goal <= 1 ms; includes environment resets, rewards and")
    print("  the scripted server's own request handling, which runs in this process)")


if __name__ == "__main__":
    main()
