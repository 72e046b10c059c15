"""A batch spread over rollout worker processes (`rollout.generator.processes`): the same trajectories as one event
loop, progress from the workers, a worker that dies costs its own episodes only, and what cannot run in a
worker is refused with a clear error."""

from __future__ import annotations

import asyncio
import functools
import os
import pickle
import signal
import subprocess
import sys

import pytest

from ctu.composition import build_components
from ctu.errors import ComponentError
from ctu.rollout.build import build_generator
from ctu.rollout.generator import TauGenerator
from ctu.rollout.processes import EPISODES_PER_LOOP, ProcessRollout, _Packer, _Unpacker, auto_processes, shards
from ctu.rollout.records import TrajectoryRecord
from ctu.rollout.requests import EpisodeRequest, TaskRow
from ctu.rollout.sampling import SampleResult
from ctu.spec import spec_from_dict
from tau_bench_env.outcome import EpisodeResult

from ..support.scripted_sampler import ScriptedSampler
from .conftest import ReplayScript, batch

TASKS = ["0", "1", "2"]


def spec(minimal, processes: int | str, episodes: int = 256):
    minimal["backend"] = {"type": "skyrl"}
    minimal["trainer"] = {"train_batch_size": 4, "policy_mini_batch_size": 4}
    minimal["model"] = {"path": "builtin:tiny-qwen3", "max_model_len": 32768}
    minimal["rollout"] = {"generator": {"type": "tau_multiturn", "processes": processes, "max_concurrent_episodes": episodes}}
    return spec_from_dict(minimal).spec


def replay_sampler(tokenizer) -> ScriptedSampler:
    """The gold replay of `TASKS` as a token sampler that can be sent to a worker process."""
    script = ReplayScript(tokenizer, "retail", TASKS)
    return ScriptedSampler(script, functools.partial(tokenizer.encode, add_special_tokens=False), tokenizer.eos_token_id)


def test_shards_keep_a_tasks_samples_together_and_balance_the_workers():
    extras = [EpisodeRequest(TaskRow("retail", task)) for task in ["a", "b", "a", "c", "b", "d", "a"]]
    split = shards(extras, 2)
    assert split == [[0, 2, 5, 6], [1, 3, 4]]  # a (3) to the first worker, b (2) and c (1) to the second, d to the first
    assert shards(extras[:2], 3) == [[0], [1], []]
    assert shards([], 2) == [[], []]


def record(task: str, prompt: list[int], tools: list[dict[str, object]], response: int) -> TrajectoryRecord:
    from tau2.data_model.message import AssistantMessage, ToolCall

    conversation: list[dict[str, object]] = [{"role": "user", "content": f"order {task}"}, {"role": "assistant", "content": str(response)}]
    trajectory = [AssistantMessage(role="assistant", content=None, tool_calls=[
        ToolCall(id="call_1", name="find_user", arguments={"zip": task}, requestor="assistant")])]
    result = EpisodeResult("retail", task, turns=2, tools=tools, conversation=conversation, trajectory=trajectory)
    return TrajectoryRecord(list(prompt), [response, 2 ** 31 - 1], [1, 0], [-0.5, 0.1], 1.0, "stop", result,
                            extras={"domain": "retail", "task_id": task})


def test_records_cross_processes_whole_with_what_the_parent_has_sent_once():
    tools = [{"type": "function", "function": {"name": "find_user"}}]  # a domain's schemas; each episode copies the list
    other = [{"type": "function", "function": {"name": "find_user"}}]  # another domain's, equal
    sent = [record("0", [1, 2, 3], list(tools), 7), record("0", [1, 2, 3], list(tools), 8), record("1", [1, 9], list(tools), 9),
            record("1", [1, 9, 9], list(tools), 10),  # a sample whose prompt differs from its group's is sent whole
            record("2", [4], list(other), 11)]
    packer, unpacker = _Packer(), _Unpacker()
    wire = [pickle.dumps(packer.pack(r)) for r in sent]
    assert [pickle.loads(w)[1:] for w in wire] == [
        (0, True, False), (0, False, True), (0, False, False), (0, False, False), (1, True, False)]
    assert len(wire[1]) < len(wire[0]) and [vars(pickle.loads(w)[0].result)["tools"] for w in wire[1:4]] == [[]] * 3
    got = [unpacker.unpack(*pickle.loads(w)) for w in wire]
    for original, received in zip(sent, got, strict=True):
        assert (received.prompt_ids, received.response_ids, received.loss_mask, received.logprobs) == (
            original.prompt_ids, original.response_ids, original.loss_mask, original.logprobs)
        assert type(received.prompt_ids) is list and received.result.tools == tools
        assert "conversation" not in vars(received.result)  # the messages are not unpickled until read
        assert received.result.turns == 2 and received.result == original.result  # read: all of it, equal
    assert got[1].prompt_ids is not got[0].prompt_ids  # a copy: one record's list changed leaves the other's
    assert got[2].result.tools is not got[1].result.tools and got[4].result.tools == other
    assert sent[1].prompt_ids == [1, 2, 3] and sent[1].result.tools == tools  # what was sent is left as it was


def test_a_batch_over_two_worker_processes_gives_one_event_loops_trajectories(minimal, tokenizer):
    progress: list[tuple[int, bool]] = []
    sampler = replay_sampler(tokenizer)
    one_loop = build_generator(build_components(spec(dict(minimal), 1)), tokenizer, sampler)
    spread = build_generator(build_components(spec(minimal, 2)), tokenizer, sampler,
                             on_episode=lambda size, finished: progress.append((size, finished)))
    assert isinstance(spread, ProcessRollout)
    try:
        expected = asyncio.run(one_loop.run_batch(*batch(TASKS, samples=2)))
        calls = sampler.calls
        got = asyncio.run(spread.run_batch(*batch(TASKS, samples=2)))
        for key in ("prompt_ids", "response_ids", "loss_mask", "reward", "stop_reason", "logprobs", "extras"):
            assert [getattr(r, key) for r in got.records] == [getattr(r, key) for r in expected.records], key
        assert [r.reward for r in got.records] == [1.0] * 6
        assert [r.extras["task_id"] for r in got.records] == ["0", "0", "1", "1", "2", "2"]
        assert progress == [(6, False)] + [(6, True)] * 6
        pids = spread.worker_pids
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert calls > 0 and sampler.calls == calls  # every turn was sampled in the workers, by their own copies
        assert len(spread.loop_loads) == 2  # each worker's loop, measured there
        assert got.metrics["timing/rollout_loop_busy"] == max(load.busy for load in spread.loop_loads) > 0

        os.kill(pids[1], signal.SIGKILL)  # the second worker (task 1's samples) dies between batches
        broken = asyncio.run(spread.run_batch(*batch(TASKS, samples=2)))
        errors = [r.infra_error for r in broken.records]
        assert errors[2:4] == [errors[2]] * 2 and "died" in errors[2] and f"process {pids[1]}" in errors[2]
        assert errors[:2] == errors[4:] == [None, None] and [r.reward for r in broken.records] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
        assert broken.metrics["environment/infra_errors"] == 2.0 and len(spread.loop_loads) == 1

        again = asyncio.run(spread.run_batch(*batch(TASKS, samples=2)))  # a new worker takes the dead one's place
        assert [r.reward for r in again.records] == [1.0] * 6
        assert spread.worker_pids[0] == pids[0] and spread.worker_pids[1] not in pids
    finally:
        spread.close()
    assert spread.worker_pids == []


def no_script(prompt_ids: list[int], calls: int) -> str:  # pragma: no cover - VersionSampler writes its own turns
    raise AssertionError("not called")


class VersionSampler(ScriptedSampler):
    """Says which policy version it samples with, and ends the call (one turn an episode)."""

    async def sample(self, prompt_ids, params, session=None):
        ids = self.encode(f"policy version {self.policy_version} ###STOP###") + [self.eos_id]
        return SampleResult(ids, "", "stop", [-1.0] * len(ids))


def test_workers_sample_with_the_parents_policy_version_of_each_batch(minimal, tokenizer):
    """A worker's sampler is a copy made when the worker started; the policy version (SkyRL's weight version, which
    keys vLLM's prefix cache) moves on with each weight sync, and each batch's episodes sample with the parent's."""
    sampler = VersionSampler(no_script, functools.partial(tokenizer.encode, add_special_tokens=False), tokenizer.eos_token_id,
                             policy_version=1)
    spread = build_generator(build_components(spec(minimal, 2)), tokenizer, sampler)
    try:
        said = []
        for version in (1, 4, None):
            sampler.policy_version = version
            records = asyncio.run(spread.run_batch(*batch(TASKS[:2], samples=1))).records
            said.append({r.result.conversation[-1]["content"] for r in records})
        assert said == [{"policy version 1 ###STOP###"}, {"policy version 4 ###STOP###"}, {"policy version None ###STOP###"}]
    finally:
        spread.close()


def test_a_sampler_that_cannot_leave_its_process_is_refused_when_the_generator_is_built(minimal, tokenizer):
    sampler = ScriptedSampler(lambda ids, n: "hi", lambda text: tokenizer.encode(text), tokenizer.eos_token_id)
    with pytest.raises(ComponentError, match=r"processes: 2 sends the policy's sampler \(ScriptedSampler\).*set processes to 1"):
        build_generator(build_components(spec(minimal, 2)), tokenizer, sampler)


def test_a_worker_that_cannot_build_its_setup_fails_the_first_batch_with_its_traceback(minimal, tokenizer, tmp_path, monkeypatch):
    component = tmp_path / "my_rewards.py"
    component.write_text("from ctu.registry import registry\n")
    monkeypatch.chdir(tmp_path)
    minimal["imports"] = ["my_rewards.py"]
    generator = build_generator(build_components(spec(minimal, 2)), tokenizer, replay_sampler(tokenizer))
    component.unlink()  # the workers load the spec again, and its import is gone
    with pytest.raises(ComponentError, match=r"(?s)could not build its setup.*my_rewards\.py"):
        asyncio.run(generator.run_batch(*batch(TASKS[:1], samples=2)))
    assert generator.worker_pids == []


@pytest.mark.parametrize(("episodes", "cores", "processes"), [
    (256, 2, 1), (256, 3, 2), (256, 8, 2), (128, 64, 1), (129, 64, 2), (1024, 4, 3), (1024, 16, 8), (1024, 1, 1), (1, 1, 1),
])
def test_processes_auto_gives_a_loop_at_most_its_share_of_episodes_and_leaves_the_runner_a_core(episodes, cores, processes):
    assert EPISODES_PER_LOOP == 128
    assert auto_processes(episodes, cores) == processes


def test_processes_auto_spreads_a_large_batch_where_the_cores_and_the_sampler_allow(minimal, tokenizer, monkeypatch, caplog):
    """The machine's cores are a stand-in here (8: CI's machine has 2, where `auto` keeps one loop); what `auto`
    builds is checked, and the workers it starts are those the tests above run with an explicit count."""
    from ctu.backends.tinker.sampler import TinkerSampler

    assert spec(dict(minimal), "auto").rollout.generator.params.processes == "auto"
    assert "rollout" not in minimal
    assert spec_from_dict(minimal).spec.rollout.generator.params.processes == "auto"  # the default
    monkeypatch.setattr("ctu.rollout.setup.usable_cores", lambda: 8)
    caplog.set_level("INFO", logger="ctu.rollout.setup")

    def built(processes, episodes, sampler):
        return build_generator(build_components(spec(dict(minimal), processes, episodes)), tokenizer, sampler)

    spread = built("auto", 256, replay_sampler(tokenizer))
    try:
        assert isinstance(spread, ProcessRollout) and spread.processes == 2
        assert "256 concurrent episodes on 2 event loop(s) in worker processes (8 usable cores" in caplog.text
    finally:
        spread.close()
    assert type(built("auto", 128, replay_sampler(tokenizer))) is TauGenerator  # one loop holds it
    caplog.clear()
    unpicklable = ScriptedSampler(lambda ids, n: "hi", lambda text: tokenizer.encode(text), tokenizer.eos_token_id)
    assert type(built("auto", 1024, unpicklable)) is TauGenerator
    assert "as the loop sends the policy's sampler (ScriptedSampler) to worker processes, and it cannot be sent" in caplog.text
    training = TinkerSampler(client=None, process_bound=True)  # the Tinker training loop's
    pickle.dumps(training)  # it would cross; its runner swaps its client at every step, so it must not
    assert type(built("auto", 1024, training)) is TauGenerator
    with pytest.raises(ComponentError, match=r"processes: 2 sends the policy's sampler \(TinkerSampler\).*bound to this process"):
        built(2, 256, training)
    evaluated = built(2, 256, TinkerSampler(client=None))  # `ctu eval`'s, of one exported policy, goes to workers
    try:
        assert isinstance(evaluated, ProcessRollout)
    finally:
        evaluated.close()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin a process to one")
def test_usable_cores_are_the_ones_this_process_may_run_on():
    """A process pinned to one CPU (as a cluster's scheduler or `taskset` may pin the driver) counts one core,
    where `os.cpu_count()` counts the machine's: `processes: auto` then keeps every episode on its loop."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from ctu.rollout.processes import usable_cores; print(usable_cores(), os.cpu_count())")
    pinned, machine = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert pinned == 1 < machine
