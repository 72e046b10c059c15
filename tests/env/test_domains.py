"""Domains: tau2's splits, and a user's own domain registered with a decorator."""

from __future__ import annotations

import asyncio
import json

import pytest

from ctu.components.domains import Domain, build_domain
from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.registry import registry
from tau_bench_env.domains import tau2_domain
from tau_bench_env.episode import Episode
from tau_bench_env.outcome import EpisodeConfig
from tau_bench_env.replay import GoldReplayAgent, play


@pytest.mark.parametrize("name", ["retail", "airline", "telecom", "mock"])
def test_declared_splits_are_tau2s(name):
    from tau2.utils import DATA_DIR

    split_file = DATA_DIR / "tau2" / "domains" / name / "split_tasks.json"
    assert set(tau2_domain(name).splits) == set(json.loads(split_file.read_text()))


def test_split_sizes():
    sizes = {name: {s: len(tau2_domain(name).tasks(s)) for s in ("train", "test")} for name in ("retail", "airline", "telecom")}
    assert sizes == {"retail": {"train": 74, "test": 40}, "airline": {"train": 30, "test": 20}, "telecom": {"train": 74, "test": 40}}
    assert len(tau2_domain("telecom").tasks("small")) == 20


def test_unknown_split_is_a_value_error():
    with pytest.raises(ValueError, match="no split 'dev'"):
        tau2_domain("retail").tasks("dev")


@pytest.fixture
def clinic():
    """A custom domain: tau2's mock tools and database under another name, with tasks of its own."""

    @registry.domains.register("clinic_test")
    class Clinic(Domain):
        """A test-only custom domain."""

        splits = ("base",)

        def make_environment(self):
            from tau2.domains.mock.environment import get_environment

            return get_environment()

        def load_tasks(self, split):
            from tau2.domains.mock.environment import get_tasks

            return [task for task in get_tasks() if not (task.initial_state and task.initial_state.message_history)]

    yield Clinic
    registry.domains.unregister("clinic_test")


def test_custom_domain_plays_and_is_scored_by_tau2(clinic, minimal):
    from ctu.spec import spec_from_dict

    minimal["data"] = {"train": [{"domain": "clinic_test", "split": "base"}]}
    spec_from_dict(minimal)  # a spec accepts the registered domain
    domain = build_domain("clinic_test", {})  # from ctu's registry, as the composition root builds it
    assert domain.name == "clinic_test"
    rewards = []
    for task in domain.tasks("base"):
        episode = Episode(domain, task, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=40))
        rewards.append(asyncio.run(play(episode, GoldReplayAgent(task))).reward)
    assert rewards and all(r == 1.0 for r in rewards)
