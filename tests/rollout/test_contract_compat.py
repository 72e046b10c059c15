"""Components written to earlier versions of the generator and user-simulator contracts keep working, with a
deprecation warning."""

from __future__ import annotations

import asyncio

import pytest

from ctu.rollout.build import build_generator
from ctu.rollout.requests import EpisodeRequest, TaskRow

from .conftest import TASKS, ReplayScript, batch, components, run, scripted_sampler


def test_a_generator_component_written_to_the_contract_before_episode_requests_keeps_working_with_a_warning(minimal, tokenizer, caplog):
    """A user's wrapper around ctu's loop from before `EpisodeRequest` (`run_batch(prompts, extras, phase, step)`,
    `run_episode(prompt, extras, phase, repetition)`, forwarding those to the loop): it builds with a warning naming
    the change, the runners' calls reach it through an adapter, and its own calls reach ctu's loop."""
    from ctu.components.generators.base import LoopSettings
    from ctu.registry import registry
    from ctu.rollout.build import OlderRollout

    class Older:
        def __init__(self, loop):
            self.loop, self.seen = loop, []

        async def run_batch(self, prompts, extras, phase, step):
            self.seen.append([extra["task_id"] for extra in extras])
            return await self.loop.run_batch(prompts, extras, phase, step)

        async def run_episode(self, prompt, extras, phase, repetition=0):
            self.seen.append((extras["task_id"], repetition))
            return await self.loop.run_episode(prompt, extras, phase, repetition)

    @registry.generators.register("older_rollout_test")
    class OlderComponent:
        """ctu's loop in a wrapper of the older rollout contract."""

        def __init__(self, params):
            self.params = params

        def loop_settings(self):
            return LoopSettings(processes=1)

        def build(self, loop):
            return Older(loop)

    try:
        script = ReplayScript(tokenizer, "retail", TASKS[:2])
        with pytest.warns(DeprecationWarning, match="before EpisodeRequest"):
            generator = build_generator(components(minimal, rollout={"generator": "older_rollout_test"}), tokenizer,
                                        scripted_sampler(tokenizer, script))
        assert isinstance(generator, OlderRollout)
        with pytest.warns(DeprecationWarning, match=r"run_batch\(prompts, extras, phase, step\)"):
            output = run(generator, batch(TASKS[:2]))
        assert [r.reward for r in output.records] == [1.0] * 4  # the gold replays, through both adapters
        assert generator.inner.seen == [[TASKS[0], TASKS[0], TASKS[1], TASKS[1]]]
        with pytest.warns(DeprecationWarning, match=r"run_episode\(prompt, extras, phase, repetition\)"):
            record = asyncio.run(generator.run_episode(EpisodeRequest(TaskRow("retail", TASKS[1]), sample=1), "eval"))
        assert record.reward == 1.0 and generator.inner.seen[-1] == (TASKS[1], 1)
        assert "take `requests` and `request`" in caplog.text
    finally:
        registry.generators.unregister("older_rollout_test")


OLDER_USER = '''
"""A user simulator written to the contract before `seed`: session(task, user_tools, trajectory)."""
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.registry import ComponentParams, registry


@registry.user_simulators.register("older_file_user")
class OlderUser:
    """tau2's scripted customer behind the earlier session signature."""

    class Params(ComponentParams):
        pass

    def __init__(self, params):
        self.inner = ScriptedUserSimulator()

    def session(self, task, user_tools, trajectory):
        return self.inner.session(task, user_tools, trajectory)
'''

OLDER_GENERATOR = '''
"""A generator component written to the rollout contract before EpisodeRequest."""
from ctu.components.generators.base import LoopSettings
from ctu.registry import ComponentParams, registry


class Counting:
    def __init__(self, loop):
        self.loop, self.batches = loop, 0

    async def run_batch(self, prompts, extras, phase, step):
        self.batches += 1
        return await self.loop.run_batch(prompts, extras, phase, step)

    async def run_episode(self, prompt, extras, phase, repetition=0):
        return await self.loop.run_episode(prompt, extras, phase, repetition)


@registry.generators.register("older_file_generator")
class OlderGenerator:
    """ctu's loop behind the earlier run_batch(prompts, extras, phase, step)."""

    class Params(ComponentParams):
        pass

    def __init__(self, params):
        self.params = params

    def loop_settings(self):
        return LoopSettings(processes=1)

    def build(self, loop):
        return Counting(loop)
'''


def test_component_files_written_to_each_earlier_contract_load_and_play_with_deprecation_warnings(minimal, tokenizer, tmp_path, caplog):
    """A user's files as they were written before `seed` joined `UserSimulator.session` and before `EpisodeRequest`
    joined the rollout contract, named by a spec's `imports:` as a user names them: the spec loads, each component
    says what to change, and the batch plays the gold replays through both (rewards 1.0)."""
    from ctu.registry import registry

    (tmp_path / "older_user.py").write_text(OLDER_USER)
    (tmp_path / "older_generator.py").write_text(OLDER_GENERATOR)
    try:
        with pytest.warns(DeprecationWarning):
            built = components(minimal, imports=[str(tmp_path / "older_user.py"), str(tmp_path / "older_generator.py")],
                               environment={"user_simulator": "older_file_user"},
                               rollout={"generator": "older_file_generator"})
            generator = build_generator(built, tokenizer, scripted_sampler(tokenizer, ReplayScript(tokenizer, "retail", TASKS[:1])))
            output = run(generator, batch(TASKS[:1]))
        assert [r.reward for r in output.records] == [1.0, 1.0] and generator.inner.batches == 1
        assert "session takes no `seed`" in caplog.text and "before EpisodeRequest" in caplog.text
    finally:
        for kind, name in (("user_simulators", "older_file_user"), ("generators", "older_file_generator")):
            if name in registry[kind]:
                registry[kind].unregister(name)
