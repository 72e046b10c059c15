"""Rollout concurrency: many episodes against an OpenAI-compatible server on 127.0.0.1 that answers both the
policy and the simulated user after an injected latency, ctu's generator side by side with tau2's own runner.

Run: `uv run python benchmarks/rollout_concurrency.py [--rows retail,telecom,mixed,mixed-1024] [--episodes N]
[--samples K] [--latency S] [--runners ctu,ctu-tokens,tau2] [--repeats 3] [--tau2-episodes 256] [--tau2-timeout 1800]
[--processes 1,2] [--engines E] [--pause S] [--slow-day LOOP] [--profile] [--record NAME]`.

Rows (`ROWS`, with the rollout-scale issue's goals): `retail`, `telecom` and `mixed` (retail, airline and
telecom tasks taken in turn) are 256 concurrent episodes, 4 samples a task, at 200 ms a request; `mixed-1024` is
1024 mixed episodes, 8 samples a task (airline's base split has 50 tasks), at 500 ms. `--episodes`, `--samples`
and `--latency` override every row's.

The server (aiohttp, answering as ctu's `ScriptedOpenAIServer` scripts would) runs in a separate process, so
its CPU time is not counted as the runners'. A batch is shaped like a GRPO step: `episodes / samples` tasks of
the row's domains (tau2's `base` splits, in order), each run `samples` times. In every retail episode
(`RetailScript`, a `LookupScript`) the user opens, asking where one order is (an order of the database, picked
from the task's instructions, so tasks differ); the policy looks the order up, lists the product types and
answers; the user asks again; the policy looks the order up again and answers; the user ends the call: 8
requests, every one a turn, each answered after the latency. Airline's episode (`AirlineScript`) is the same about a reservation;
telecom's (`TelecomScript`, 9 requests) has the user run a tool on their phone. As in a GRPO group sampled at a
temperature, the tool calls of a task's samples coincide while the free text differs: every policy answer in
words and every user reply after the opening carries the request's number (the opening is the same for a
task's samples, as a user simulator at temperature 0 writes it), and every tool call has its own id, as vLLM
gives them. A warm-up batch of as many episodes on two other tasks of each domain is not measured: it pays
what only a run's first step pays (imports, one connection per concurrent request to each endpoint: a run keeps
its event loop and so its connection pools). The measured batch includes everything met the first time a task
is seen (its gold outcome for the reward, tokenisation of new tool results).

- ctu: its generator (`TauGenerator`, native tool calling, the `llm` user simulator) as `ctu run` builds it,
  with the policy asked for chat completions over HTTP (`OpenAIChatSampler`, as `ctu eval` samples an
  endpoint, each answer re-tokenised for the trajectory), all episodes in one event loop; with `--processes`,
  also spread over that many rollout worker processes (the generator's `processes`, `ctu.rollout.processes`),
  each count measured (a machine with a core per worker, simulated on one with fewer: `--episodes N/P` runs
  what one of P workers holds, on one event loop);
- ctu-tokens: the same generator with the policy sampled token-in/token-out, as a training run on SkyRL samples
  it: `SkyRLSampler` over SkyRL's own `RemoteInferenceClient` (built as SkyRL's inference setup builds it,
  with the tokenizer; each turn one request through SkyRL's per-request client, `TokenGenerateClient`), each
  turn's prompt ids sent to ``/inference/v1/generate`` and the generated ids and logprobs taken as they come
  (what a training run's driver pays per turn); the server stands for SkyRL's router in front of `--engines`
  vLLM engines, by default one per 512 episodes (SkyRL's client lets at most 512 requests an engine be in
  flight: with one engine, half of a 1024-episode batch's turns wait for the other half's);
- tau2: tau2's own runner on the same episodes (`Orchestrator`, `LLMAgent` and `UserSimulator` over litellm,
  a thread per concurrent episode as `run_tasks(max_concurrency=...)` runs them, `evaluate_simulation`), on at
  most `--tau2-episodes` of a row's episodes (it managed 3-70 turns/s here, whatever the concurrency), in a
  process of its own stopped after `--tau2-timeout` seconds (its litellm threads once waited for ever here).

Prints, for each batch, its speed against the ideal: the ideal wall time divided by the batch's. An ideal
runner spends no CPU and each request is answered `latency` after it was sent, so the batch lasts as long as its
longest episode's requests x latency. In a single-domain row that is turns per second against concurrent
episodes / latency; in a mixed row, whose retail and airline episodes end one request before telecom's, that
fixed rate is out of reach even for the ideal runner (by 8.33 / 9 requests = 0.93). Then CPU time per turn (the
runner process's CPU time over the measured batch, which excludes the injected latency, divided by turns;
resets, tokenisation, tool calls and rewards included) and, for ctu, resident memory per live episode (the
process's peak resident memory during the batch above that before it, over the batch's episodes) and how far
its episodes drifted apart (`wave_spread`: the time over which the widest wave of requests reached the
server, which is about what the batch loses to the ideal, and each of the first domain's waves in order, which
shows where the drift is made); then a table of the medians per row, CPU normalised
to the reference loop (`machine.py`), the ratios to tau2 and the goals. ctu's batch is measured `--repeats` times, each time in a
new process (nothing cached by an earlier repetition: every repetition pays what a run's step pays on tasks it
has not seen); tau2's runner (minutes per batch) once. `--slow-day LOOP` simulates a slower machine for ctu's
measured batches: each of its processes (the runner and every worker) is limited, by a cgroup CPU quota, to
the share of a core at which the reference loop takes LOOP s of wall time (on the project's machines the loop
took up to 0.6 s of CPU on slow days; a throttled process runs as fast, in bursts, for that share of the
time). The server is not throttled: it stands for inference servers on GPUs. `--profile` prints what cost ctu the most CPU in its
first measured batch of each row (event-loop thread only). The last table, which docs/benchmarks.md shows, is
recorded in `benchmarks/results/rollout_concurrency.json` (`results.record`; `--record NAME` names another file).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import multiprocessing
import os
import re
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from machine import REFERENCE_LOOP_S, normalised, reference_loop_seconds
from results import record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for the test support in tests/support


POLICY_MARKER = b"You are a customer service agent"
"""Bytes of tau2's agent system prompt: a request holding them is the policy's, else the user's."""


class LookupScript:
    """An episode about one record the user names (see the module docstring): the user asks; the policy looks the
    record up, lists something of the domain and answers; the user asks again; the policy looks it up again and
    answers; the user ends the call: 8 requests. Subclasses name the domain's record, tools and words."""

    domain: str
    table: str
    """The database table whose keys users ask about."""
    asks: re.Pattern[bytes]
    """The user's opening, with the record's key as its group: it names the request's domain and subject."""
    opening: str
    """The user's opening, formatted with the key."""
    closing: str
    """The policy's answer in words, formatted with the key and the request's number."""
    lookup: str
    """The policy's tool that reads the record, and its argument."""
    argument: str
    listing: str
    """The policy's tool without arguments it calls in between."""
    requests = 8

    @property
    def calls(self) -> dict[int, str]:
        """The policy's tool call by the number of assistant messages in its request (tau2's greeting counts)."""
        return {1: self.lookup, 2: self.listing, 4: self.lookup}

    def subjects(self) -> list[str]:
        """What users ask about: the keys of the domain's `table`, sorted."""
        from tau_bench_env.env import shared_domain

        return sorted(shared_domain(self.domain).base_database.tables[self.table])

    def answer(self, policy: bool, said: int, key: str, number: int = 0) -> Any:
        """The next message (a `tests.support.openai_server.Answer`) of the policy (`policy`) or of the user, given
        how many assistant messages the request holds (`said`: for the policy, tau2's greeting and its own turns;
        for the user, its own earlier messages, roles being flipped), the episode's record `key` and the request's
        `number` (written into free text, see the module docstring)."""
        from tests.support.openai_server import Answer

        if policy:
            if said in self.calls:
                name = self.calls[said]
                arguments = {self.argument: key} if name == self.lookup else {}
                return Answer(tool_calls=[tool_call(name, arguments, number)])
            return Answer.text(self.closing.format(key=key, number=number))
        if said == 0:
            return Answer.text(self.opening.format(key=key))
        if said == 1:
            return Answer.text(f"Could you check it once more, please? My reference is {number}.")
        return Answer.text("###STOP###")

    def per_task(self, policy: bool, said: int) -> bool:
        """Whether `answer` gives every sample of a task the same message (the server then serialises it once)."""
        return not policy and said != 1


class RetailScript(LookupScript):
    """Retail: the user asks where one of their orders is."""

    domain, table = "retail", "orders"
    asks = re.compile(rb"where is my order (#W\d{7})")
    opening = "Hi, where is my order {key}?"
    closing = "Your order {key} is on its way (reference {number}). Is there anything else I can help you with?"
    lookup, argument, listing = "get_order_details", "order_id", "list_all_product_types"


class AirlineScript(LookupScript):
    """Airline: the user asks about one of their reservations."""

    domain, table = "airline", "reservations"
    asks = re.compile(rb"my reservation ([0-9A-Z]{6})\b")
    opening = "Hi, could you check my reservation {key} for me?"
    closing = "Your reservation {key} is confirmed (reference {number}). Anything else?"
    lookup, argument, listing = "get_reservation_details", "reservation_id", "list_all_airports"


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
        """As `LookupScript.answer`, for the telecom episode above."""
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


def generated_text(answer: Any) -> str:
    """An `Answer` as a Qwen model generates it after the generation prompt (what a token-in/token-out server
    returns the ids of): its words, each tool call as a Hermes ``<tool_call>`` block, then the end of the turn."""
    blocks = [f'<tool_call>\n{{"name": {json.dumps(call["function"]["name"])}, "arguments": {call["function"]["arguments"]}}}\n</tool_call>'
              for call in answer.tool_calls or []]
    return "\n".join([answer.content, *blocks] if answer.content else blocks) + "<|im_end|>"


def tool_call(name: str, arguments: dict[str, Any], number: int) -> dict[str, Any]:
    """An OpenAI tool call with the request's own id, as vLLM gives every call a random one."""
    return {"id": f"chatcmpl-tool-{number}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


SCRIPTS = {"retail": RetailScript, "airline": AirlineScript, "telecom": TelecomScript}


def serve(latency: float, domains: list[str], connection: Any) -> None:
    """Server process: an asyncio (aiohttp) OpenAI-compatible server answering the scripts (`SCRIPTS`) of
    `domains` `latency` seconds after each request arrived; on "count" it reports (requests so far, its CPU
    seconds, the arrivals since the last count: (monotonic seconds, domain, whether the policy's,
    assistant messages in it) per request); on a number, it takes that as the latency from then on.

    A request's domain is the script whose opening phrase it holds (every request after the user's opening
    holds it), else the user prompt's "Domain:" line (tau2's scenario). The user's opening names one of the
    script's subjects (an order, a reservation, a phone number), picked by a checksum of the request (its system
    prompt holds the task's instructions); the policy acts on the subject the user named. The server stays cheap
    so that its own work does not pile on the injected latency (its CPU competes with the runners' on a small
    machine): requests are classified by searches of their raw bytes (tau2's agent prompt means the policy;
    assistant roles are counted) instead of parsing them, each answer a task's samples share is serialised
    once, and its start-up heap is frozen out of the garbage collector's walks (`gc.freeze`): before, a gen-2
    collection paused every request for 250-350 ms, in one batch of three, at its first waves.

    Token-in/token-out requests (``POST /inference/v1/generate``, as vLLM answers SkyRL's `RemoteInferenceClient`)
    are the policy's: at an episode's first turn the assistant headers in the prompt's ids are counted and the
    user's opening alone is decoded to find the domain and subject; its later turns, known by their session header
    (``X-Session-ID``, one per episode), take them from there and count one more turn, the body not parsed (at
    0.5-0.65 ms a request parsing each body, the server's CPU on the training path was twice the chat path's, on
    cores it shares with the runner); the answer is the script's message as the model would write it
    (`generated_text`), tokenised by the built-in tokenizer, with one logprob entry per id shaped as vLLM's.
    """
    import gc
    import threading
    import zlib
    from array import array

    import orjson
    from aiohttp import web
    from transformers import AutoTokenizer

    from ctu.models.tiny_qwen3 import tokenizer_path

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path())).backend_tokenizer
    headers = {role: array("I", tokenizer.encode(f"<|im_start|>{role}\n", add_special_tokens=False).ids).tobytes()
               for role in ("assistant", "user")}
    turn_end = array("I", [tokenizer.token_to_id("<|im_end|>")]).tobytes()
    entries: dict[int, dict[str, Any]] = {}
    generated: dict[tuple[str, int, str], bytes] = {}
    scripts = {domain: SCRIPTS[domain]() for domain in domains}
    subjects = {domain: script.subjects() for domain, script in scripts.items()}
    assistant = re.compile(rb'"role":\s*"assistant"')
    scenario_domain = re.compile(rb"Domain: (\w+)")
    bodies: dict[tuple[str, bool, int, str], bytes] = {}
    episodes: dict[str, tuple[str, int, str]] = {}  # each token-in episode's (domain, turns so far, subject)
    arrivals: list[tuple[float, str, bool, int]] = []
    requests, wait = 0, latency

    def classify(raw: bytes) -> tuple[str, str | None]:
        """(the request's domain, the subject its user named, or None before the user's opening)."""
        for domain, script in scripts.items():
            if named := script.asks.search(raw):
                return domain, named.group(1).decode()
        found = scenario_domain.search(raw)
        domain = found.group(1).decode() if found and found.group(1).decode() in scripts else domains[0]
        return domain, None

    async def completions(request: web.Request) -> web.Response:
        nonlocal requests
        arrived = time.monotonic()
        requests += 1
        raw = await request.read()
        policy, said = POLICY_MARKER in raw, len(assistant.findall(raw))
        domain, subject = classify(raw)
        arrivals.append((arrived, domain, policy, said))
        script, known = scripts[domain], subjects[domain]
        if subject is None:
            subject = known[zlib.crc32(raw) % len(known)] if not policy and said == 0 else known[0]
        if script.per_task(policy, said):
            key = (domain, policy, said, subject)
            if key not in bodies:
                bodies[key] = script.answer(policy, said, subject).body("scripted", 0)
            body = bodies[key]
        else:
            body = script.answer(policy, said, subject, requests).body("scripted", requests)
        await asyncio.sleep(max(0.0, wait - (time.monotonic() - arrived)))
        return web.Response(body=body, content_type="application/json")

    def positions(data: bytes, pattern: bytes) -> list[int]:
        """Token offsets at which the ids `pattern` start in the ids `data` (both packed as 4-byte ints)."""
        found, start = [], data.find(pattern)
        while start != -1:
            if start % 4 == 0:
                found.append(start // 4)
            start = data.find(pattern, start + 1)
        return found

    def token_answer(ids: list[int]) -> tuple[str, int, str]:
        """(the domain, the assistant turns so far, the subject the user named) of a token-in request."""
        packed = array("I", ids).tobytes()
        said = len(positions(packed, headers["assistant"])) - 1  # the prompt ends with the generation prompt
        opening = positions(packed, headers["user"])[0] * 4
        end = packed.find(turn_end, opening)
        while end % 4:
            end = packed.find(turn_end, end + 1)
        domain, subject = classify(tokenizer.decode(array("I", packed[opening:end]).tolist()).encode())
        return domain, said, subject or subjects[domain][0]

    async def generate(request: web.Request) -> web.Response:
        nonlocal requests
        arrived = time.monotonic()
        requests += 1
        raw = await request.read()
        session = request.headers.get("X-Session-ID")
        if session is not None and session in episodes:  # a later turn: the episode's domain and subject known
            domain, said, subject = episodes[session]
            said += 1
        else:
            domain, said, subject = token_answer(orjson.loads(raw)["token_ids"])
        if session is not None:
            episodes[session] = (domain, said, subject)
        arrivals.append((arrived, domain, True, said))
        script = scripts[domain]
        answer = script.answer(True, said, subject, requests)
        key = (domain, said, subject)
        if answer.tool_calls and key in generated:  # a task's samples make the same calls (no call ids in text)
            body = generated[key]
        else:
            ids = tokenizer.encode(generated_text(answer), add_special_tokens=False).ids
            for token in ids:
                if token not in entries:
                    entries[token] = {"token": f"token_id:{token}", "logprob": -0.05,
                                      "bytes": list(tokenizer.decode([token], skip_special_tokens=False).encode()),
                                      "top_logprobs": []}
            choice = {"index": 0, "token_ids": ids, "logprobs": {"content": [entries[token] for token in ids]},
                      "finish_reason": "stop"}
            body = orjson.dumps({"id": f"gen-{requests}", "choices": [choice]})
            if answer.tool_calls:
                generated[key] = body
        await asyncio.sleep(max(0.0, wait - (time.monotonic() - arrived)))
        return web.Response(body=body, content_type="application/json")

    async def main() -> None:
        nonlocal wait
        app = web.Application(client_max_size=2**26)
        app.router.add_post("/v1/chat/completions", completions)
        app.router.add_post("/inference/v1/generate", generate)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=8192)
        await site.start()
        # Collections would walk the server's start-up heap (the tokenizer, tau2, the registry): gen-2 pauses of
        # 250-350 ms, every request waiting, measured at a batch's first waves. Frozen, they walk what it allocates.
        gc.collect()
        gc.freeze()
        port = runner.addresses[0][1]
        connection.send(f"http://127.0.0.1:{port}/v1")
        loop = asyncio.get_running_loop()
        while (command := await loop.run_in_executor(None, connection.recv)) != "stop":
            if isinstance(command, float):
                wait = command
            connection.send((requests, time.process_time(), arrivals.copy()) if command == "count" else None)
            arrivals.clear()
        await runner.cleanup()

    threading.current_thread().name = "latency-server"
    asyncio.run(main())


Episode = tuple[str, str]
"""(domain, task id)."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured configuration: `episodes` concurrent episodes, `samples` per task, of `domains`' tasks
    (round robin over the domains), every request answered after `latency` seconds."""

    name: str
    domains: tuple[str, ...]
    episodes: int
    samples: int
    latency: float
    goal_rate: float
    """The goal for the batch's speed, as a fraction of the ideal (`ideal_seconds` over the wall time; the
    rollout-scale issue)."""
    goal_cpu_ms: float
    """The goal for CPU per turn, normalised to the reference loop (`machine.normalised`)."""

    @property
    def requests(self) -> float:
        """Requests (turns) per episode, averaged over the batch's domains in the batch's proportions."""
        tasks, _ = batch_tasks(self)
        return sum(SCRIPTS[domain].requests for domain, _ in tasks) / len(tasks)

    def ideal_seconds(self, episodes: int | None = None) -> float:
        """The ideal wall time of the row's first `episodes` episodes (all when None): their longest episode's
        requests x the latency (each request answered `latency` after it was sent, no CPU spent between)."""
        tasks, _ = batch_tasks(self)
        batch = [domain for domain, _ in tasks for _ in range(self.samples)][:episodes]
        return max(SCRIPTS[domain].requests for domain in batch) * self.latency


ROWS = {
    "retail": Row("retail", ("retail",), 256, 4, 0.2, 0.9, 0.5),
    "telecom": Row("telecom", ("telecom",), 256, 4, 0.2, 0.9, 1.0),
    "mixed": Row("mixed", ("retail", "airline", "telecom"), 256, 4, 0.2, 0.9, 1.0),
    "mixed-1024": Row("mixed-1024", ("retail", "airline", "telecom"), 1024, 8, 0.5, 0.85, 1.0),
}
"""The issue's goals: retail <= 0.5 ms of CPU per turn normalised (>= 0.9 x ideal on a slow day too);
telecom and a mixed batch >= 0.9 x ideal at 256 episodes @ 200 ms and <= 1 ms; 1024 mixed episodes >= 0.85 x
ideal @ 500 ms (8 samples a task: airline's base split has 50 tasks), CPU per turn and memory per live episode
within 20% of the 256-episode mixed row's."""


def batch_tasks(row: Row) -> tuple[list[Episode], list[Episode]]:
    """(the measured batch's tasks, the warm-up's): `row.episodes / row.samples` tasks of `row.domains`' `base`
    splits in order, taken round robin over the domains; the warm-up has the two tasks after them in each domain.

    Raises:
        ValueError: `episodes` is not a multiple of `samples`, or a split has too few tasks.
    """
    from tau_bench_env.env import shared_domain

    if row.samples < 1 or row.episodes % row.samples:
        raise ValueError(f"--episodes {row.episodes} is not a multiple of --samples {row.samples}")
    ids = {domain: [task.id for task in shared_domain(domain).tasks("base")] for domain in row.domains}
    prompts = row.episodes // row.samples
    taken = {domain: -(-(prompts - n) // len(row.domains)) for n, domain in enumerate(row.domains)}
    for domain, count in taken.items():
        if count + 2 > len(ids[domain]):
            raise ValueError(f"{domain}'s base split has {len(ids[domain])} tasks; {count} prompts and 2 warm-up tasks asked")
    tasks = [(domain, ids[domain][n]) for n in range(max(taken.values())) for domain in row.domains if n < taken[domain]]
    warm_up = [(domain, task) for domain in row.domains for task in ids[domain][taken[domain]:taken[domain] + 2]]
    return tasks, warm_up


def warm_up_samples(episodes: int, warm_up: list[Episode]) -> int:
    """Samples per warm-up task, so that the warm-up batch holds at least `episodes` episodes (every
    concurrent request opens its connection then)."""
    return -(-episodes // len(warm_up))


def resident_bytes(pids: Iterable[int | str] = ("self",)) -> int:
    """The resident memory now of the processes `pids` (Linux `/proc/<pid>/statm`), in bytes."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/statm") as statm:
            total += int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


def cpu_seconds(pids: Iterable[int]) -> float:
    """The CPU seconds (user and system) the processes `pids` have used so far (Linux `/proc/<pid>/stat`, in
    clock ticks of 10 ms)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: the stat file's 14th and 15th fields
    return total / os.sysconf("SC_CLK_TCK")


MEMORY_SAMPLE_S = 0.02
"""How often the runner samples its and its workers' resident memory during a measured batch. Each sample reads
/proc once per process on the runner's event loop (33 us for 3 processes here): every 5 ms, as it was, a
1.8 s batch of 256 episodes spent 12 ms of the runner's CPU on it (0.05 ms per episode; unpickling 2 workers'
records then cost it 0.21 ms per episode, 0.055-0.13 ms since records cross packed), which a throttled runner
(`--slow-day`) cannot spare."""

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
"""cgroup v1's CPU controller: `--slow-day` puts each of ctu's processes in a group of its own there."""

CGROUP_PERIOD_US = 10_000
"""The CPU quota's period (10 ms: the kernel refuses quotas under 1 ms)."""


def throttle(pids: Iterable[int], share: float) -> None:
    """A slow day, simulated: each process of `pids` gets at most `share` of one core, in a cgroup of its own
    (`CGROUP_CPU`/ctu-slow-<pid>, a CPU quota of `share` x 10 ms every 10 ms; left behind empty, removed by
    `unthrottle`). Needs root and cgroup v1's CPU controller.

    Raises:
        OSError: the cgroup cannot be made or joined.
    """
    for pid in pids:
        group = CGROUP_CPU / f"ctu-slow-{pid}"
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(CGROUP_PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(max(1000, round(share * CGROUP_PERIOD_US))))
        (group / "cgroup.procs").write_text(str(pid))


def unthrottle(pids: Iterable[int]) -> None:
    """Undo `throttle` for `pids`: back to the root group, their groups removed."""
    for pid in pids:
        group = CGROUP_CPU / f"ctu-slow-{pid}"
        if group.exists():
            try:
                (CGROUP_CPU / "cgroup.procs").write_text(str(pid))
            except OSError:  # the process has ended
                pass
            group.rmdir()


def wall_loop_seconds() -> float:
    """The reference loop's wall time now (`machine.reference_loop_seconds` measures its CPU time): what a slow
    day's loop would take, in a throttled process."""
    start = time.perf_counter()
    reference_loop_seconds(1)
    return time.perf_counter() - start


@dataclasses.dataclass
class CtuBatch:
    """One measured batch of ctu's generator (`Rollout.run_batch`)."""

    wall: float
    """Seconds from the call to `run_batch` to its return."""
    cpu: float
    """CPU seconds of the runner's process and its rollout workers over the batch."""
    memory: float
    """Peak resident bytes of those processes during the batch above those before it."""
    runner_cpu: float
    """CPU seconds of the runner's process alone (with workers: taking in their records)."""
    processes: int
    """Rollout worker processes the batch was spread over (1: one event loop)."""
    endings: tuple[float, float, float]
    """(the first episode's end, the last's, in seconds from the batch's start; then seconds from the last
    episode's end to the batch's return): an episode ends when its record reaches the runner's event loop
    (`on_episode`), which with rollout workers is after the runner has unpickled it."""
    loop_busy: float = 0.0
    """What the generator reports of its event loops (`ctu.rollout.loop_load`): the share of the batch the busiest
    was busy."""
    loop_wall: float | None = None
    """On a simulated slow day (`--slow-day`), the reference loop's wall time in the throttled runner."""
    profile: str | None = None
    """With `--profile`, the profile's top costs, printed."""


async def generate(row: Row, base_url: str, profile: bool, processes: int | str = 1,
                   share: float | None = None, tokens: bool = False, engines: int | None = None,
                   pause: float = 0.0) -> tuple[CtuBatch, Any]:
    """Build ctu's generator as `ctu run` would, warm it up on the row's warm-up tasks, then time one batch:
    each of its tasks `row.samples` times, all episodes at once. The policy is asked for chat completions
    (`OpenAIChatSampler`, as `ctu eval` samples an endpoint) or, with `tokens`, sampled token-in/token-out as a
    training run on SkyRL samples it (`SkyRLSampler` over SkyRL's `RemoteInferenceClient`, built as SkyRL's
    inference setup builds it, with the tokenizer), the server standing for SkyRL's router in front of `engines`
    vLLM engines (SkyRL's client lets at most 512 requests an engine be in flight; None: enough engines that the
    cap never binds, one per 512 episodes, as a run of that many concurrent episodes would have).

    With `processes` > 1 the generator spreads each batch over as many worker processes (the generator's
    `processes`), started by the warm-up batch; ``"auto"`` leaves the count to the generator, as a spec that
    names none does (`ctu.rollout.processes.auto_processes`; the batch reports what it chose). With `share`, each of ctu's processes gets at most that share of
    a core for the measured batch (`throttle`: a slow day, simulated). `pause` seconds pass between the warm-up
    and the measured batch, as a training step's update passes between two steps' rollouts: connections idle for
    longer than a client's or the server's keep-alive are closed, and the batch opens new ones.

    Returns:
        (the measured batch, the cProfile profile or None). The warm-up's output is kept alive meanwhile, so the
        batch cannot reuse its memory and the peak counts what the batch's own episodes hold (sampled every
        `MEMORY_SAMPLE_S` on the event loop, and once after the batch).
    """
    import cProfile
    import gc

    from transformers import AutoTokenizer

    from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
    from ctu.composition import build_components
    from ctu.models.tiny_qwen3 import tokenizer_path
    from ctu.rollout.build import build_generator
    from ctu.rollout.requests import TaskRow, requests_for
    from ctu.rollout.sampling import OpenAIChatSampler
    from ctu.spec import spec_from_dict

    tasks, warm_up = batch_tasks(row)
    user = {"type": "llm", "model": "user", "base_url": base_url, "api_key_env": None, "timeout_s": 120}
    spec = spec_from_dict({
        "experiment": {"name": "bench"}, "model": {"path": "builtin:tiny-qwen3", "max_model_len": 32768},
        "data": {"train": [{"domain": domain} for domain in row.domains]},
        "environment": {"user_simulator": user, "max_turns": 10},
        "rollout": {"native_tool_calling": True, "generator": {"type": "tau_multiturn", "max_concurrent_episodes": row.episodes, "processes": processes}},
        "backend": {"type": "skyrl"}, "algorithm": {"use_kl_loss": False},
    }).spec
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path()))
    if tokens:
        from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient

        from ctu.backends.skyrl.sampler import SkyRLSampler

        root = base_url.removesuffix("/v1")
        from skyrl.env_vars import SKYRL_GENERATE_CONCURRENCY_PER_ENGINE as per_engine

        engines = engines or max(1, -(-row.episodes // per_engine))
        print(f"  SkyRL's client: {engines} engine(s) behind the router, at most {engines * per_engine} policy requests "
              f"in flight", flush=True)
        # The engines' URLs are SkyRL's control plane only (weight syncs, pauses); each turn goes to the router.
        client = RemoteInferenceClient(proxy_url=root, server_urls=[root] * engines, model_name="policy",
                                       data_parallel_size=1, tokenizer=tokenizer)
        sampler: Any = SkyRLSampler(client, "policy")
    else:
        sampler = OpenAIChatSampler(ChatEndpoint(OpenAIEndpointParams(model="policy", base_url=base_url, api_key_env=None, timeout_s=120)))
    ended: list[float] = []  # when each episode's record reached the runner's event loop (`on_episode`)

    def progress(batch: int, finished: bool) -> None:
        if finished:
            ended.append(time.perf_counter())

    generator = build_generator(build_components(spec), tokenizer, sampler, on_episode=progress)
    processes = generator.processes

    def rows(ids: list[Episode]) -> list[TaskRow]:
        return [TaskRow(domain, task) for domain, task in ids]

    warm_output = await generator.run_batch(requests_for(rows(warm_up), warm_up_samples(row.episodes, warm_up)), "eval", 0)  # not measured; held, see above
    gc.collect()
    await asyncio.sleep(pause)
    workers = sorted(getattr(generator, "worker_pids", ()))
    pids = ["self", *workers]
    loop_wall = None
    if share is not None:
        throttle([os.getpid(), *workers], share)
        loop_wall = wall_loop_seconds()
    before, peak = resident_bytes(pids), 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, resident_bytes(pids))
            await asyncio.sleep(MEMORY_SAMPLE_S)

    watcher = asyncio.create_task(watch())
    profiler = cProfile.Profile(time.thread_time) if profile else None  # CPU time of the event-loop thread
    cpu, worker_cpu, wall = time.process_time(), cpu_seconds(workers), time.perf_counter()
    if profiler:
        profiler.enable()
    ended.clear()
    started = wall
    output = await generator.run_batch(requests_for(rows(tasks), row.samples), "eval", 0)
    if profiler:
        profiler.disable()
    returned = time.perf_counter()
    wall, parent_cpu = returned - wall, time.process_time() - cpu
    endings = (min(ended) - started, max(ended) - started, returned - max(ended))
    cpu = parent_cpu + cpu_seconds(workers) - worker_cpu
    peak = max(peak, resident_bytes(pids))
    watcher.cancel()
    if share is not None:
        unthrottle([os.getpid(), *workers])
    account = generator.account
    if processes == 1:
        print(f"  ctu's caches, warm-up batch included: token encodings {account.encoding_cache_hits} hits, "
              f"{account.encoding_cache_misses} misses; batch memo of prompts, observations and assistant turns "
              f"{account.memo_hits} hits, {account.memo_misses} misses", flush=True)
    else:
        generator.close()
    if tokens:
        await sampler.aclose()  # the sampler's and SkyRL's clients keep a session per event loop; this one ends here
        await client.aclose()
    if len(output.records) != row.episodes or len(warm_output.records) < row.episodes:
        raise RuntimeError(f"expected {row.episodes} trajectories, got {len(output.records)}")
    if any(record.error for record in output.records):
        raise RuntimeError(f"an episode failed: {next(r.error for r in output.records if r.error)}")
    busy = output.metrics["timing/rollout_loop_busy"]
    return CtuBatch(wall, cpu, peak - before, parent_cpu, processes, endings, busy, loop_wall), profiler


def ctu_repetition(row: Row, base_url: str, profile: bool, processes: int | str, share: float | None, tokens: bool,
                   engines: int | None, pause: float, connection: Any) -> None:
    """Child process of one ctu repetition: `generate` (one measured `run_batch`), then send its `CtuBatch` (with the profile's printed top
    costs when profiled) through `connection`."""
    import io
    import pstats

    batch, profiler = asyncio.run(generate(row, base_url, profile, processes, share, tokens, engines, pause))
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats("ctu|tau_bench_env|tau2|jinja|tokeniz", 45)
        batch.profile = out.getvalue()
    connection.send(batch)


def tau2_batch(row: Row, episodes: int, base_url: str) -> tuple[float, float]:
    """The row's first `episodes` episodes through tau2's own runner: an `Orchestrator` per episode with tau2's
    `LLMAgent` and `UserSimulator` (litellm over the same server), one thread per concurrent episode as tau2's
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

    llm_args = {"api_base": base_url, "api_key": "EMPTY", "temperature": 0.0}

    def episode(job: Episode) -> float:
        domain_name, task_id = job
        task = shared_domain(domain_name).task(task_id)
        environment = registry.get_env_constructor(domain_name)()
        agent = LLMAgent(tools=environment.get_tools(), domain_policy=environment.get_policy(), llm="openai/policy", llm_args=llm_args)
        user_tools = environment.get_user_tools() if environment.user_tools is not None else None
        user = UserSimulator(tools=user_tools, instructions=str(task.user_scenario), llm="openai/user", llm_args=llm_args)
        run = Orchestrator(domain_name, agent, user, environment, task, max_steps=100).run()
        return evaluate_simulation(run, task, EvaluationType.ALL, False, domain_name).reward

    tasks, warm_up = batch_tasks(row)
    episode(warm_up[0])  # litellm's import and caches, not measured
    batch = [task for task in tasks for _ in range(row.samples)][:episodes]
    cpu, wall = time.process_time(), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(batch)) as pool:
        list(pool.map(episode, batch))
    return time.perf_counter() - wall, time.process_time() - cpu


def tau2_repetition(row: Row, episodes: int, base_url: str, connection: Any) -> None:
    """Child process of tau2's batch: `tau2_batch`, then send (wall seconds, CPU seconds) through `connection`."""
    connection.send(tau2_batch(row, episodes, base_url))


def in_child(context: Any, target: Any, *args: Any, timeout: float | None = None) -> Any:
    """Run `target(*args, connection)` in a new process of `context` and return what it sends through
    `connection`; None, the process killed, when it sends nothing within `timeout` seconds (None: no limit)."""
    mine, child = context.Pipe()
    process = context.Process(target=target, args=(*args, child))  # not a daemon: ctu's may start rollout workers
    process.start()
    if not mine.poll(timeout):
        process.kill()
        process.join()
        return None
    sent = mine.recv()
    process.join()
    return sent


@dataclasses.dataclass
class Measured:
    """One batch: turns, wall and CPU seconds of the runner (its workers included), the server's CPU per request,
    and for ctu the batch's own figures and how far its waves spread."""

    turns: int
    wall: float
    cpu: float
    server_cpu: float
    ctu: CtuBatch | None = None
    spread: tuple[float, float, tuple[float, ...]] | None = None
    """(the users' openings', the widest, the first domain's waves' in order) seconds over which the requests of one
    wave reached the server (`wave_spread`)."""


def wave_spread(row: Row, arrivals: list[tuple[float, str, bool, int]]) -> tuple[float, float, tuple[float, ...]]:
    """How far apart a measured batch's episodes drifted: a wave is the requests the batch's episodes of one
    domain make at the same point of their script (the same domain, requester and count of assistant messages:
    every episode makes one); returns (the users' openings' spread, the widest wave's, the spreads of the row's
    first domain's waves in the order they reached the server), in seconds from the first to the last arrival of
    a wave. `arrivals` (the server's, see `serve`) hold the warm-up batch's before the
    measured batch's, so each wave's last arrivals, as many as the batch has episodes of the domain, are taken.
    An ideal runner's waves arrive all at once; one event loop spreads a wave over about its episodes x its CPU
    per episode, and the batch ends about the widest spread after the ideal.
    """
    tasks, _ = batch_tasks(row)
    episodes = {domain: row.samples * sum(1 for d, _ in tasks if d == domain) for domain in row.domains}
    waves: dict[tuple[str, bool, int], list[float]] = {}
    for arrived, domain, policy, said in sorted(arrivals):
        waves.setdefault((domain, policy, said), []).append(arrived)
    spreads = {key: times[-1] - times[-episodes[key[0]]] for key, times in waves.items() if len(times) >= episodes[key[0]]}
    first = sorted((times[-episodes[key[0]]], spreads[key]) for key, times in waves.items() if key in spreads and key[0] == row.domains[0])
    return (max(spreads.get((domain, False, 0), 0.0) for domain in row.domains), max(spreads.values(), default=0.0),
            tuple(spread for _, spread in first))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"which rows to measure, comma-separated, of: {', '.join(ROWS)}")
    parser.add_argument("--episodes", type=int, help="concurrent episodes of every row (default: the row's)")
    parser.add_argument("--samples", type=int, help="samples per task, a GRPO group (default: the row's)")
    parser.add_argument("--latency", type=float, help="seconds the server waits before each answer (default: the row's)")
    parser.add_argument("--runners", default="ctu,ctu-tokens,tau2",
                        help="which to run, comma-separated: ctu (the policy asked for chat completions), ctu-tokens "
                             "(sampled token-in/token-out through SkyRL's client), tau2")
    parser.add_argument("--repeats", type=int, default=3, help="measured ctu batches per row, each in a new process (medians compared)")
    parser.add_argument("--tau2-episodes", type=int, default=256,
                        help="tau2 runs at most this many of a row's episodes (it managed 3-70 turns/s here: 256 mixed "
                             "episodes took 11 min, 1024 would take 45)")
    parser.add_argument("--tau2-timeout", type=float, default=1800.0,
                        help="seconds after which tau2's runner, if it has not finished a row's batch, is stopped and the "
                             "row reported without it (its litellm threads once waited for ever here, the server idle)")
    parser.add_argument("--profile", action="store_true", help="print the top CPU costs of ctu's first measured batch of each row")
    parser.add_argument("--slow-day", type=float, metavar="LOOP",
                        help="simulate a slow day: ctu's processes (each) get the share of a core that makes the reference "
                             "loop take LOOP s of wall time (cgroup v1 CPU quota; needs root)")
    parser.add_argument("--engines", type=int, help="vLLM engines the server stands for on the training path (ctu-tokens): "
                                                    "SkyRL's client lets at most 512 policy requests an engine be in "
                                                    "flight (default: one engine per 512 episodes, so the cap never binds)")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds between the warm-up batch and the measured one, as a training step's update "
                             "passes between two rollouts (idle connections past a keep-alive are closed meanwhile; "
                             "ctu's generate client and chat endpoints and this server keep them an hour, SkyRL's own "
                             "client 2 s)")
    parser.add_argument("--record", default="rollout_concurrency", metavar="NAME",
                        help="record the table as benchmarks/results/NAME.json (default: rollout_concurrency)")
    parser.add_argument("--processes", default="1", help="ctu's rollout worker processes, comma-separated counts, each "
                                                         "measured (the generator's `processes`; 1: one event loop; "
                                                         "auto: the generator's choice for this machine's cores)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    try:
        counts: list[int | str] = [count if count == "auto" else int(count) for count in args.processes.split(",")]
    except ValueError:
        parser.error(f"--processes takes counts or auto, comma-separated: {args.processes!r}")
    if any(isinstance(count, int) and count < 1 for count in counts):
        parser.error("--processes counts must be at least 1")
    share = None
    if args.slow_day is not None:
        if not (CGROUP_CPU / "cpu.cfs_quota_us").exists() or not os.access(CGROUP_CPU, os.W_OK):
            parser.error(f"--slow-day needs root and cgroup v1's CPU controller at {CGROUP_CPU}")
        share = reference_loop_seconds() / args.slow_day
        if share >= 1:
            parser.error(f"--slow-day {args.slow_day}: the loop already takes {args.slow_day * share:.2f} s here")
        print(f"slow day: each of ctu's processes gets {share:.2f} of a core (the reference loop's wall time "
              f"{args.slow_day} s); tau2's runner is not throttled", flush=True)
    rows = []
    for name in args.rows.split(","):
        if name not in ROWS:
            parser.error(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
        row = ROWS[name]
        row = dataclasses.replace(row, episodes=args.episodes or row.episodes, samples=args.samples or row.samples,
                                  latency=args.latency or row.latency)
        try:
            batch_tasks(row)
        except ValueError as exc:
            parser.error(f"row {name}: {exc}")
        rows.append(row)
    runners = args.runners.split(",")
    if unknown := set(runners) - {"ctu", "ctu-tokens", "tau2"}:
        parser.error(f"unknown runners {sorted(unknown)}")
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(target=serve, args=(rows[0].latency, sorted({d for row in rows for d in row.domains}), theirs), daemon=True)
    server.start()
    results: dict[str, dict[str, list[Measured]]] = {}
    reports = []

    def counted(run: Any, warm_up_requests: int, row: Row) -> Measured | None:
        ours.send("count")
        before, server_before, _ = ours.recv()
        measured = run()
        ours.send("count")
        after, server_after, arrivals = ours.recv()
        if measured is None:
            return None
        server_cpu = (server_after - server_before) / max(after - before, 1)
        turns = after - before - warm_up_requests
        if isinstance(measured, CtuBatch):
            return Measured(turns, measured.wall, measured.cpu, server_cpu, measured, wave_spread(row, arrivals))
        return Measured(turns, *measured, server_cpu)

    try:
        base_url = ours.recv()
        for row in rows:
            ours.send(float(row.latency))
            ours.recv()
            _, warm_up = batch_tasks(row)
            results[row.name] = {}
            for runner in runners:
                if runner in ("ctu", "ctu-tokens"):
                    def run_ctu(first: bool, processes: int | str, row: Row = row, runner: str = runner) -> CtuBatch:
                        batch: CtuBatch = in_child(context, ctu_repetition, row, base_url, args.profile and first, processes,
                                                   share, runner == "ctu-tokens", args.engines, args.pause)
                        if batch.profile:
                            reports.append((f"{row.name}, {runner}", batch.profile))
                        return batch

                    samples = warm_up_samples(row.episodes, warm_up)
                    warm_up_requests = sum(SCRIPTS[domain].requests * samples for domain, _ in warm_up)
                    for processes in counts:
                        measured_ctu = [counted(lambda first=(n == 0), processes=processes: run_ctu(first, processes),
                                                warm_up_requests, row)
                                        for n in range(args.repeats)]
                        label = ctu_label(processes, share is not None, runner == "ctu-tokens")
                        results[row.name][label] = [m for m in measured_ctu if m is not None]
                else:
                    def run_tau2(row: Row = row) -> tuple[float, float] | None:
                        # litellm's threads can wait for ever (seen here)
                        measured = in_child(context, tau2_repetition, row, args.tau2_episodes, base_url, timeout=args.tau2_timeout)
                        if measured is None:
                            print(f"  tau2's runner gave no answer within {args.tau2_timeout:.0f} s on row {row.name}: "
                                  "stopped", flush=True)
                        return measured

                    measured = counted(run_tau2, SCRIPTS[warm_up[0][0]].requests, row)
                    results[row.name]["tau2"] = [measured] if measured is not None else []
    finally:
        ours.send("stop")
        server.join(timeout=10)
    loop = reference_loop_seconds()
    table, figures = report(rows, results, loop, args.tau2_episodes)
    record(args.record, figures, table, loop, note(args.repeats, args.tau2_episodes if "tau2" in runners else None))
    for name, printed in reports:
        print(f"profile of ctu's first measured batch, row {name}:\n{printed}")


def note(repeats: int, tau2_episodes: int | None) -> str:
    """The line under the recorded table: how its figures were taken (`tau2_episodes` None: tau2's runner not run)."""
    tau2 = "" if tau2_episodes is None else f"; tau2's runner once, on at most {tau2_episodes} of a row's episodes"
    return (f"Medians of {repeats} ctu batch(es) a row, each in a new process (range of the ratio to the ideal in "
            f"brackets){tau2}; CPU per turn normalised to the goals' day in brackets.")


def ctu_label(processes: int | str, slow_day: bool = False, tokens: bool = False) -> str:
    """The runner's name in the report: ``ctu`` (or ``ctu tokens``, sampled token-in/token-out), then ``xP`` for P
    rollout worker processes (``x auto``: the generator's choice), then ``slow day`` when throttled
    (`--slow-day`)."""
    count = "" if processes == 1 else " x auto" if processes == "auto" else f" x{processes}"
    return ("ctu tokens" if tokens else "ctu") + count + (" slow day" if slow_day else "")


def ctu_figures(run: Measured, episodes: int, ideal: float) -> str:
    """A ctu batch's own figures, printed after its speed: memory per live episode, how far its waves spread,
    when its episodes ended against the ideal, its loops' load as the generator reports it, the throttled loop's
    wall time on a slow day and, with rollout workers, the runner's own CPU per episode; empty for tau2's runner."""
    batch = run.ctu
    if batch is None:
        return ""
    first, last, tail = batch.endings
    figures = f"   {batch.memory / episodes / 1e6:5.3f} MB per live episode"
    if run.spread is not None:
        in_order = ", ".join(f"{spread * 1000:.0f}" for spread in run.spread[2])
        figures += (f"   a wave spread over <= {run.spread[1] * 1000:.0f} ms (openings {run.spread[0] * 1000:.0f} ms; "
                    f"the first domain's waves in order: {in_order} ms)")
    figures += (f"   episodes ended {(first - ideal) * 1000:+.0f} to {(last - ideal) * 1000:+.0f} ms after the ideal batch's end, "
                f"the batch returned {tail * 1000:.0f} ms after the last")
    figures += f"   the generator's report: loop busy {batch.loop_busy:.0%}"
    if batch.loop_wall is not None:
        figures += f"   slow day: the loop took {batch.loop_wall:.2f} s of wall time"
    if batch.processes > 1:
        figures += (f"   {batch.processes} worker processes; the runner's own process (taking in the records): "
                    f"{batch.runner_cpu / episodes * 1000:.2f} ms per episode")
    return figures


def report(rows: list[Row], results: dict[str, dict[str, list[Measured]]], loop: float,
           tau2_episodes: int) -> tuple[dict[str, list], dict[str, dict[str, dict[str, float]]]]:
    """Print every batch, then one table: per row and runner, the batch's speed as a fraction of the ideal
    (`Row.ideal_seconds` over the wall time), ctu's widest wave (`wave_spread`), CPU per turn (measured and
    normalised to the reference loop), ctu's resident memory per live episode, tau2's figures and the ratios,
    and the goals.

    Returns:
        The table (`results.record`'s shape) and the medians behind it: ``{row: {runner: {figure: value}}}``
        (rates as fractions of the ideal, CPU and waves in s, memory in MB; NaN where a runner has none).
    """
    print(f"this machine now: a reference loop of 10M additions takes {loop:.2f} s of CPU (goals at {REFERENCE_LOOP_S} s)")
    table = []
    for row in rows:
        print(f"row {row.name}: {row.episodes} concurrent episodes of {'/'.join(row.domains)} "
              f"({row.episodes // row.samples} tasks x {row.samples} samples, {row.requests:.2f} requests each), "
              f"{row.latency * 1000:.0f} ms per request; ideal {row.ideal_seconds():.2f} s (the longest episode's requests)")
        medians: dict[str, tuple[float, float, float, float, float, float]] = {}
        for runner, runs in results[row.name].items():
            episodes = min(row.episodes, tau2_episodes) if runner == "tau2" else row.episodes
            ideal = row.ideal_seconds(episodes)
            if not runs:
                print(f"  {runner:<5} stopped: no answer within --tau2-timeout")
                continue
            for run in runs:
                print(f"  {runner:<5} {run.turns:5d} turns in {run.wall:6.2f} s {run.turns / run.wall:7.1f} turns/s = "
                      f"{ideal / run.wall:4.2f} x ideal   CPU per turn {run.cpu / run.turns * 1000:7.3f} ms"
                      f"{ctu_figures(run, row.episodes, ideal)}   (server: {run.server_cpu * 1000:.2f} ms per request)")
            rates = [ideal / run.wall for run in runs]
            cpu = statistics.median(run.cpu / run.turns for run in runs)
            memory_mb = statistics.median(run.ctu.memory / row.episodes / 1e6 for run in runs if run.ctu) if runs[0].ctu else float("nan")
            spread = statistics.median(run.spread[1] for run in runs if run.spread) if runs[0].spread else float("nan")
            medians[runner] = (statistics.median(rates), min(rates), max(rates), cpu, memory_mb, spread)
        table.append((row, medians))
    columns = ["row", "runner", "episodes @ latency", "ctu x ideal (range)", "ctu's widest wave", "tau2 x ideal",
               "ctu CPU per turn (normalised)", "tau2 CPU per turn", "tau2/ctu CPU", "ctu memory per live episode",
               "goals (normalised)"]
    lines: list[list[str]] = []
    misses: list[list[int]] = []
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for row, medians in table:
        figures[row.name] = {runner: dict(zip(("x_ideal_median", "x_ideal_min", "x_ideal_max", "cpu_per_turn_s",
                                                "memory_per_episode_mb", "widest_wave_s"), values, strict=True))
                             for runner, values in medians.items()}
        tau2 = medians.get("tau2")
        for runner, ctu in medians.items():
            if runner == "tau2" and len(medians) > 1:
                continue
            ours = ctu if runner != "tau2" else None
            ctu_rate = f"{ours[0]:.2f} ({ours[1]:.2f}-{ours[2]:.2f})" if ours else "-"
            ctu_spread = f"{ours[5] * 1000:.0f} ms" if ours else "-"
            ctu_cpu = f"{ours[3] * 1000:.2f} ms ({normalised(ours[3], loop) * 1000:.2f})" if ours else "-"
            tau2_rate = f"{tau2[0]:.2f}" if tau2 else ("stopped" if "tau2" in results[row.name] else "-")
            tau2_cpu = f"{tau2[3] * 1000:.1f} ms" if tau2 else "-"
            ratio = f"{tau2[3] / ours[3]:.0f}x" if ours and tau2 else "-"
            memory = f"{ours[4]:.3f} MB" if ours else "-"
            lines.append([row.name, runner, f"{row.episodes} @ {row.latency * 1000:.0f} ms", ctu_rate, ctu_spread, tau2_rate,
                          ctu_cpu, tau2_cpu, ratio, memory, f">= {row.goal_rate} x ideal, <= {row.goal_cpu_ms} ms"])
            if ours and ours[0] < row.goal_rate:
                misses.append([len(lines) - 1, columns.index("ctu x ideal (range)")])
            if ours and normalised(ours[3], loop) * 1000 > row.goal_cpu_ms:
                misses.append([len(lines) - 1, columns.index("ctu CPU per turn (normalised)")])
    print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for line in lines:
        print("| " + " | ".join(line) + " |")
    return {"columns": columns, "rows": lines, "misses": misses}, figures


if __name__ == "__main__":
    main()
