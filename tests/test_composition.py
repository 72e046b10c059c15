"""The composition root builds every component of a spec once, judges bound, chains per phase."""

from __future__ import annotations

from ctu.components.trackers.jsonl import JsonlTracker
from ctu.composition import build_components
from ctu.spec import spec_from_dict


def test_rewards_get_their_judges_at_build_time_and_evaluation_never_sees_training_only_ones(minimal):
    own = {"type": "rule_taxonomy", "taxonomy": {"no_error": 0.5}}
    minimal["judge"] = {"type": "rule_taxonomy"}
    minimal["rewards"] = ["tau_outcome", {"type": "taxonomy_feedback", "weight": 0.1},
                          {"type": "taxonomy_feedback", "weight": 0.2}, {"type": "taxonomy_feedback", "judge": own}]
    components = build_components(spec_from_dict(minimal).spec)
    train = [c for _, c in components.rewards["train"].components]
    shared, again, separate = train[1:]
    assert shared.judge is not None and shared.judge is again.judge  # one judge object per judge config
    assert separate.judge is not shared.judge and separate.judge.params.taxonomy["no_error"] == 0.5
    assert [name for name, _ in components.rewards["eval"].components] == ["tau_outcome"]
    assert components.rewards["eval"].components[0][1] is train[0]


def test_the_trackers_project_says_when_training_had_judge_feedback(minimal):
    minimal["tracking"] = {"project": "tau"}
    assert build_components(spec_from_dict(minimal).spec).project == "tau"
    minimal["judge"] = {"type": "rule_taxonomy"}
    minimal["rewards"] = ["tau_outcome", {"type": "taxonomy_feedback", "weight": 0.1}, {"type": "taxonomy_feedback", "weight": 0.2}]
    assert build_components(spec_from_dict(minimal).spec).project == "tau_with_taxonomy_feedback"


def test_every_run_gets_a_metrics_file_tracker(minimal):
    minimal["tracking"] = {"trackers": ["console"]}
    trackers = build_components(spec_from_dict(minimal).spec).trackers.trackers
    assert [type(t).__name__ for t in trackers] == ["ConsoleTracker", "JsonlTracker"]
    assert isinstance(trackers[-1], JsonlTracker) and trackers[-1].params.filename == "metrics.jsonl"


def test_a_generator_component_sets_the_loop_and_wraps_it_and_must_keep_the_contract(minimal):
    """`build_generator` builds ctu's loop as the component's `loop_settings()` say and hands it to `build`: a
    wrapper that keeps the contract is what the runners get, a bare SkyRL-style generator (only `generate`) is
    refused naming what it lacks."""
    import pytest

    from ctu.components.generators.base import LoopSettings
    from ctu.errors import ComponentError
    from ctu.registry import registry
    from ctu.rollout.build import build_generator
    from ctu.rollout.generator import TauGenerator
    from ctu.rollout.records import Rollout

    class OnlyGenerate:
        async def generate(self, input_batch):
            return {}

    class Counting:
        """Counts the batches it passes to ctu's loop."""

        def __init__(self, loop):
            self.loop, self.batches = loop, 0

        async def run_batch(self, requests, phase, step):
            self.batches += 1
            return await self.loop.run_batch(requests, phase, step)

        async def run_episode(self, request, phase):
            return await self.loop.run_episode(request, phase)

    @registry.generators.register("counting_test")
    class CountingComponent:
        """ctu's loop, 3 episodes at a time on this process's event loop, its batches counted."""

        def __init__(self, params):
            self.params = params

        def loop_settings(self):
            return LoopSettings(max_concurrent_episodes=3, processes=1)

        def build(self, loop):
            return Counting(loop)

    @registry.generators.register("only_generate_test")
    class OnlyGenerateComponent:
        """Builds a SkyRL generator (`generate`), without ctu's rollout contract."""

        def __init__(self, params):
            self.params = params

        def loop_settings(self):
            return LoopSettings()

        def build(self, loop):
            return OnlyGenerate()

    from transformers import AutoTokenizer

    from ctu.models.tiny_qwen3 import tokenizer_path

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path()))
    try:
        own = build_components(spec_from_dict(minimal).spec)
        assert isinstance(build_generator(own, tokenizer, sampler=None), Rollout)
        minimal["rollout"] = {"generator": "counting_test"}
        wrapped = build_generator(build_components(spec_from_dict(minimal).spec), tokenizer, sampler=None)
        assert isinstance(wrapped, Counting) and isinstance(wrapped.loop, TauGenerator)
        assert wrapped.loop.setup.max_concurrent_episodes == 3
        minimal["rollout"] = {"generator": "only_generate_test"}
        components = build_components(spec_from_dict(minimal).spec)
        with pytest.raises(ComponentError, match=r"lacks ctu's rollout contract.*: run_batch, run_episode"):
            build_generator(components, tokenizer, sampler=None)
    finally:
        registry.generators.unregister("only_generate_test")
        registry.generators.unregister("counting_test")
