"""The registry: decorator registration, duplicates, lookups with suggestions, entry points, the catalogue."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import catalogue
import pytest

from ctu.errors import ComponentError, RegistryError
from ctu.registry import KINDS, ComponentParams, registry
from ctu.spec import SpecError, spec_from_dict

from .conftest import REPO


@pytest.fixture
def scratch_parser():
    """Registers nothing itself; removes `scratch*` parsers registered by a test."""
    yield
    for name in list(registry.parsers.names()):
        if name.startswith("scratch"):
            registry.parsers.unregister(name)


class CompleteParser:
    """A parser that meets the parsers' contract (subclassed by the tests that need a fresh class)."""

    def __init__(self, params=None):
        self.params = params

    def parse(self, text):
        from ctu.components.parsers import ParsedTurn

        return ParsedTurn(text.strip())

    def render_tools(self, tools):
        return ""


def test_registered_component_params_are_checked_in_specs(minimal, scratch_parser):
    @registry.parsers.register("scratch")
    class Scratch(CompleteParser):
        """A parser for this test."""

        class Params(ComponentParams):
            strict: bool = False

    minimal["rollout"] = {"parser": {"type": "scratch", "strict": True}}
    spec = spec_from_dict(minimal).spec
    assert spec.rollout.parser.type == "scratch"
    assert spec.rollout.parser.params.strict is True
    assert isinstance(spec.rollout.parser.build(), Scratch)

    minimal["rollout"] = {"parser": {"type": "scratch", "strikt": True}}
    with pytest.raises(SpecError) as info:
        spec_from_dict(minimal)
    (issue,) = info.value.issues
    assert issue.path == "rollout.parser.strikt"
    assert "did you mean 'strict'" in issue.message


def test_registering_a_name_twice_names_both_places(scratch_parser):
    @registry.parsers.register("scratch_dup")
    class First(CompleteParser):
        pass

    with pytest.raises(RegistryError) as info:

        @registry.parsers.register("scratch_dup")
        class Second(CompleteParser):
            pass

    message = str(info.value)
    assert "registered twice" in message
    assert message.count("test_registry.py:") == 2


def test_registering_the_same_object_again_is_harmless(scratch_parser):
    class Same(CompleteParser):
        pass

    registry.parsers.register("scratch_same")(Same)
    registry.parsers.register("scratch_same")(Same)
    assert registry.parsers.get("scratch_same").factory is Same


def test_params_model_must_be_component_params(scratch_parser):
    from pydantic import BaseModel

    class Loose(BaseModel):
        x: int = 1

    with pytest.raises(RegistryError, match=r"must subclass ctu\.registry\.ComponentParams"):
        registry.parsers.register("scratch_bad", params=Loose)(object)


def test_bad_names_are_rejected(scratch_parser):
    with pytest.raises(RegistryError, match="lowercase"):
        registry.parsers.register("Scratch Bad")(object)


def test_lookup_errors_name_kind_and_closest_names():
    with pytest.raises(ComponentError) as info:
        registry.parsers.get("hermse")
    message = str(info.value)
    assert "parsers" in message and "'hermse'" in message and "did you mean 'hermes'" in message
    with pytest.raises(ComponentError, match="did you mean 'parsers'"):
        registry["parser"]


def test_entry_points_register_third_party_components(monkeypatch, scratch_parser):
    module = types.ModuleType("ctu_scratch_plugin")

    class PluginParser(CompleteParser):
        """A third-party parser."""

        class Params(ComponentParams):
            level: int = 1

    module.PluginParser = PluginParser
    monkeypatch.setitem(sys.modules, "ctu_scratch_plugin", module)
    entry_point = importlib.metadata.EntryPoint(
        name="scratch_plugin", value="ctu_scratch_plugin:PluginParser", group="ctu_parsers"
    )
    monkeypatch.setattr(catalogue, "AVAILABLE_ENTRY_POINTS", importlib.metadata.EntryPoints([entry_point]))
    registry.parsers.load_entry_points()
    info = registry.parsers.get("scratch_plugin")
    assert info.factory is PluginParser
    assert info.params_model is PluginParser.Params
    assert "ctu_parsers" in info.origin


def test_broken_entry_point_is_a_clear_error(monkeypatch):
    entry_point = importlib.metadata.EntryPoint(name="scratch_broken", value="no_such_module_xyz:Thing", group="ctu_parsers")
    monkeypatch.setattr(catalogue, "AVAILABLE_ENTRY_POINTS", importlib.metadata.EntryPoints([entry_point]))
    with pytest.raises(ComponentError, match=r"scratch_broken.*failed to load.*ModuleNotFoundError"):
        registry.parsers.load_entry_points()


def test_entry_point_clashing_with_a_builtin_is_an_error(monkeypatch):
    entry_point = importlib.metadata.EntryPoint(name="hermes", value="json:loads", group="ctu_parsers")
    monkeypatch.setattr(catalogue, "AVAILABLE_ENTRY_POINTS", importlib.metadata.EntryPoints([entry_point]))
    with pytest.raises(RegistryError, match=r"'hermes' is registered twice.*hermes\.py.*json:loads"):
        registry.parsers.load_entry_points()


CATALOGUE = REPO / "tests" / "registered_components.txt"


def test_catalogue_of_builtin_names_is_pinned():
    """A rename or a lost registration shows up here; update the file on purpose (`kind: name` lines). Only ctu's
    own components count: tests earlier in the session may have imported a spec's user code (examples/)."""
    from ctu.registry.imports import PACKAGE

    current = [f"{kind}: {info.name}" for kind in KINDS for info in registry[kind]
               if not getattr(info.factory, "__module__", "").startswith(PACKAGE)]
    assert current == CATALOGUE.read_text().split("\n")[:-1]


def test_every_component_has_a_description_and_documented_params():
    for kind in KINDS:
        for info in registry[kind]:
            assert info.description, f"{kind}: {info.name} has no docstring"
            for name, field in info.params_model.model_fields.items():
                assert field.description, f"{kind}: {info.name} param {name!r} has no docstring"


def test_a_judge_based_reward_on_the_base_class_needs_no_constructor_and_no_borrowed_description():
    """A reward written on `BaseReward` with `needs_judge` gets its judge from the base's constructor; a component
    without a docstring of its own is described as "" by `ctu components`, never with its base class's words."""
    from ctu.components.rewards.base import BaseReward
    from ctu.composition import build_components
    from ctu.spec import load_spec

    @registry.rewards.register("judged_test")
    class JudgedReward(BaseReward):
        needs_judge = True

        async def apply(self, reward, context):
            return reward

    try:
        spec = load_spec(REPO / "specs" / "smoke.yaml", ["rewards=[tau_outcome, judged_test]"]).spec
        [(_, _), (name, built)] = build_components(spec).rewards["train"].components
        assert name == "judged_test" and built.judge is not None and type(built.judge).__name__ == "RuleTaxonomyJudge"
        assert registry.rewards.get("judged_test").description == ""
        assert registry.rewards.get("tau_outcome").description.startswith("The environment's tau2 reward")
    finally:
        registry.rewards.unregister("judged_test")
