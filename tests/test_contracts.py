"""Each kind's contract, declared by the module that owns the kind, is checked at registration: an incomplete
component fails where it is declared, with a message naming it, its file and what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctu.errors import RegistryError
from ctu.registry import KINDS, ComponentParams, registry


class Nothing:
    """A class with none of any kind's methods."""

    def __init__(self, params=None):
        self.params = params


MISSING = {
    "generators": ["no method loop_settings()", "no method build(loop)"],
    "parsers": ["no method parse(text)", "no method render_tools(tools)"],
    "rewards": ["no method async apply(reward, context)", "no class attribute `training_only` (bool)",
                "no class attribute `needs_judge` (bool)"],
    "judges": ["no method async judge(episode)"],
    "trackers": ["no method start(run_dir, run_name, project, config, resume_step=..., tags=...)", "no method log(metrics, step)",
                 "no method finish()"],
    "chat_templates": ["no method render(tokenizer, messages, tools, add_generation_prompt=...)",
                       "no method encode_text(tokenizer, text)", "no method decode(tokenizer, ids)",
                       "no class attribute `template_kwargs` (dict)"],
    "user_simulators": ["no method session(task, user_tools, trajectory, seed=...)"],
    "user_fault_detectors": ["no method async detect(episode)"],
    "domains": ["must subclass tau_bench_env.domains.Domain"],
    "task_generators": ["no method async propose(context)"],
    "backends": ["no method spec_errors(spec)", "no method spec_warnings(spec)", "no method deep_check(spec, run_dir)",
                 "no method plan(spec, run_dir)", "no method run(spec, run_dir, resume=..., progress=..., verbose=...)",
                 "no method policies(run_dir)", "no method open_policy(spec, policy, run_dir, work_dir, in_flight=...)"],
}


OWNERS = {
    "generators": "ctu.components.generators.base.GeneratorComponent", "parsers": "tau_bench_env.interfaces.Parser",
    "rewards": "ctu.components.rewards.base.Reward", "judges": "ctu.components.judges.base.Judge",
    "trackers": "ctu.components.trackers.base.Tracker", "chat_templates": "ctu.components.chat_templates.base.ChatTemplate",
    "user_simulators": "tau_bench_env.interfaces.UserSimulator",
    "user_fault_detectors": "ctu.components.user_fault_detectors.base.UserFaultDetector",
    "domains": "tau_bench_env.domains.Domain", "task_generators": "ctu.components.task_generators.base.TaskGenerator",
    "backends": "ctu.runners.backend.Backend",
}


def test_every_kind_has_the_contract_its_owner_declared():
    assert set(KINDS) == set(MISSING) == set(OWNERS)
    registry.rewards.names()  # the first lookup loads the entry points, and with them the kinds' owners
    assert {kind: getattr(registry[kind].contract, "source", None) for kind in KINDS} == OWNERS


HALF_A_BACKEND = """\
from ctu.registry import ComponentParams, registry


@registry.backends.register("half")
class HalfBackend:  # what the spec layer calls, and nothing a run needs
    Params = ComponentParams

    def __init__(self, params):
        self.params = params

    def spec_errors(self, spec):
        return iter(())

    def spec_warnings(self, spec):
        return iter(())
"""


def test_validate_checks_a_backend_for_the_whole_contract_run_needs(tmp_path: Path):
    """In a fresh `ctu validate` (which imports none of the runners itself) a user's backend with only the members
    a spec check calls is refused for those `ctu run` and `ctu eval` call, as `ctu run` refuses it."""
    (tmp_path / "half.py").write_text(HALF_A_BACKEND)
    spec = tmp_path / "spec.yaml"
    spec.write_text("imports: [half.py]\nexperiment: {name: half}\nmodel: {path: Qwen/Qwen2.5-3B-Instruct}\n"
                    "data: {train: [{domain: retail}]}\nenvironment: {user_simulator: {type: scripted}}\nbackend: {type: half}\n")
    for command in (["validate", str(spec)], ["run", str(spec), "--dry-run"]):
        result = subprocess.run([sys.executable, "-m", "ctu.cli", *command], capture_output=True, text=True, cwd=tmp_path,
                                env={**os.environ, "COLUMNS": "200"}, timeout=120)
        assert result.returncode == 2, result.stdout + result.stderr
        for missing in ("no method plan(spec, run_dir)", "no method run(", "no method open_policy("):
            assert missing in result.stderr, result.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_an_incomplete_component_of_each_kind_fails_at_registration(kind):
    with pytest.raises(RegistryError) as info:
        registry[kind].register("incomplete_test")(Nothing)
    message = str(info.value)
    assert f"{kind} component 'incomplete_test'" in message
    assert "test_contracts.py:" in message  # the file and line of the class
    for missing in MISSING[kind]:
        assert missing in message
    assert "incomplete_test" not in registry[kind]


def test_every_builtin_meets_its_contract():
    from ctu.registry.contracts import contract_problems

    for kind in KINDS:
        for info in registry[kind]:
            assert contract_problems(registry[kind].contract, info.factory) == [], (kind, info.name)


@pytest.fixture
def cleanup():
    yield
    for kind in KINDS:
        registry[kind].unregister("contract_test")
    registry.user_simulators.unregister("contract_test_current")


def test_a_wrong_signature_and_a_sync_method_are_named(cleanup):
    with pytest.raises(RegistryError) as info:

        @registry.rewards.register("contract_test")
        class SyncReward:
            """Forgets `async` and the context argument."""

            training_only = False
            needs_judge = "no"

            def __init__(self, params):
                self.params = params

            def apply(self, reward):
                return reward

    message = str(info.value)
    assert "apply(self, reward) cannot be called as async apply(reward, context)" in message
    assert "class attribute `needs_judge` must be a bool, got 'no'" in message


def test_a_constructor_that_takes_no_params_is_named(cleanup):
    with pytest.raises(RegistryError, match=r"constructor NoParams\(\) cannot be called as NoParams\(params\)"):

        @registry.judges.register("contract_test")
        class NoParams:
            """A judge whose constructor takes nothing."""

            def __init__(self):
                pass

            async def judge(self, episode):
                raise NotImplementedError


def test_a_reward_that_needs_a_judge_takes_it_in_its_constructor(cleanup):
    """The composition root builds it as ``cls(params, judge=...)``; one that takes only params is named."""
    with pytest.raises(RegistryError, match=r"constructor NoJudge\(params\) cannot be called as NoJudge\(params, judge=\.\.\.\)"):

        @registry.rewards.register("contract_test")
        class NoJudge:
            """Asks for a judge and has nowhere to take it."""

            training_only = True
            needs_judge = True

            def __init__(self, params):
                self.params = params

            async def apply(self, reward, context):
                return reward

    @registry.rewards.register("contract_test")
    class WithJudge:
        training_only = True
        needs_judge = True

        def __init__(self, params, judge):
            self.params, self.judge = params, judge

        async def apply(self, reward, context):
            return reward

    assert registry.rewards.get("contract_test").build(registry.rewards.get("contract_test").params_model(), judge="J").judge == "J"


def test_a_custom_domain_must_define_its_environment_and_tasks(cleanup):
    from ctu.components.domains import Domain

    with pytest.raises(RegistryError) as info:

        @registry.domains.register("contract_test")
        class Half(Domain):
            """Defines tasks but no environment."""

            def load_tasks(self, split):
                return []

    assert "must define make_environment()" in str(info.value)
    assert "load_tasks" not in str(info.value)


def test_a_factory_function_is_checked_when_it_builds(cleanup):
    @registry.parsers.register("contract_test")
    def make_parser(params: ComponentParams) -> object:
        """A factory whose product is no parser."""
        return Nothing(params)

    info = registry.parsers.get("contract_test")
    with pytest.raises(RegistryError, match=r"(?s)parsers component 'contract_test' .*no method parse\(text\)"):
        info.build(info.params_model())


def test_static_and_class_methods_count(cleanup):
    @registry.user_simulators.register("contract_test")
    class Static:
        """A user simulator whose session factory is a static method."""

        def __init__(self, params):
            self.params = params

        @staticmethod
        def session(task, user_tools, trajectory, *, seed=None):
            raise NotImplementedError

    assert "contract_test" in registry.user_simulators


def test_a_component_written_before_an_optional_argument_was_added_keeps_working_with_a_warning(cleanup, caplog):
    """`seed` joined `UserSimulator.session` after users wrote simulators to the earlier contract: theirs still
    registers, naming what to add, and ctu's calls reach it without the argument it does not take."""
    sessions = []

    @registry.user_simulators.register("contract_test")
    class Older:
        """A user simulator of the earlier contract: session(task, user_tools, trajectory)."""

        def __init__(self, params):
            self.params = params

        def session(self, task, user_tools, trajectory):
            sessions.append((task, user_tools, trajectory))
            return "a session"

    assert "session takes no `seed`: ctu calls it without (deprecated; accept seed=None" in caplog.text
    info = registry.user_simulators.get("contract_test")
    simulator = info.build(info.params_model())
    assert simulator.session("task", None, [], seed=7) == "a session"  # as tau_bench_env's episode calls it
    assert sessions == [("task", None, [])]
    caplog.clear()

    @registry.user_simulators.register("contract_test_current")
    class Current(Older):
        """Of the current contract: no warning, and the seed reaches it."""

        def session(self, task, user_tools, trajectory, *, seed=None):
            sessions.append(seed)
            return "a session"

    assert "deprecated" not in caplog.text
    info = registry.user_simulators.get("contract_test_current")
    info.build(info.params_model()).session("task", None, [], seed=7)
    assert sessions[-1] == 7
