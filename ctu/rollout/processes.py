"""`ProcessRollout`: ctu's agent loop with each batch spread over worker processes, each running its share of
the episodes on an event loop of its own.

Why: one event loop does every episode's CPU work in turn (HTTP, the environment's tools, tokenisation,
rewards), about 0.3-0.5 ms a turn at the reference speed, asking a chat endpoint or SkyRL's engines
token-in/token-out (`benchmarks/rollout_concurrency.py`). The episodes of a batch make their requests in waves
(every episode's n-th request at about the same time), and one loop sends a wave out over its episodes x that
CPU; the batch ends about that much after a runner that costs nothing would (0.15-0.2 s for 256 retail episodes
on this project's machines, 0.84-0.90 of the ideal at 200 ms a request, less on a slower machine or a bigger
batch). P processes each hold 1/P of the episodes, so a wave spreads over 1/P of that, given a core for each.
`processes: auto`, the default, picks P from the batch and the cores (`auto_processes`).

How: the worker processes are spawned at the first batch, all at once, and the batch waits until each has
built its setup (not forked: the parent may hold threads, Ray's or the tokenizer's); they live until `close()`
or this process's exit (daemon processes; a worker whose parent is gone ends). Each builds the setup again from
`RolloutSetup.in_worker` (the spec, the tokenizer and the sampler, pickled: the sampler must be one that can be
sent to another process, such as an HTTP client) and runs `TauGenerator.batch_records` on its shard, sent
through a pipe of its own with the parent's `Sampler.policy_version` (the worker's copy of the sampler keeps the
version it was pickled with). A GRPO group (a task's samples) stays in one worker, so the batch memo of prompts
(`ctu.rollout.tokens`) keeps its hits, and each sample keeps its repetition number. Each record comes back
through the pipe as its episode ends (so this process unpickles records while the rest run, not all at the
batch's end; `TrajectoryRecord` packs its token lists, and `EpisodeResult` sends its messages as bytes unpickled
only when read), with the progress (`on_episode`); everything else (the batch's records in input order,
`on_records`, metrics) is `TauGenerator.run_batch`'s, in this process. A worker that dies turns
the episodes of its shard it had not sent into infrastructure errors, and the next batch starts a new one; a
worker that cannot build its setup is a `ComponentError` on the first batch.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import multiprocessing
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from typing import TYPE_CHECKING, Any

from ctu.components.rewards.base import Phase
from ctu.errors import ComponentError
from ctu.rollout.generator import TauGenerator
from ctu.rollout.heap import frozen_heap
from ctu.rollout.loop_load import LoopLoad
from ctu.rollout.records import TrajectoryRecord
from ctu.rollout.requests import EpisodeRequest, sample_indices, task_key

if TYPE_CHECKING:
    from ctu.rollout.setup import RolloutSetup

logger = logging.getLogger(__name__)


def shards(requests: Sequence[EpisodeRequest], processes: int) -> list[list[int]]:
    """The batch's episodes (in input order) split over `processes` workers, as lists of input indices (each
    ascending; some empty when there are fewer tasks than workers).

    A task's samples (the same `EpisodeRequest.task_key`) go to one worker; tasks are dealt in order of first appearance, each to
    the worker holding the fewest episodes so far (the first such), so workers differ by at most one group.
    """
    groups: dict[str, list[int]] = {}
    for index, request in enumerate(requests):
        groups.setdefault(request.task_key, []).append(index)
    split: list[list[int]] = [[] for _ in range(processes)]
    for indices in groups.values():
        min(split, key=len).extend(indices)
    return [sorted(indices) for indices in split]


EPISODES_PER_LOOP = 128
"""Most concurrent episodes `processes: auto` leaves on one event loop. One loop sends a wave of requests out over
its episodes x its CPU per episode; at 128 retail episodes and 200 ms a request that cost 0.90 of the ideal
runner's speed on a slow day (reference loop 0.6 s), against 0.85 for 256 and 0.94 for 64
(`benchmarks/rollout_concurrency.py --slow-day 0.6 --episodes 128`, docs/benchmarks.md). The loss scales with episodes over
the policy's latency, so at a GPU's seconds a turn one loop would hold many more: the count is set for the
fastest policy the benchmark asks for."""


def auto_processes(episodes: int, cores: int) -> int:
    """Worker processes `processes: auto` spreads `episodes` concurrent episodes over on a machine where this
    process may use `cores` CPUs: enough that each holds at most `EPISODES_PER_LOOP`, but at most `cores` - 1 (a
    core is left to this process, which takes in the records and runs the trainer's driver); 1, i.e. every
    episode on this process's event loop, when that is all the cores allow."""
    return max(1, min(math.ceil(episodes / EPISODES_PER_LOOP), cores - 1))


def usable_cores() -> int:
    """CPUs this process may use: its CPU affinity and a container's CFS quota taken into account
    (`joblib.cpu_count`, through loky), not the machine's count that `os.cpu_count` gives."""
    from joblib import cpu_count

    return int(cpu_count())


def unsendable(setup: RolloutSetup) -> str | None:
    """Why `setup` cannot be built again in a worker process, as a phrase that follows "processes: P" (no
    `in_worker`, a sampler bound to this process, such as the Tinker training loop's, or one that cannot be
    pickled), or None when it can."""
    if setup.in_worker is None:
        return ("needs a setup that worker processes can build again (`RolloutSetup.in_worker`, set by "
                "`ctu.rollout.build.build_generator`)")
    if getattr(setup.sampler, "process_bound", False):
        return (f"sends the policy's sampler ({type(setup.sampler).__name__}) to worker processes, and it is bound "
                "to this process (its client is replaced here as the weights change)")
    try:
        pickle.dumps(setup.in_worker)
    except Exception as exc:
        return (f"sends the policy's sampler ({type(setup.sampler).__name__}) to worker processes, and it cannot "
                f"be sent ({type(exc).__name__}: {exc})")
    return None


class WorkerError(Exception):
    """A rollout worker process failed: it could not build its setup, or died (the message says how)."""


def _serve(connection: Connection, in_worker: Callable[[], RolloutSetup], max_concurrent_episodes: int) -> None:
    """A worker process: build the setup, then run each shard sent through `connection` on one event loop kept
    for every batch (connection pools live with it), until None (or the parent's end) arrives.

    Messages sent: ``("ready", pid)`` or ``("failed", traceback)`` once; then per shard ``("record", (index in
    the shard, *_Packer.pack(record)))`` as each episode ends (the parent unpickles records while the rest run),
    and ``("done", the loop's LoopLoad over the shard)``.
    """
    try:
        setup = replace(in_worker(), max_concurrent_episodes=max_concurrent_episodes, on_records=None, on_episode=None)
        generator = TauGenerator(setup)
        loop = asyncio.new_event_loop()
    except BaseException:
        connection.send(("failed", traceback.format_exc()))
        return
    connection.send(("ready", os.getpid()))
    try:
        while (shard := connection.recv()) is not None:
            requests, phase, version = shard
            setup.sampler.policy_version = version  # the parent's: its copy here was the policy's at the spawn
            sent = functools.partial(_send_record, connection, _Packer())
            loop.run_until_complete(generator.batch_records(requests, phase, on_record=sent))
            connection.send(("done", generator.loop_loads[0]))
    except EOFError:  # the parent is gone
        pass
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())  # closes the endpoints' HTTP sessions
        loop.close()


def _send_record(connection: Connection, packer: _Packer, index: int, record: TrajectoryRecord) -> None:
    """A worker sends the record of its shard's episode `index`, packed."""
    connection.send(("record", (index, *packer.pack(record))))


class _Packer:
    """A shard's records as sent through the pipe, without what the parent has had already: an episode's tool
    schemas are its domain's (each episode's list holds the domain's schema objects) and a GRPO group's samples
    share their prompt ids. The parent unpickles every worker's records: a retail record whose tools and prompt
    ids it had takes 0.055 ms, one that carries them 0.13 ms (measured on this project's machine; 0.2-0.35 ms
    before records packed their token ids and messages)."""

    def __init__(self) -> None:
        # ids of a tools list's schemas -> its number, and the list (held, so that the ids stay its schemas')
        self.tools: dict[tuple[int, ...], tuple[int, list[dict[str, object]]]] = {}
        self.prompts: dict[str, list[int]] = {}  # task -> the prompt ids sent with its first sample

    def pack(self, record: TrajectoryRecord) -> tuple[TrajectoryRecord, int, bool, bool]:
        """(the record to send, its tools' number, whether it carries them, whether its prompt ids are left
        out as those of its task's record sent before). Tools are known by their schema objects' identity:
        every episode copies its domain's list (`Episode.result`)."""
        key = tuple(map(id, record.result.tools))
        known_tools = self.tools.get(key)
        carries = known_tools is None
        if known_tools is None:
            number = len(self.tools)
            self.tools[key] = (number, record.result.tools)
        else:
            number = known_tools[0]
        task = task_key(record.extras.get("domain"), record.extras.get("task_id"))
        known = self.prompts.get(task) == record.prompt_ids
        if not known:
            self.prompts[task] = record.prompt_ids
        if carries and not known:
            return record, number, carries, known
        result = record.result if carries else replace(record.result, tools=[])
        return replace(record, result=result, prompt_ids=[] if known else record.prompt_ids), number, carries, known


class _Unpacker:
    """The parent's side of `_Packer`, for one shard."""

    def __init__(self) -> None:
        self.tools: dict[int, list[dict[str, object]]] = {}
        self.prompts: dict[str, list[int]] = {}

    def unpack(self, record: TrajectoryRecord, number: int, carries: bool, known: bool) -> TrajectoryRecord:
        """The record `_Packer.pack` sent, whole again (tools and a prompt left out are copies of the lists sent
        before, as every episode has lists of its own)."""
        if carries:
            self.tools[number] = record.result.tools
        else:  # set in place: `replace` would read, so unpickle, the result's messages (`EpisodeResult.__getstate__`)
            object.__setattr__(record.result, "tools", list(self.tools[number]))
        task = task_key(record.extras.get("domain"), record.extras.get("task_id"))
        if known:
            record.prompt_ids = list(self.prompts[task])
        else:
            self.prompts[task] = record.prompt_ids
        return record


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, context: SpawnContext, in_worker: Callable[[], RolloutSetup], max_concurrent_episodes: int, number: int) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, in_worker, max_concurrent_episodes),
                                       name=f"ctu-rollout-{number}", daemon=True)
        self.process.start()
        child.close()
        self.pid = 0

    def _receive(self) -> tuple[str, Any]:
        try:
            message: tuple[str, Any] = self.connection.recv()
        except (EOFError, OSError) as exc:
            raise self._gone() from exc
        return message

    def _gone(self) -> WorkerError:
        """The error for a worker whose pipe broke: it died (its exit code once it has ended)."""
        self.process.join(timeout=5)
        return WorkerError(f"rollout worker process {self.process.pid} died (exit code {self.process.exitcode})")

    def ready(self) -> None:
        """Wait until the worker has built its setup.

        Raises:
            WorkerError: it could not (its traceback in the message), or died.
        """
        kind, payload = self._receive()
        if kind != "ready":
            raise WorkerError(f"a rollout worker process could not build its setup:\n{payload}")
        self.pid = payload

    def run(self, requests: list[EpisodeRequest], phase: Phase, version: int | None, received: Callable[..., None]) -> LoopLoad:
        """Run a shard in the worker (blocking: called in a thread) with the sampler's `policy_version` set to
        `version`, calling `received(index in the shard, *packed record)` as each episode ends (`_Packer.pack`);
        returns the worker's loop load over the shard.

        Raises:
            WorkerError: the worker died (the records received until then stand).
        """
        try:
            self.connection.send((requests, phase, version))
        except OSError as exc:
            raise self._gone() from exc
        while True:
            kind, payload = self._receive()
            if kind == "done":
                load: LoopLoad = payload
                return load
            received(*payload)

    def stop(self) -> None:
        """Ask the worker to end, and wait for it (killed after 10 s)."""
        try:
            self.connection.send(None)
        except OSError:
            pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


class ProcessRollout(TauGenerator):
    """`TauGenerator` whose batches run in `processes` worker processes (see the module docstring); its single
    episodes (`run_episode`) run in this process.

    Attributes:
        processes: worker processes a batch is spread over.
        worker_pids: the ids of the worker processes now running (for benchmarks reading their CPU time).
    """

    def __init__(self, setup: RolloutSetup, processes: int) -> None:
        """Raises:
            ComponentError: `setup` cannot be sent to another process (`unsendable`: no `in_worker`, a sampler
                bound to this process such as the Tinker training loop's, or one that cannot be pickled).
        """
        super().__init__(setup)
        if (reason := unsendable(setup)) is not None:
            raise ComponentError(f"processes: {processes} {reason}; set processes to 1")
        assert setup.in_worker is not None  # `unsendable` said so
        self._in_worker: Callable[[], RolloutSetup] = setup.in_worker
        self.processes = processes
        self._workers: list[_Worker | None] = [None] * processes
        self._threads = ThreadPoolExecutor(processes, thread_name_prefix="ctu-rollout")
        """One thread per worker, waiting on its pipe (asyncio's default pool may have fewer)."""

    @property
    def worker_pids(self) -> list[int]:
        return [worker.pid for worker in self._workers if worker is not None]

    async def _ready_workers(self) -> list[_Worker]:
        """The worker processes, those not running started (all at once) and waited for.

        Raises:
            ComponentError: a worker could not build its setup.
        """
        missing = [n for n, worker in enumerate(self._workers) if worker is None]
        if missing:
            context = multiprocessing.get_context("spawn")
            per_worker = max(1, math.ceil(self.setup.max_concurrent_episodes / self.processes))
            started = [_Worker(context, self._in_worker, per_worker, n) for n in missing]
            for n, worker in zip(missing, started, strict=True):
                self._workers[n] = worker
            loop = asyncio.get_running_loop()
            failures = await asyncio.gather(*(loop.run_in_executor(self._threads, worker.ready) for worker in started),
                                            return_exceptions=True)
            if errors := [failure for failure in failures if isinstance(failure, BaseException)]:
                self.close()
                raise ComponentError(str(errors[0])) from errors[0]
        return [worker for worker in self._workers if worker is not None]

    async def batch_records(self, requests: Sequence[EpisodeRequest], phase: Phase,
                            on_record: Callable[[int, TrajectoryRecord], None] | None = None) -> list[TrajectoryRecord]:
        """`TauGenerator.batch_records` over the worker processes (see the module docstring); `on_record` is
        called in this process, from the thread that received the record.

        Raises:
            ComponentError: a worker could not build its setup (its traceback in the message).
        """
        workers = await self._ready_workers()
        loop = asyncio.get_running_loop()
        notify = self.setup.on_episode
        requests = [replace(request, sample=k) for request, k in zip(requests, sample_indices(requests), strict=True)]
        records: list[TrajectoryRecord | None] = [None] * len(requests)

        def receiver(indices: list[int]) -> Callable[..., None]:
            unpacker = _Unpacker()

            def received(index: int, *packed: Any) -> None:  # in the worker's thread
                record = unpacker.unpack(*packed)
                records[indices[index]] = record
                if on_record is not None:
                    on_record(indices[index], record)
                if notify is not None:
                    loop.call_soon_threadsafe(notify, len(requests), True)
            return received

        split = shards(requests, self.processes)
        running = [(n, indices) for n, indices in enumerate(split) if indices]
        version = self.setup.sampler.policy_version
        with frozen_heap():  # the records taken in would set off collections walking this process's whole heap
            results = await asyncio.gather(
                *(loop.run_in_executor(self._threads, workers[n].run, [requests[i] for i in indices], phase, version,
                                       receiver(indices))
                  for n, indices in running),
                return_exceptions=True,
            )
        self.loop_loads = [result for result in results if isinstance(result, LoopLoad)]
        for (n, indices), result in zip(running, results, strict=True):
            if not isinstance(result, BaseException):
                continue
            error = f"{type(result).__name__}: {result}"
            lost = [index for index in indices if records[index] is None]
            logger.error("%s: %d episodes are infrastructure errors", error, len(lost))
            for index in lost:
                records[index] = self.failed_record(requests[index], error)
            dead = self._workers[n]
            if dead is not None:
                dead.stop()
            self._workers[n] = None  # a new one is started for the next batch
        return [record for record in records if record is not None]

    def close(self) -> None:
        """Stop the worker processes (a later batch starts new ones)."""
        for n, worker in enumerate(self._workers):
            if worker is not None:
                worker.stop()
            self._workers[n] = None
