"""Rollout concurrency: many episodes against an OpenAI-compatible server on 127.0.0.1 that answers both the
policy and the simulated user after an injected latency.

Run: `uv run python benchmarks/rollout_concurrency.py [--domain retail|telecom] [--episodes 256] [--samples 4]
[--latency 0.2] [--runners ctu,tau2] [--repeats 5] [--profile]`.

The server (aiohttp, answering as ctu's `ScriptedOpenAIServer` scripts would) runs in a separate process, so
its CPU time is not counted as the runners'. The batch is shaped like a GRPO step: `--episodes / --samples`
tasks of the domain (tau2's `base` split, in order), each run `--samples` times. In every retail episode
(`RetailScript`; telecom's, where the user also runs a tool on their phone, is `TelecomScript`) the user opens,
asking where one order is (an order of the database, picked from the task's instructions, so tasks differ);
the policy looks the order up, lists the product types and answers; the user asks again; the policy looks the
order up again and answers; the user ends the call: 8 requests, every one a turn, each answered after the
latency. As in a GRPO group sampled at a temperature, the tool calls of a task's samples coincide while the
free text differs: every policy answer in words and every user reply after the opening carries the request's
number (the opening is the same for a task's samples, as a user simulator at temperature 0 writes it), and
every tool call has its own id, as vLLM gives them. A warm-up batch of as many episodes on two other tasks
is not measured: it pays what only a run's first step pays (imports, one connection per concurrent request to
each endpoint: a run keeps its event loop and so its connection pools). The measured batch includes
everything met the first time a task is seen (its gold outcome for the reward, tokenisation of new tool
results).

- ctu: its generator (`TauGenerator`, native tool calling, the policy over HTTP through `OpenAIChatSampler`,
  the `llm` user simulator), as `ctu run` builds it, all episodes in one event loop;
- tau2: tau2's own runner on the same episodes (`Orchestrator`, `LLMAgent` and `UserSimulator` over litellm,
  a thread per concurrent episode as `run_tasks(max_concurrency=...)` runs them, `evaluate_simulation`).

Prints, for each, turns per second against the ideal (concurrent episodes / latency: every episode always has
one request in flight) and CPU time per turn (the runner process's CPU time over the measured batch, which
excludes the injected latency, divided by turns; resets, tokenisation, tool calls and rewards included), and
the ratios. ctu's batch is measured `--repeats` times, each time in a new process (nothing cached by an
earlier repetition: every repetition pays what a run's step pays on tasks it has not seen), and the medians
are compared; tau2's runner (minutes per batch) is measured once. Goals from the performance issue: >= 0.9 x
ideal, <= 1 ms of ctu CPU per turn. `--profile` prints what cost ctu the most CPU in its first measured batch
(event-loop thread only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from machine import reference_loop_seconds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for the test support in tests/support

from ctu.registry import populate_registry

POLICY_MARKER = b"You are a customer service agent"
"""Bytes of tau2's agent system prompt: a request holding them is the policy's, else the user's."""


class RetailScript:
    """Retail: the user asks where one of their orders is; the policy looks it up twice (see the module docstring)."""

    domain = "retail"
    requests = 8
    asks = re.compile(rb"where is my order (#W\d{7})")
    calls = {1: "get_order_details", 2: "list_all_product_types", 4: "get_order_details"}
    """The policy's tool call by the number of assistant messages in its request (tau2's greeting counts)."""

    def subjects(self) -> list[str]:
        """What users ask about: the retail database's order ids, sorted."""
        from tau_bench_env.env import shared_domain

        return sorted(shared_domain("retail").base_database.tables["orders"])

    def answer(self, policy: bool, said: int, order: str, number: int = 0) -> Any:
        """The next message (a `tests.support.openai_server.Answer`) of the policy (`policy`) or of the user, given
        how many assistant messages the request holds (`said`: for the policy, tau2's greeting and its own turns;
        for the user, its own earlier messages, roles being flipped), the episode's `order` and the request's
        `number` (written into free text, see the module docstring)."""
        from tests.support.openai_server import Answer

        if policy:
            if said in self.calls:
                name = self.calls[said]
                arguments = {"order_id": order} if name == "get_order_details" else {}
                return Answer(tool_calls=[tool_call(name, arguments, number)])
            return Answer.text(f"Your order {order} is on its way (reference {number}). Is there anything else I can help you with?")
        if said == 0:
            return Answer.text(f"Hi, where is my order {order}?")
        if said == 1:
            return Answer.text(f"Could you check it once more, please? My reference is {number}.")
        return Answer.text("###STOP###")

    def per_task(self, policy: bool, said: int) -> bool:
        """Whether `answer` gives every sample of a task the same message (the server then serialises it once)."""
        return not policy and said != 1


class TelecomScript:
    """Telecom, where the user acts on their own phone: the user says their mobile data fails and gives their
    number; the policy looks the customer up and lists their bills, then asks the user to check the status bar;
    the user runs its own tool `check_status_bar` (on the episode's user database) and reports; the policy looks
    the customer up again and closes; the user ends the call. 9 requests, one of them a user tool call."""

    domain = "telecom"
    requests = 9
    asks = re.compile(rb"my number is (555-\d{3}-\d{4})")

    def __init__(self) -> None:
        self.customers: dict[str, str] = {}

    def subjects(self) -> list[str]:
        """The telecom customers' phone numbers, sorted (what users give)."""
        from tau_bench_env.env import shared_domain

        database = shared_domain("telecom")._template.tools.db
        self.customers = {customer.phone_number: customer.customer_id for customer in database.customers}
        return sorted(self.customers)

    def answer(self, policy: bool, said: int, phone: str, number: int = 0) -> Any:
        """As `RetailScript.answer`, for the telecom episode above."""
        from tests.support.openai_server import Answer

        if policy:
            if said in (1, 4):
                return Answer(tool_calls=[tool_call("get_customer_by_phone", {"phone_number": phone}, number)])
            if said == 2:
                customer = self.customers.get(phone, "C1001")
                return Answer(tool_calls=[tool_call("get_bills_for_customer", {"customer_id": customer}, number)])
            if said == 3:
                return Answer.text(f"Please check the status bar of your phone and tell me what it shows (ref {number}).")
            return Answer.text(f"Your line {phone} is active (reference {number}). Is there anything else I can help you with?")
        if said == 0:
            return Answer.text(f"Hi, my mobile data is not working. my number is {phone}.")
        if said == 1:
            return Answer(tool_calls=[tool_call("check_status_bar", {}, number)])
        if said == 2:
            return Answer.text(f"It shows the signal bars and no data icon. My reference is {number}.")
        return Answer.text("###STOP###")

    def per_task(self, policy: bool, said: int) -> bool:
        """Whether `answer` gives every sample of a task the same message."""
        return not policy and said in (0, 3)


def tool_call(name: str, arguments: dict[str, Any], number: int) -> dict[str, Any]:
    """An OpenAI tool call with the request's own id, as vLLM gives every call a random one."""
    return {"id": f"chatcmpl-tool-{number}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


SCRIPTS = {"retail": RetailScript, "telecom": TelecomScript}


def serve(latency: float, domain: str, connection: Any) -> None:
    """Server process: an asyncio (aiohttp) OpenAI-compatible server answering the domain's script (`SCRIPTS`)
    `latency` seconds after each request arrived; on "count" it reports (requests so far, its CPU seconds).

    The user's opening names one of the script's subjects (an order, a phone number), picked by a checksum of
    the request (its system prompt holds the task's instructions); the policy acts on the subject the user
    named. The server stays cheap so that its own work does not pile on the injected latency (its CPU competes
    with the runners' on a small machine): requests are classified by searches of their raw bytes (tau2's agent
    prompt means the policy; assistant roles are counted) instead of parsing them, and each answer a task's
    samples share is serialised once.
    """
    import threading
    import zlib

    from aiohttp import web

    populate_registry()
    script = SCRIPTS[domain]()
    subjects = script.subjects()
    assistant = re.compile(rb'"role":\s*"assistant"')
    bodies: dict[tuple[bool, int, str], bytes] = {}
    requests = 0

    async def completions(request: web.Request) -> web.Response:
        nonlocal requests
        arrived = time.monotonic()
        requests += 1
        raw = await request.read()
        policy, said = POLICY_MARKER in raw, len(assistant.findall(raw))
        if policy:
            named = script.asks.search(raw)
            subject = named.group(1).decode() if named else subjects[0]
        else:
            subject = subjects[zlib.crc32(raw) % len(subjects)] if said == 0 else ""
        if script.per_task(policy, said):
            key = (policy, said, subject)
            if key not in bodies:
                bodies[key] = script.answer(*key).body("scripted", 0)
            body = bodies[key]
        else:
            body = script.answer(policy, said, subject, requests).body("scripted", requests)
        await asyncio.sleep(max(0.0, latency - (time.monotonic() - arrived)))
        return web.Response(body=body, content_type="application/json")

    async def main() -> None:
        app = web.Application(client_max_size=2**26)
        app.router.add_post("/v1/chat/completions", completions)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port = runner.addresses[0][1]
        connection.send(f"http://127.0.0.1:{port}/v1")
        loop = asyncio.get_running_loop()
        while (command := await loop.run_in_executor(None, connection.recv)) != "stop":
            connection.send((requests, time.process_time()) if command == "count" else None)
        await runner.cleanup()

    threading.current_thread().name = "latency-server"
    asyncio.run(main())


def batch_tasks(domain: str, episodes: int, samples: int) -> tuple[list[str], list[str]]:
    """(task ids of the measured batch, task ids of the warm-up): `episodes / samples` tasks of `domain`'s
    `base` split in order, and two tasks after them.

    Raises:
        ValueError: `episodes` is not a multiple of `samples`, or the split has too few tasks.
    """
    from tau_bench_env.env import shared_domain

    if samples < 1 or episodes % samples:
        raise ValueError(f"--episodes {episodes} is not a multiple of --samples {samples}")
    ids = [task.id for task in shared_domain(domain).tasks("base")]
    prompts = episodes // samples
    if prompts + 2 > len(ids):
        raise ValueError(f"{domain}'s base split has {len(ids)} tasks; {prompts} prompts and 2 warm-up tasks asked")
    return ids[:prompts], ids[prompts:prompts + 2]


def warm_up_samples(episodes: int, warm_up: list[str]) -> int:
    """Samples per warm-up task, so that the warm-up batch holds at least `episodes` episodes (every
    concurrent request opens its connection then)."""
    return -(-episodes // len(warm_up))


async def generate(domain: str, tasks: list[str], warm_up: list[str], samples: int, base_url: str,
                   profile: bool) -> tuple[float, float, Any]:
    """Build ctu's generator as `ctu run` would, warm it up on `warm_up`, then time one batch: each of `tasks`
    `samples` times, all episodes at once.

    Returns:
        (wall seconds, CPU seconds of this process, the cProfile profile or None) of the measured batch.
    """
    import cProfile

    from transformers import AutoTokenizer

    from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
    from ctu.composition import build_components
    from ctu.models.tiny_qwen3 import tokenizer_path
    from ctu.rollout.build import build_generator
    from ctu.rollout.sampling import OpenAIChatSampler
    from ctu.runners.task_rows import TaskRow
    from ctu.runners.tinker.batch import generator_input
    from ctu.spec import spec_from_dict

    user = {"type": "llm", "model": "user", "base_url": base_url, "api_key_env": None, "timeout_s": 120}
    spec = spec_from_dict({
        "experiment": {"name": "bench"}, "model": {"path": "builtin:tiny-qwen3", "max_model_len": 32768},
        "data": {"train": [{"domain": domain}]}, "environment": {"user_simulator": user, "max_turns": 10},
        "rollout": {"native_tool_calling": True, "generator": {"type": "tau_multiturn", "max_concurrent_episodes": len(tasks) * samples}},
        "backend": {"type": "tinker"}, "algorithm": {"use_kl_loss": False},
    }).spec
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path()))
    endpoint = ChatEndpoint(OpenAIEndpointParams(model="policy", base_url=base_url, api_key_env=None, timeout_s=120))
    generator = build_generator(build_components(spec), tokenizer, OpenAIChatSampler(endpoint))

    def rows(ids: list[str]) -> list[TaskRow]:
        return [TaskRow({"domain": domain, "task_id": task, "split": "base", "domain_params": {}}) for task in ids]

    warm_up_batch = generator_input(rows(warm_up), warm_up_samples(len(tasks) * samples, warm_up), "eval", 0)
    await generator.generate(warm_up_batch)  # not measured
    profiler = cProfile.Profile(time.thread_time) if profile else None  # CPU time of the event-loop thread
    cpu, wall = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    output = await generator.generate(generator_input(rows(tasks), samples, "eval", 0))
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    account = generator.account
    print(f"  ctu's caches, warm-up batch included: token encodings {account.encoding_cache_hits} hits, "
          f"{account.encoding_cache_misses} misses; batch memo of prompts, observations and assistant turns "
          f"{account.memo_hits} hits, {account.memo_misses} misses")
    if len(output["rewards"]) != len(tasks) * samples:
        raise RuntimeError(f"expected {len(tasks) * samples} trajectories, got {len(output['rewards'])}")
    return wall, cpu, profiler


def ctu_repetition(domain: str, tasks: list[str], warm_up: list[str], samples: int, base_url: str, profile: bool,
                   connection: Any) -> None:
    """Child process of one ctu repetition: `generate`, then send (wall seconds, CPU seconds, the profile's
    printed top costs or None) through `connection`."""
    import io
    import pstats

    populate_registry()
    wall, cpu, profiler = asyncio.run(generate(domain, tasks, warm_up, samples, base_url, profile))
    report = None
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats("ctu|tau_bench_env|tau2|jinja|tokeniz", 45)
        report = out.getvalue()
    connection.send((wall, cpu, report))


def tau2_batch(domain_name: str, tasks: list[str], warm_up: list[str], samples: int, base_url: str) -> tuple[float, float]:
    """The same episodes through tau2's own runner: an `Orchestrator` per episode with tau2's `LLMAgent` and
    `UserSimulator` (litellm over the same server), one thread per concurrent episode as tau2's
    `run_tasks(max_concurrency=...)` runs them, and tau2's `evaluate_simulation` for the reward.

    Returns:
        (wall seconds, CPU seconds of this process) of the measured batch (after a one-episode warm-up).
    """
    import concurrent.futures

    from tau_bench_env.runtime import prepare

    prepare()
    from tau2.agent.llm_agent import LLMAgent
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.registry import registry
    from tau2.user.user_simulator import UserSimulator

    from tau_bench_env.env import shared_domain

    domain = shared_domain(domain_name)
    llm_args = {"api_base": base_url, "api_key": "EMPTY", "temperature": 0.0}

    def episode(task_id: str) -> float:
        task = domain.task(task_id)
        environment = registry.get_env_constructor(domain_name)()
        agent = LLMAgent(tools=environment.get_tools(), domain_policy=environment.get_policy(), llm="openai/policy", llm_args=llm_args)
        user_tools = environment.get_user_tools() if environment.user_tools is not None else None
        user = UserSimulator(tools=user_tools, instructions=str(task.user_scenario), llm="openai/user", llm_args=llm_args)
        run = Orchestrator(domain_name, agent, user, environment, task, max_steps=100).run()
        return evaluate_simulation(run, task, EvaluationType.ALL, False, domain_name).reward

    episode(warm_up[0])  # litellm's import and caches, not measured
    batch = [task for task in tasks for _ in range(samples)]
    cpu, wall = time.process_time(), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(batch)) as pool:
        list(pool.map(episode, batch))
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", default="retail", choices=sorted(SCRIPTS), help="whose tasks and tools the episodes use")
    parser.add_argument("--episodes", type=int, default=256, help="concurrent episodes")
    parser.add_argument("--samples", type=int, default=4, help="samples per task (a GRPO group)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server waits before each answer")
    parser.add_argument("--runners", default="ctu,tau2", help="which to run, comma-separated: ctu, tau2")
    parser.add_argument("--repeats", type=int, default=5, help="measured ctu batches, each in a new process (medians compared)")
    parser.add_argument("--profile", action="store_true", help="print the top CPU costs of ctu's first measured batch")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    populate_registry()
    try:
        tasks, warm_up = batch_tasks(args.domain, args.episodes, args.samples)
    except ValueError as exc:
        parser.error(str(exc))
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    requests_per_episode = SCRIPTS[args.domain].requests
    server = context.Process(target=serve, args=(args.latency, args.domain, theirs), daemon=True)
    server.start()
    results: dict[str, list[tuple[int, float, float, float]]] = {}
    report = None

    def counted(run: Any, warm_up_requests: int) -> tuple[int, float, float, float]:
        ours.send("count")
        before, server_before = ours.recv()
        wall, cpu = run()
        ours.send("count")
        after, server_after = ours.recv()
        turns = after - before - warm_up_requests
        return turns, wall, cpu, (server_after - server_before) / max(after - before, 1)

    try:
        base_url = ours.recv()
        for runner in args.runners.split(","):
            if runner == "ctu":
                def run_ctu(first: bool) -> tuple[float, float]:
                    nonlocal report
                    mine, child = context.Pipe()
                    process = context.Process(target=ctu_repetition, args=(args.domain, tasks, warm_up, args.samples, base_url, args.profile and first, child))
                    process.start()
                    wall, cpu, printed = mine.recv()
                    process.join()
                    report = report or printed
                    return wall, cpu

                warm_up_episodes = warm_up_samples(args.episodes, warm_up) * len(warm_up)
                results["ctu"] = [counted(lambda first=(n == 0): run_ctu(first), warm_up_episodes * requests_per_episode)
                                  for n in range(args.repeats)]
            elif runner == "tau2":
                results["tau2"] = [counted(lambda: tau2_batch(args.domain, tasks, warm_up, args.samples, base_url), requests_per_episode)]
            else:
                parser.error(f"unknown runner {runner!r}")
    finally:
        ours.send("stop")
        server.join(timeout=10)
    ideal = args.episodes / args.latency
    print(f"{args.episodes} concurrent {args.domain} episodes ({len(tasks)} tasks x {args.samples} samples, "
          f"{requests_per_episode} requests each), "
          f"{args.latency * 1000:.0f} ms injected latency per request; ideal {ideal:.0f} turns/s")
    medians: dict[str, tuple[float, float]] = {}  # runner -> (turns per second, CPU seconds per turn)
    for name, runs in results.items():
        for turns, wall, cpu, server_cpu in runs:
            print(f"  {name:<5} {turns:5d} turns in {wall:6.2f} s   {turns / wall:7.1f} turns/s = {turns / wall / ideal:4.2f} x ideal"
                  f"   CPU per turn {cpu / turns * 1000:7.3f} ms   (server: {server_cpu * 1000:.2f} ms per request)")
        medians[name] = (statistics.median(t / w for t, w, _, _ in runs), statistics.median(c / t for t, _, c, _ in runs))
        if len(runs) > 1:
            rate, cpu_per_turn = medians[name]
            print(f"  {name:<5} median of {len(runs)}: {rate:7.1f} turns/s = {rate / ideal:4.2f} x ideal (range "
                  f"{min(t / w for t, w, _, _ in runs) / ideal:.2f}-{max(t / w for t, w, _, _ in runs) / ideal:.2f})"
                  f"   CPU per turn {cpu_per_turn * 1000:7.3f} ms")
    if "ctu" in medians and "tau2" in medians:
        (ctu_rate, ctu_cpu), (tau2_rate, tau2_cpu) = medians["ctu"], medians["tau2"]
        print(f"  ratio tau2/ctu: wall {ctu_rate / tau2_rate:.1f}x, CPU per turn {tau2_cpu / ctu_cpu:.1f}x")
    print("  goals: >= 0.9 x ideal, <= 1 ms of ctu CPU per turn")
    print(f"  this machine now: a reference loop of 10M additions takes {reference_loop_seconds():.2f} s of CPU")
    if report is not None:
        print(report)


if __name__ == "__main__":
    main()
